"""Error bars derived from the measured accuracy (``docs/accuracy.md``, ``estimator/data/accuracy.json``).

``accuracy.json``'s memory part is written by ``benchmarks/calibration/accuracy_report.py`` from the H200
measurements in ``tests/data/calibration_h200.json``, its step-time part by
``benchmarks/calibration/time_report.py`` (:func:`time_error_bars` over the H200 calibration and published-run
error tables); tests keep both in step with the estimator. Each class's error bar is the 90th percentile of
|estimated - measured| / measured over that class's cases, rounded up. Set-ups of a kind never measured get
at least a floor: ``UNMEASURED_MEMORY_ERROR_PCT`` for memory, the ``unmeasured_floor`` class for step time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from estimator.optimizers import OPTIMIZERS

if TYPE_CHECKING:
    from estimator.layout import Layout
    from estimator.request import EstimateRequest

__all__ = ["accuracy_table", "memory_error_bar_pct", "p90", "time_error_bar_pct", "time_error_bars",
           "time_kind_measured"]

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


def memory_error_bar_pct(sharded: bool, method: str, measured_kind: bool = True,
                         tensor_parallel: bool = False) -> float:
    """The p90 memory error of the matching class of measured cases; tensor parallelism (tp > 1, with or
    without FSDP) has its own class, measured with DTensor on the H200 (``tests/test_calibration_tp.py``).
    Set-ups of a kind never measured on the H200 (pipeline/context/expert parallelism, TP outside PyTorch full
    fine-tuning, offload other than FSDP2's, DeepSpeed/Megatron, QLoRA on several GPUs, Lion) get at least
    ``UNMEASURED_MEMORY_ERROR_PCT``."""
    klass = "tensor_parallel" if tensor_parallel else ("sharded" if sharded else ("lora" if method != "full"
                                                                                    else "full"))
    bar = _class_pct("memory_error_bar_pct", klass, DEFAULT_MEMORY_ERROR_PCT)
    return bar if measured_kind else max(bar, UNMEASURED_MEMORY_ERROR_PCT)


# ---------------------------------------------------------------------------------------------- step time
# Set-ups whose step time was measured: the H200 calibration set (one GPU: PyTorch + HF transformers, SDPA or
# eager attention, bf16-mixed / bf16-true, full, LoRA or QLoRA, AdamW, 8-bit AdamW, SGD or Adafactor, no offload;
# DDP and FSDP2 compute under the fake process group) and the expressible published runs (several GPUs: A100 SXM
# and H100 SXM, PyTorch FSDP/ZeRO-2 and Megatron, flash/SDPA/eager attention, bf16, full training, no context or
# expert parallelism). docs/accuracy-time.md lists them.
MEASURED_SINGLE_GPU_IDS = frozenset({"h200-sxm-141gb"})
MEASURED_MULTI_GPU_IDS = frozenset({"h200-sxm-141gb", "h100-sxm5-80gb", "a100-sxm4-80gb", "a100-sxm4-40gb"})
MEASURED_OPTIMIZERS = frozenset(o.id for o in OPTIMIZERS.values() if o.time_measured)


def time_kind_measured(req: EstimateRequest, layout: Layout, gpu_id: str) -> bool:
    """Whether a set-up of this kind is among those whose step time was measured (list above). Anything else
    (fp8 or fp32, offload, DeepSpeed, Lion, context or expert parallelism, GPUs never measured, flash-attn on one
    GPU, QLoRA on several) is priced by terms no measurement checked."""
    t, p = req.training, req.parallelism
    common = (t.precision in ("bf16-mixed", "bf16-true") and t.optimizer in MEASURED_OPTIMIZERS
              and p.offload == "none" and layout.cp == 1 and layout.ep == 1)
    if layout.world_size <= 1:
        return (common and gpu_id in MEASURED_SINGLE_GPU_IDS and t.attention in ("sdpa", "eager")
                and p.framework == "pytorch")
    return (common and t.method in ("full", "lora") and gpu_id in MEASURED_MULTI_GPU_IDS
            and p.framework in ("pytorch", "megatron"))


def time_error_bar_pct(multi_gpu: bool, measured_kind: bool = True) -> float:
    """The p90 step-time error of the class (one GPU: the H200 calibration set; several: the published runs).
    Kinds never measured (:func:`time_kind_measured`) get at least the ``unmeasured_floor`` class."""
    bar = _class_pct("time_error_bar_pct", "multi_gpu" if multi_gpu else "single_gpu", DEFAULT_TIME_ERROR_PCT)
    if measured_kind:
        return bar
    return max(bar, _class_pct("time_error_bar_pct", "unmeasured_floor", DEFAULT_TIME_ERROR_PCT))


LONG_SEQUENCE_TOKENS = 16384


def p90(values: Sequence[float]) -> float:
    """The 90th percentile (nearest rank, as ``benchmarks/calibration/compare.p90``)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def time_error_bars(single_gpu: Sequence[float], published: Sequence[float],
                    published_short: Sequence[float]) -> dict[str, float]:
    """``time_error_bar_pct`` of ``accuracy.json`` from the error tables (relative errors, signed or not), each
    the p90 of |error| in percent rounded up to a whole percent:

    - ``single_gpu``: the H200 single-GPU calibration cases;
    - ``multi_gpu``: every expressible published run;
    - ``unmeasured_floor``: the published runs below ``LONG_SEQUENCE_TOKENS`` tokens -- runs the model was
      not fitted to, without the known 2023 long-sequence attention-kernel gap: the error to expect of a
      set-up no measurement covers;
    - ``all``: every case of both tables (the fallback).
    """
    def bar(errors: Sequence[float]) -> float:
        return float(math.ceil(round(100.0 * p90([abs(e) for e in errors]), 6))) if errors else DEFAULT_TIME_ERROR_PCT

    return {"all": bar([*single_gpu, *published]), "multi_gpu": bar(published), "single_gpu": bar(single_gpu),
            "unmeasured_floor": bar(published_short)}
