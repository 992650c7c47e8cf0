"""capplan estimator: per-GPU training memory, step time and cost for LLM training layouts.

Pure domain library: typed, frozen inputs in, typed results out, bytes as integers. No web, database or
plotting imports. The entry points, their requests and responses, and the errors they raise:

- :func:`estimate` (one layout on one hardware choice: memory, step time, time to train, host sizing, bill of
  materials), :func:`list_presets`;
- :func:`plan` (search every layout: ranked plans with their exports) and :func:`answer` (reverse questions:
  fewest GPUs, largest model, longest sequence);
- TCO: :func:`tco_options`, :func:`ownership_tco`, :func:`own_vs_cloud`, :func:`compare_job`,
  :func:`compare_upgrade`, and rack planning :func:`plan_rack_for_server`.

Everything else is reachable by its module (``docs/architecture.md`` maps them).
"""

from estimator.errors import (
    EstimatorError,
    InvalidRequestError,
    ModelConfigError,
    UnknownHardwareError,
    UnknownModelError,
    UnsupportedCombinationError,
)
from estimator.estimate import estimate
from estimator.modelspec import list_presets
from estimator.planner.contract import PlanRequest, PlanResponse
from estimator.planner.plan import plan
from estimator.planner.reverse import ReverseRequest, ReverseResponse, answer
from estimator.rack import RackPlan, plan_rack_for_server
from estimator.request import EstimateRequest, Hardware, Parallelism, Training
from estimator.response import EstimateResponse
from estimator.tco import (
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
from estimator.version import ESTIMATOR_VERSION

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
