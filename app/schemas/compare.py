"""``POST /compare``: one job on several GPUs or servers, side by side."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from estimator import EstimateRequest, EstimateResponse
from estimator.request import MAX_GPUS_PER_NODE
from estimator.tco.run_cost import CostChoice, CostResult

__all__ = ["CompareOption", "CompareRequest", "CompareResponse", "CompareResult", "CompareRow"]


class CompareOption(BaseModel):
    """Hardware to try the job on. A server alone implies its GPU; unset counts keep the job's."""

    model_config = ConfigDict(extra="forbid")

    gpu: str | None = Field(default=None, min_length=1, max_length=200)
    server: str | None = Field(default=None, min_length=1, max_length=200)
    num_nodes: int | None = Field(default=None, ge=1, le=100_000)
    gpus_per_node: int | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE)
    label: str | None = Field(default=None, max_length=200, description="shown instead of the ids")

    @model_validator(mode="after")
    def _gpu_or_server(self) -> CompareOption:
        if self.gpu is None and self.server is None:
            raise ValueError("give a gpu or a server")
        return self


class CompareRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request: EstimateRequest = Field(description="the job; its hardware is replaced by each option's")
    options: list[CompareOption] = Field(min_length=1, max_length=16)


class CompareRow(BaseModel):
    """The numbers to put side by side (``null`` where the estimator has no time model yet)."""

    label: str
    gpu: str
    server: str | None
    gpus: int
    fits: bool
    total_bytes: int
    capacity_bytes: int
    headroom_bytes: int
    max_micro_batch_size: int
    step_time_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    time_to_train_s: float | None
    gpu_hours: float | None
    cost: CostResult | None = Field(default=None, description="the run on the comparison's common cost basis")


class CompareResult(BaseModel):
    option: CompareOption
    summary: CompareRow
    result: EstimateResponse


class CompareResponse(BaseModel):
    results: list[CompareResult] = Field(description="one per option, in the order given")
    cost_basis: CostChoice | None = Field(default=None, description="the one basis every option is priced on: "
                                          "own when every option is a server, else rent from one provider class")
    cost_flags: list[str] = Field(default_factory=list, description="options priced another way, and why")
