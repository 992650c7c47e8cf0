"""Values derived from a request's fields, one formula each: the request models' properties
(:mod:`estimator.request`, plain Python for pydantic) and the job's compiled views (:mod:`estimator.job`) both
call these, so the two cannot disagree."""

from __future__ import annotations

from typing import Literal

__all__ = ["TpPlan", "data_parallel", "normalized_sharding", "resolved_tp_plan"]

#: how tensor parallelism treats the vocabulary (``parallelism.tp_plan``)
TpPlan = Literal["vocab-parallel", "replicated-embeddings"]


def normalized_sharding(sharding: str) -> str:
    """``"fsdp"`` is ZeRO-3 (full shard); the others as given."""
    return "zero3" if sharding == "fsdp" else sharding


def resolved_tp_plan(tp_plan: TpPlan | None, framework: str, defaults: dict[str, str]) -> TpPlan:
    """``tp_plan``, or the framework's default (``defaults``: :data:`estimator.request.DEFAULT_TP_PLAN`) when it
    is null."""
    if tp_plan is not None:
        return tp_plan
    return "replicated-embeddings" if defaults[framework] == "replicated-embeddings" else "vocab-parallel"


def data_parallel(world_size: int, tp: int, pp: int, cp: int) -> int:
    """Data-parallel degree = num_nodes x gpus_per_node / (tp x pp x cp)."""
    return world_size // (tp * pp * cp)
