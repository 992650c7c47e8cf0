"""In-process speed of one ``estimate()`` call (issue 2: "well under 1 ms").

Prints medians per case for (a) the same request repeated, which hits the estimator's memoised placement and
memory peaks, (b) distinct requests (a fresh sequence length every call), which do not, and (c) the memory
model alone on distinct requests (``peak_memory`` + the largest-micro-batch search): the rest of (b) is the
step-time, host-sizing and bill-of-materials work, and, for a request that does not fit, the re-estimated
suggestions. Run: ``.venv/bin/python -m benchmarks.estimate_speed``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from estimator import EstimateRequest, estimate
from estimator.estimate import MAX_MICRO_BATCH_SEARCH, _shape
from estimator.layout import build_layout
from estimator.memory import max_micro_batch, peak_memory

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


def _median_ms(requests: list[EstimateRequest], run: Callable[[EstimateRequest], object]) -> float:
    times = []
    for req in requests:
        start = time.perf_counter()
        run(req)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _memory_only(req: EstimateRequest) -> None:
    shape = _shape(req.model)
    layout = build_layout(req, shape)
    capacity = 80 * 10**9
    peak_memory(req, shape, layout, capacity)
    max_micro_batch(req, shape, layout, capacity, MAX_MICRO_BATCH_SEARCH)


def _distinct(body: dict[str, Any], offset: int) -> list[EstimateRequest]:
    training = body.get("training", {})
    return [EstimateRequest.model_validate({**body, "training": {**training, "seq_len": 1024 + 8 * (i + offset)}})
            for i in range(REPEATS)]


def main() -> None:
    for name, body in CASES.items():
        req = EstimateRequest.model_validate(body)
        estimate(req)
        repeated = _median_ms([req] * REPEATS, estimate)
        distinct = _median_ms(_distinct(body, 0), estimate)
        memory = _median_ms(_distinct(body, REPEATS), _memory_only)
        print(f"{name}: median {repeated:.3f} ms repeated, {distinct:.3f} ms distinct requests "
              f"(memory model {memory:.3f} ms)")


if __name__ == "__main__":
    main()
