"""Error bars derived from the measured accuracy (``docs/accuracy.md``, ``estimator/data/accuracy.json``).

``accuracy.json`` is written by ``benchmarks/calibration/accuracy_report.py`` from the H200 measurements in
``tests/data/calibration_h200.json``; a test keeps it in step with the estimator. Each class's error bar is
the 90th percentile of |estimated - measured| / measured over that class's cases, rounded up.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["accuracy_table", "memory_error_bar_pct", "time_error_bar_pct"]

DEFAULT_MEMORY_ERROR_PCT = 10.0
DEFAULT_TIME_ERROR_PCT = 20.0


@cache
def accuracy_table() -> dict[str, Any]:
    path = resources.files("estimator").joinpath("data/accuracy.json")
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _class_pct(kind: str, klass: str, default: float) -> float:
    classes = accuracy_table().get(kind, {})
    value = classes.get(klass, classes.get("all", default))
    return float(value)


UNMEASURED_MEMORY_ERROR_PCT = 10.0


def memory_error_bar_pct(sharded: bool, method: str, measured_kind: bool = True) -> float:
    """The p90 memory error of the matching class of measured cases. Set-ups of a kind never measured on the
    H200 (tensor/pipeline parallelism, offload, DeepSpeed/Megatron, QLoRA, optimizers other than AdamW) get at
    least ``UNMEASURED_MEMORY_ERROR_PCT``."""
    klass = "sharded" if sharded else ("lora" if method != "full" else "full")
    bar = _class_pct("memory_error_bar_pct", klass, DEFAULT_MEMORY_ERROR_PCT)
    return bar if measured_kind else max(bar, UNMEASURED_MEMORY_ERROR_PCT)


def time_error_bar_pct(multi_gpu: bool) -> float:
    """The p90 step-time error on one GPU; multi-GPU cases add the published-runs error class."""
    return _class_pct("time_error_bar_pct", "multi_gpu" if multi_gpu else "single_gpu", DEFAULT_TIME_ERROR_PCT)
