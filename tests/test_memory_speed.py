"""The largest-micro-batch search and the memoised model states: same answers as the plain definitions. (How
fast they are is measured in benchmarks/, not here: benchmarks/estimate_speed.py, benchmarks/vs_llm_analysis.py.)"""

from __future__ import annotations

import itertools

import pytest

import estimator.training.memory as memory
from estimator.job import job_of
from estimator.model.spec import shape_for
from estimator.request import EstimateRequest
from estimator.training.layout import build_layout

H100, H200 = 80 * 10**9, 141 * 10**9


def _setup(body: dict):  # type: ignore[no-untyped-def]
    req = EstimateRequest.model_validate(body)
    shape = shape_for(req.model)
    return req, shape, build_layout(job_of(req), shape)


def _fits(req: EstimateRequest, shape, layout, cap: int, mbs: int) -> bool:  # type: ignore[no-untyped-def]
    trial = req.model_copy(update={"training": req.training.model_copy(update={"micro_batch_size": mbs})})
    return memory._peak_memory(job_of(trial), shape, layout, cap).fits


BODIES = [
    {"model": model, "training": {"method": method, "activation_checkpointing": ckpt, "seq_len": seq,
                                  "gradient_accumulation_steps": 4},
     "parallelism": par, "hardware": {"gpu": "h200-sxm-141gb"}}
    for model, method, ckpt, seq, par in itertools.product(
        ["llama-3.2-1b", "llama-3.1-8b", "mixtral-8x7b"], ["full", "lora"], ["none", "full"], [1024, 8192],
        [{}, {"sharding": "fsdp"}, {"framework": "megatron", "sharding": "zero1", "tp": 2, "pp": 2,
                                    "sequence_parallel": True}])
]


@pytest.mark.parametrize("body", BODIES)
def test_max_micro_batch_is_the_fitting_boundary(body: dict) -> None:
    """The answer fits and one more sequence does not (or the limit is reached), checked with full peaks."""
    req, shape, layout = _setup(body)
    limit = 256
    m = memory.max_micro_batch(job_of(req), shape, layout, H200, limit)
    if m == 0:
        assert not _fits(req, shape, layout, H200, 1)
        return
    assert _fits(req, shape, layout, H200, m)
    assert m == limit or not _fits(req, shape, layout, H200, m + 1)


def test_max_micro_batch_stops_at_the_limit() -> None:
    req, shape, layout = _setup({"model": "llama-3.2-1b", "training": {"seq_len": 16, "method": "lora"},
                                 "hardware": {"gpu": "h200-sxm-141gb"}})
    assert memory.max_micro_batch(job_of(req), shape, layout, H200, 64) == 64
    assert memory.max_micro_batch(job_of(req), shape, layout, H200, 1) == 1
