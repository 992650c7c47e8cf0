"""In-process speed of one ``estimate()`` call (issue 2: "well under 1 ms").

Prints medians per case for (a) the same request repeated, which hits the estimator's memoised placement and
memory peaks, (b) distinct requests (a fresh sequence length every call: 1,024 to 3,416 tokens), which do not,
and (c) the memory model alone on distinct requests (``peak_memory`` + the largest-micro-batch search): the
rest of (b) is the step-time, host-sizing and bill-of-materials work, and, for a request that does not fit, the
re-estimated suggestions. (d) Distinct requests at longer sequences (9,024 to 11,416 and 17,024 to 19,416
tokens), where more cases do not fit and so also compute their suggestions; each distinct column says how many
of its requests do not fit.

Each median is the best of ``PASSES`` passes (as ``timeit`` advises: the fastest pass is the one least disturbed
by other work on the machine). Every pass of a distinct column uses fresh requests: pass ``k`` adds ``k`` tokens
to every sequence length, so nothing that depends on the sequence length is memoised from an earlier pass.
Run: ``.venv/bin/python -m benchmarks.estimate_speed``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from estimator import EstimateRequest, estimate, native
from estimator.estimate import MAX_MICRO_BATCH_SEARCH
from estimator.job import job_of
from estimator.model.spec import shape_for
from estimator.training.layout import build_layout
from estimator.training.memory import max_micro_batch, peak_memory

CASES: dict[str, dict[str, Any]] = {
    "llama-3.1-8b full, 8x H100 (defaults; does not fit: suggestions)": {"model": "llama-3.1-8b"},
    "llama-3.1-70b LoRA, FSDP, XE9680 8x H100": {
        "model": "llama-3.1-70b", "training": {"method": "lora"}, "parallelism": {"sharding": "fsdp"},
        "hardware": {"server": "dell-xe9680-h100", "gpu": "h100-sxm5-80gb"}},
    "llama-3.2-1b full, 1x H100 (small, fits)": {
        "model": "llama-3.2-1b", "training": {"seq_len": 2048}, "hardware": {"gpus_per_node": 1}},
    "llama-3.1-70b Megatron TP8 PP4 SP, 64x H100": {
        "model": "llama-3.1-70b",
        "training": {"gradient_accumulation_steps": 16, "activation_checkpointing": "selective"},
        "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 8, "pp": 4, "sequence_parallel": True},
        "hardware": {"num_nodes": 8}},
    "mixtral-8x7b FSDP EP8, 16x H200": {
        "model": "mixtral-8x7b", "training": {"activation_checkpointing": "full"},
        "parallelism": {"sharding": "fsdp", "ep": 8}, "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 2}},
}
REPEATS = 300
PASSES = 5
LONG_OFFSETS = (1000, 2000)  # seq_len 1024 + 8 x (offset + i): 9,024-11,416 and 17,024-19,416 tokens


def _median_ms(requests: list[EstimateRequest], run: Callable[[EstimateRequest], object]) -> float:
    times = []
    for req in requests:
        start = time.perf_counter()
        run(req)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _best_median_ms(passes: Callable[[int], list[EstimateRequest]], run: Callable[[EstimateRequest], object]) -> float:
    """The lowest median over ``PASSES`` passes; ``passes(k)`` gives the requests of pass ``k``."""
    return min(_median_ms(passes(k), run) for k in range(PASSES))


def _memory_only(req: EstimateRequest) -> None:
    job = job_of(req)
    shape = shape_for(req.model)
    layout = build_layout(job, shape)
    capacity = 80 * 10**9
    peak_memory(job, shape, layout, capacity)
    max_micro_batch(job, shape, layout, capacity, MAX_MICRO_BATCH_SEARCH)


def _distinct(body: dict[str, Any], offset: int, shift: int = 0) -> list[EstimateRequest]:
    training = body.get("training", {})
    return [EstimateRequest.model_validate(
        {**body, "training": {**training, "seq_len": 1024 + 8 * (i + offset) + shift}}) for i in range(REPEATS)]


def _not_fitting(requests: list[EstimateRequest]) -> int:
    return sum(not estimate(req).memory.fits for req in requests)


def _distinct_column(body: dict[str, Any], offset: int) -> str:
    """Median over distinct requests, timed before anything about them is memoised (best of ``PASSES``); then how
    many of the first pass's requests do not fit."""
    median = _best_median_ms(lambda k: _distinct(body, offset, k), estimate)
    return f"{median:.3f} ms ({_not_fitting(_distinct(body, offset))}/{REPEATS} do not fit)"


def _case_line(name: str, body: dict[str, Any]) -> str:
    req = EstimateRequest.model_validate(body)
    estimate(req)
    repeated = _best_median_ms(lambda k: [req] * REPEATS, estimate)
    distinct = _distinct_column(body, 0)
    memory = _best_median_ms(lambda k: _distinct(body, REPEATS, k), _memory_only)
    longer = ", ".join(f"seq {1024 + 8 * offset:,}+: {_distinct_column(body, offset)}" for offset in LONG_OFFSETS)
    return (f"{name}: median {repeated:.3f} ms repeated, {distinct} distinct requests "
            f"(memory model {memory:.3f} ms); longer sequences, distinct: {longer}")


def main() -> None:
    print(f"estimator: {native.describe()}", flush=True)
    for name, body in CASES.items():
        print(_case_line(name, body), flush=True)


if __name__ == "__main__":
    main()
