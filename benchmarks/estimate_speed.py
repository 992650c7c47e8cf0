"""In-process speed of one ``estimate()`` call (issue 2: "well under 1 ms").

Prints medians for (a) the same request repeated, which hits the estimator's memoised placement and memory
peaks, and (b) distinct requests (a fresh sequence length every call), which do not. Run:
``.venv/bin/python -m benchmarks.estimate_speed``.
"""

from __future__ import annotations

import statistics
import time

from estimator import EstimateRequest, estimate

CASES = {
    "llama-3.1-8b full, 8x H100 (defaults)": {"model": "llama-3.1-8b"},
    "llama-3.1-70b LoRA, FSDP, XE9680 8x H100": {
        "model": "llama-3.1-70b", "training": {"method": "lora"}, "parallelism": {"sharding": "fsdp"},
        "hardware": {"server": "dell-xe9680-h100", "gpu": "h100-sxm5-80gb"}},
}


def _median_ms(requests: list[EstimateRequest]) -> float:
    times = []
    for req in requests:
        start = time.perf_counter()
        estimate(req)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    for name, body in CASES.items():
        req = EstimateRequest.model_validate(body)
        estimate(req)
        repeated = _median_ms([req] * 300)
        distinct = [EstimateRequest.model_validate({**body, "training": {**body.get("training", {}),
                                                                         "seq_len": 1024 + 8 * i}})
                    for i in range(300)]
        print(f"{name}: median {repeated:.3f} ms repeated, {_median_ms(distinct):.3f} ms distinct requests")


if __name__ == "__main__":
    main()
