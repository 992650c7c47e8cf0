"""capplan estimator: per-GPU training memory, step time and cost for LLM training layouts.

Pure domain library: typed, frozen inputs in, typed results out, bytes as integers. No web, database or
plotting imports. The entry points, their requests and responses, and the errors they raise:

- :func:`estimate` (one layout on one hardware choice: memory, step time, time to train, host sizing, bill of
  materials), :func:`list_presets`;
- :func:`plan` (search every layout: ranked plans with their exports) and :func:`answer` (reverse questions:
  fewest GPUs, largest model, longest sequence);
- TCO: :func:`tco_options`, :func:`ownership_tco`, :func:`own_vs_cloud`, :func:`compare_job`,
  :func:`compare_upgrade`, and rack planning :func:`plan_rack_for_server`.

Everything else is reachable by its module (``docs/architecture.md`` maps them). When a compiled build of the
package matches its sources, its modules are the ones imported (:mod:`estimator.native`, docs/native.md).
"""

from estimator import native

native.install()

from estimator.errors import (  # noqa: E402 (after the compiled build's finder is in place)
    EstimatorError,
    InvalidRequestError,
    ModelConfigError,
    UnknownHardwareError,
    UnknownModelError,
    UnsupportedCombinationError,
)
from estimator.estimate import estimate  # noqa: E402
from estimator.facility.rack import RackPlan, plan_rack_for_server  # noqa: E402
from estimator.model.spec import list_presets  # noqa: E402
from estimator.planner.contract import PlanRequest, PlanResponse  # noqa: E402
from estimator.planner.plan import plan  # noqa: E402
from estimator.planner.reverse import ReverseRequest, ReverseResponse, answer  # noqa: E402
from estimator.request import EstimateRequest, Hardware, Parallelism, Training  # noqa: E402
from estimator.response import ESTIMATOR_VERSION, EstimateResponse  # noqa: E402
from estimator.tco import (  # noqa: E402
    JobCost,
    OwnershipTco,
    OwnVsCloud,
    RunCost,
    TcoAssumptions,
    TcoOption,
    UpgradeAnswer,
    compare_job,
    compare_upgrade,
    own_vs_cloud,
    ownership_tco,
    tco_options,
)

__all__ = [
    "ESTIMATOR_VERSION",
    "EstimateRequest",
    "EstimateResponse",
    "EstimatorError",
    "Hardware",
    "InvalidRequestError",
    "JobCost",
    "ModelConfigError",
    "OwnVsCloud",
    "OwnershipTco",
    "Parallelism",
    "PlanRequest",
    "PlanResponse",
    "RackPlan",
    "ReverseRequest",
    "ReverseResponse",
    "RunCost",
    "TcoAssumptions",
    "TcoOption",
    "Training",
    "UnknownHardwareError",
    "UnknownModelError",
    "UnsupportedCombinationError",
    "UpgradeAnswer",
    "answer",
    "compare_job",
    "compare_upgrade",
    "estimate",
    "list_presets",
    "own_vs_cloud",
    "ownership_tco",
    "plan",
    "plan_rack_for_server",
    "tco_options",
]
