"""``POST /api/v1/clusters/nccl-checks``: nccl-tests output in, the health check out. The cluster request and
response themselves are the estimator's contract (``estimator.cluster.contract``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["NCCL_TEXT_MAX", "NcclCheckRequest"]

#: characters of nccl-tests output one request may carry (a full sweep of every collective is a few hundred KB)
NCCL_TEXT_MAX = 2_000_000


class NcclCheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    server: str = Field(default="nvidia-dgx-h100", min_length=1, max_length=200,
                        description="the node the test ran on (a catalog server id)")
    text: str = Field(min_length=1, max_length=NCCL_TEXT_MAX, description="the output of all_reduce_perf, "
                      "all_gather_perf, reduce_scatter_perf or alltoall_perf (several runs are fine)")
    nodes: int | None = Field(default=None, ge=1, le=100_000,
                              description="nodes in the test when the output has no 'Using devices' lines")
    gpus: int | None = Field(default=None, ge=1, le=1_000_000,
                             description="GPUs in the test when the output has no 'Using devices' lines")
    collective: str | None = Field(default=None, max_length=40,
                                   description="all_reduce, all_gather, reduce_scatter or alltoall when the output "
                                               "does not name it")
