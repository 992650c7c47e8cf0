"""``POST /tco``: owning servers versus renting cloud GPUs, and optionally what one training run costs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from estimator import EstimateRequest, EstimateResponse
from estimator.tco import AssumptionRow, JobCost, OwnVsCloud, RunCost, TcoAssumptions, TcoOption

__all__ = ["TcoRequest", "TcoResponse"]


class TcoRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str = Field(min_length=1, max_length=200, description="the server to own (a catalog id)")
    num_nodes: int = Field(default=1, ge=1, le=100_000)
    server_price_usd: float | None = Field(default=None, gt=0, le=1e10,
                                           description="a quoted price instead of the catalog's")
    offer_id: str | None = Field(default=None, min_length=1, max_length=200,
                                 description="the cloud offer to set against owning; default the cheapest")
    assumptions: TcoAssumptions = Field(default_factory=TcoAssumptions,
                                        description="every TCO assumption; omitted ones take the catalog default")
    job: EstimateRequest | None = Field(
        default=None,
        description="a training job to cost per run, owned and on every cloud offer. Its hardware is replaced "
                    "by `server` and `num_nodes`; it needs `training.train_tokens`.",
    )


class TcoResponse(BaseModel):
    server: str
    num_nodes: int
    options: list[TcoOption] = Field(description="owning, then each cloud offer of the same GPUs, over the horizon")
    own_vs_cloud: OwnVsCloud = Field(description="monthly costs, cumulative spend and the break-even month")
    assumptions: list[AssumptionRow] = Field(description="every assumption used, with its default and source")
    job: JobCost | None = Field(description="the job as costed (null without `job`)")
    runs: list[RunCost] = Field(description="the job's cost per run on each option, cheapest first")
    estimate: EstimateResponse | None = Field(description="the job's estimate on the owned servers")
