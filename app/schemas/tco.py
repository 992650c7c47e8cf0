"""``POST /tco``: owning servers versus renting cloud GPUs, and optionally what one training run costs.
``POST /tco/upgrade``: "when should I move from 8x A100 to 8x H100?" for one job."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from estimator import EstimateRequest, EstimateResponse
from estimator.facility.rack import RackPlan
from estimator.messages import Message
from estimator.tco import AssumptionRow, JobCost, OwnVsCloud, RunCost, TcoAssumptions, TcoOption, UpgradeAnswer

__all__ = [
    "DEFAULT_CANDIDATE",
    "DEFAULT_CURRENT",
    "TcoRack",
    "TcoRequest",
    "TcoResponse",
    "UpgradeHorizon",
    "UpgradeRequest",
    "UpgradeResponse",
    "UpgradeSide",
    "UpgradeSideResult",
]

#: the seed question's servers: the same Dell chassis with 8x A100 80GB (500 W) and with 8x H100 SXM5
DEFAULT_CURRENT = "dell-xe9680-a100"
DEFAULT_CANDIDATE = "dell-xe9680-h100"

class TcoRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    server: str = Field(min_length=1, max_length=200, description="the server to own (a catalog id)")
    num_nodes: int = Field(default=1, ge=1, le=100_000)
    server_price_usd: float | None = Field(default=None, gt=0, le=1e10,
                                           description="a quoted price instead of the catalog's")
    offer_id: str | None = Field(default=None, min_length=1, max_length=200,
                                 description="the cloud offer to set against owning (it must rent the server's "
                                             "GPU); default the cheapest")
    assumptions: TcoAssumptions = Field(default_factory=TcoAssumptions,
                                        description="every TCO assumption; omitted ones take the catalog default")
    job: EstimateRequest | None = Field(
        default=None,
        description="a training job to cost per run, owned and on every cloud offer. Its hardware is replaced "
                    "by `server` and `num_nodes`; it needs `training.train_tokens` (at least one step's tokens).",
    )


class TcoRack(BaseModel):
    """Rack planning for the owned servers: the rack plan at the node's provisioning (peak) power, and its power
    at load (GPUs at TDP + the rest of the server)."""

    plan: RackPlan = Field(description="nodes per rack at `assumptions.rack_kw`, on the peak power of a node")
    kw_per_node_at_load: float = Field(description="GPUs at TDP + the rest of the server (kW)")
    btu_per_hour_per_node_at_load: float
    racks_needed: int | None = Field(description="racks for `num_nodes` (null when a node does not fit a rack)")


class TcoResponse(BaseModel):
    server: str
    num_nodes: int
    catalog_version: str = Field(description="version of the effective catalog the figures come from")
    options: list[TcoOption] = Field(description="owning, then each cloud offer of the same GPUs, over the horizon")
    own_vs_cloud: OwnVsCloud | None = Field(
        description="monthly costs, cumulative spend and the break-even month; null when no cloud offer rents "
                    "this GPU (see `notes`)")
    rack: TcoRack
    assumptions: list[AssumptionRow] = Field(description="every assumption used, with its default and source")
    job: JobCost | None = Field(description="the job as costed (null without `job`)")
    runs: list[RunCost] = Field(description="the job's cost per run on each option, cheapest first")
    estimate: EstimateResponse | None = Field(description="the job's estimate on the owned servers")
    notes: list[Message] = Field(default_factory=list, description="what was left out, and why")


class UpgradeSide(BaseModel):
    """One side of the upgrade: owned servers of one catalog model."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    server: str = Field(min_length=1, max_length=200, description="a catalog server id")
    num_nodes: int = Field(default=1, ge=1, le=100_000)
    server_price_usd: float | None = Field(default=None, gt=0, le=1e10,
                                           description="a quoted price instead of the catalog's")


class UpgradeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    job: EstimateRequest = Field(
        description="the training job (the estimate request contract); its hardware is replaced by each side's "
                    "server (all its GPUs) and node count, and it needs `training.train_tokens`")
    current: UpgradeSide = Field(default_factory=lambda: UpgradeSide(server=DEFAULT_CURRENT),
                                 description=f"what you run now (default {DEFAULT_CURRENT})")
    candidate: UpgradeSide = Field(default_factory=lambda: UpgradeSide(server=DEFAULT_CANDIDATE),
                                   description=f"what you might move to (default {DEFAULT_CANDIDATE})")
    assumptions: TcoAssumptions = Field(
        default_factory=TcoAssumptions,
        description="every TCO assumption; `horizon_years` is the horizon of the answer and `depreciation_years` "
                    "the life the payback is set against")


class UpgradeSideResult(BaseModel):
    server: str
    server_name: str
    gpu: str
    num_nodes: int
    num_gpus: int
    fits: bool = Field(description="the job fits the GPU memory on this side")
    time_to_train_s: float
    server_price_usd: float
    server_price_estimated: bool
    server_price_source: str


class UpgradeHorizon(BaseModel):
    """The answer over `assumptions.horizon_years` of back-to-back runs on the candidate."""

    years: float
    runs: float = Field(description="runs of the job on the candidate in the horizon, at the utilisation")
    time_saved_s: float
    cost_difference_usd: float = Field(description="candidate minus current, owned, amortised (negative: saves)")


class UpgradeResponse(BaseModel):
    catalog_version: str
    current: UpgradeSideResult
    candidate: UpgradeSideResult
    answer: UpgradeAnswer = Field(description="time saved, cost difference per run, payback and the verdict")
    horizon: UpgradeHorizon
    verdict: Message = Field(description="the answer in plain words (`answer.summary`)")
    assumptions: list[AssumptionRow]
    notes: list[Message] = Field(default_factory=list)
