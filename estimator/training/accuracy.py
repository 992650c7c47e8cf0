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
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

from estimator.job import Job
from estimator.rules.stacks import MECHANISM_OPTIMIZERS, memory_mechanism_keys, unmeasured_mechanisms
from estimator.training.optimizers import OPTIMIZERS

if TYPE_CHECKING:
    from estimator.training.layout import Layout

__all__ = ["accuracy_table", "held_out_bar", "job_time_mechanism_bar_pct", "mechanism_memory_bar_pct",
           "mechanism_time_bar_pct", "memory_error_bar_pct", "p90", "time_class", "time_error_bar_pct",
           "time_error_bars", "time_kind_measured"]

DEFAULT_MEMORY_ERROR_PCT: Final = 10.0
DEFAULT_TIME_ERROR_PCT: Final = 20.0


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


UNMEASURED_MEMORY_ERROR_PCT: Final = 10.0


def _mechanism_bar_pct(table_name: str, keys: Sequence[str]) -> float | None:
    """The largest bar of ``keys`` in ``accuracy.json``'s ``table_name``; 0 with no key; ``None`` when one of them
    is not in the table (never measured)."""
    table = accuracy_table().get(table_name, {})
    if any(k not in table for k in keys):
        return None
    return max((float(table[k]) for k in keys), default=0.0)


def mechanism_memory_bar_pct(keys: Sequence[str]) -> float | None:
    """The largest memory error bar of the request's issue-29 mechanisms (``field:value`` keys,
    :func:`estimator.rules.stacks.memory_mechanism_keys`), each the p90 of its fit cases on the H100
    (``benchmarks/calibration/stacks_report.py``); 0 with none; ``None`` when one of them was never measured."""
    return _mechanism_bar_pct("mechanism_memory_error_bar_pct", keys)


def mechanism_time_bar_pct(keys: Sequence[str]) -> float | None:
    """As :func:`mechanism_memory_bar_pct` for the step time (``mechanism_time_error_bar_pct``)."""
    return _mechanism_bar_pct("mechanism_time_error_bar_pct", keys)


def _time_mechanism_keys(training: Any) -> list[str]:
    """The mechanism keys whose step-time bar applies: an optimizer whose step time the H200 calibration measured
    (8-bit AdamW among them) keeps its class's bar, the others take their H100 mechanism's."""
    keys = memory_mechanism_keys(training)
    if training.optimizer in MEASURED_OPTIMIZERS:
        keys = [k for k in keys if not k.startswith("optimizer:")]
    return keys


def job_time_mechanism_bar_pct(job: Job, layout: Layout) -> float:
    """The step-time bar the job's mechanisms add on one GPU (0 on several: they were measured on one)."""
    if layout.world_size > 1:
        return 0.0
    return mechanism_time_bar_pct(_time_mechanism_keys(job.training)) or 0.0


def memory_error_bar_pct(sharded: bool, method: str, measured_kind: bool = True,
                         tensor_parallel: bool = False, mechanism_bar: float = 0.0) -> float:
    """The p90 memory error of the matching class of measured cases; tensor parallelism (tp > 1, with or
    without FSDP) has its own class, measured with DTensor on the H200 (``tests/test_calibration_tp.py``).
    Set-ups of a kind never measured on the H200 (pipeline/context/expert parallelism, TP outside PyTorch full
    fine-tuning, offload other than FSDP2's, DeepSpeed/Megatron, QLoRA on several GPUs, Lion) get at least
    ``UNMEASURED_MEMORY_ERROR_PCT``."""
    klass = "tensor_parallel" if tensor_parallel else ("sharded" if sharded else ("lora" if method != "full"
                                                                                    else "full"))
    bar = max(_class_pct("memory_error_bar_pct", klass, DEFAULT_MEMORY_ERROR_PCT), mechanism_bar)
    return bar if measured_kind else max(bar, UNMEASURED_MEMORY_ERROR_PCT)


# ---------------------------------------------------------------------------------------------- step time
# Set-ups whose step time was measured: the H200 calibration set (one GPU: PyTorch + HF transformers, SDPA or
# eager attention, bf16-mixed / bf16-true, full, LoRA or QLoRA, AdamW, 8-bit AdamW, SGD or Adafactor, no offload;
# DDP and FSDP2 compute under the fake process group) and the expressible published runs (several GPUs: A100 SXM
# and H100 SXM; PyTorch FSDP/ZeRO-2 without pipeline parallelism, bf16, full training; Megatron-Core / NeMo /
# Megatron-Bridge with TP, PP, interleaving and CP, bf16 or fp8, full training, SFT or LoRA). docs/accuracy-time.md
# lists them.
# The H100 80GB SXM joined on 2026-12-06 (issue 33: 29 plain single-GPU steps, tests/test_h100_time.py, every one
# inside the single_gpu class's bar, which was set on the H200 alone).
MEASURED_SINGLE_GPU_IDS: Final = frozenset({"h200-sxm-141gb", "h100-sxm5-80gb"})
MEASURED_MULTI_GPU_IDS: Final = frozenset({"h200-sxm-141gb", "h100-sxm5-80gb", "a100-sxm4-80gb", "a100-sxm4-40gb"})
MEASURED_OPTIMIZERS: Final = frozenset(o.id for o in OPTIMIZERS.values() if o.time_measured)


def time_kind_measured(job: Job, layout: Layout, gpu_id: str) -> bool:
    """Whether a set-up of this kind is among those whose step time was measured (list above). Anything else
    (fp32, fp8 outside Megatron, offload, DeepSpeed, Lion, expert parallelism, context parallelism or pipeline
    parallelism outside Megatron, GPUs never measured, flash-attn on one GPU, QLoRA on several) is priced by
    terms no measurement checked."""
    rv = job
    t, p = rv.training, rv.parallelism
    megatron = p.framework == "megatron"
    precisions = ("bf16-mixed", "bf16-true", "fp8-mixed") if megatron and layout.world_size > 1 else (
        "bf16-mixed", "bf16-true")
    # fused LoRA kernels outside Megatron (AutoModel's triton adapters) were checked on published rows only
    # the issue-29 mechanisms (and their optimizers) were measured on one H100: measured there, not on several
    mechanisms = layout.world_size <= 1 and mechanism_time_bar_pct(_time_mechanism_keys(t)) is not None
    common = ((t.precision in precisions) and (t.optimizer in MEASURED_OPTIMIZERS
                                               or (mechanisms and t.optimizer in MECHANISM_OPTIMIZERS))
              and p.offload == "none" and (layout.cp == 1 or megatron) and layout.ep == 1
              and (megatron or t.lora_kernel != "fused") and (mechanisms or not unmeasured_mechanisms(t)))
    if layout.world_size <= 1:
        return (common and gpu_id in MEASURED_SINGLE_GPU_IDS and t.attention in ("sdpa", "eager")
                and p.framework == "pytorch")
    return (common and t.method in ("full", "lora") and gpu_id in MEASURED_MULTI_GPU_IDS
            and (megatron or (p.framework == "pytorch" and layout.pp == 1)))


def time_class(multi_gpu: bool, framework: str = "pytorch", seq_len: int = 0, host_bound: bool = False) -> str:
    """The step-time error class: ``host_bound`` (the host's Python issue time, not the GPU, paces the step:
    ``estimator.training.timing.Pass.host_bound``; the measured H200 steps of that regime), ``single_gpu`` (the H200
    calibration set), ``megatron`` (published Megatron-LM / Megatron-Core / NeMo / Megatron-Bridge runs),
    ``multi_gpu`` (published PyTorch runs below ``LONG_SEQUENCE_TOKENS``), ``multi_gpu_long`` (published PyTorch
    runs at or above it: llm-foundry's 2023 long-sequence attention kernels, a known gap)."""
    if host_bound:
        return "host_bound"
    if not multi_gpu:
        return "single_gpu"
    if framework == "megatron":
        return "megatron"
    return "multi_gpu_long" if seq_len >= LONG_SEQUENCE_TOKENS else "multi_gpu"


def time_error_bar_pct(multi_gpu: bool, measured_kind: bool = True, framework: str = "pytorch",
                       seq_len: int = 0, host_bound: bool = False, mechanism_bar: float = 0.0) -> float:
    """The held-out-calibrated step-time error bar of the class (:func:`time_class`, :func:`held_out_bar`).
    Kinds never measured (:func:`time_kind_measured`) get at least the ``unmeasured_floor`` class; a launch-bound
    step (``host_bound``) gets at least the ``host_bound`` class, never less than its own class would give."""
    klass = time_class(multi_gpu, framework, seq_len)
    bar = _class_pct("time_error_bar_pct", klass, _class_pct("time_error_bar_pct", "multi_gpu" if multi_gpu
                                                             else "single_gpu", DEFAULT_TIME_ERROR_PCT))
    if host_bound:
        bar = max(bar, _class_pct("time_error_bar_pct", "host_bound", bar))
    bar = max(bar, mechanism_bar)  # an issue-29 mechanism's own bar (job_time_mechanism_bar_pct)
    if measured_kind:
        return bar
    return max(bar, _class_pct("time_error_bar_pct", "unmeasured_floor", DEFAULT_TIME_ERROR_PCT))


HELD_OUT_COVERAGE: Final = 0.80


def held_out_bar(groups: Mapping[str, Sequence[float]], target: float = HELD_OUT_COVERAGE) -> dict[str, float]:
    """A class's error bar calibrated on held-out groups (leave-one-group-out: one model family, or one
    published source, at a time), as split conformal prediction does it:

    - for each group, the bar the *other* groups give (p90 of their |error|) -- what the bar would have been
      had that group never been seen;
    - ``coverage_raw``: the share of all rows inside the bar fitted without their own group;
    - ``widening``: the smallest factor (steps of 0.05, at least 1) on those held-out bars that brings that
      share to ``target``; ``coverage``: the share then;
    - ``bar_pct``: ``widening`` x p90 of every row's |error|, in percent rounded up.

    A class with a single group cannot hold one out: its bar is its p90 (``coverage`` is then in-sample)."""
    rows = [(g, abs(e)) for g, errors in groups.items() for e in errors]
    if not rows:
        return {"bar_pct": DEFAULT_TIME_ERROR_PCT, "coverage": 0.0, "coverage_raw": 0.0, "widening": 1.0,
                "rows": 0.0, "groups": 0.0}
    everything = p90([a for _, a in rows])
    held = {g: p90([a for h, a in rows if h != g]) for g in groups}
    if len(groups) < 2:
        held = {g: everything for g in groups}

    def coverage(w: float) -> float:
        return sum(1 for g, a in rows if a <= w * held[g] + 1e-12) / len(rows)

    w = 1.0
    while coverage(w) < target and w < 20.0:
        w = round(w + 0.05, 2)
    return {"bar_pct": float(math.ceil(round(100.0 * w * everything, 6))), "coverage": coverage(w),
            "coverage_raw": coverage(1.0), "widening": w, "rows": float(len(rows)), "groups": float(len(groups))}


LONG_SEQUENCE_TOKENS: Final = 16384


def p90(values: Sequence[float]) -> float:
    """The 90th percentile (nearest rank, as ``benchmarks/calibration/compare.p90``)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def time_error_bars(single_gpu: Mapping[str, Sequence[float]], pytorch: Mapping[str, Sequence[float]],
                    megatron: Mapping[str, Sequence[float]], published_short: Mapping[str, Sequence[float]],
                    megatron_by_family: Mapping[str, Sequence[float]] | None = None,
                    pytorch_long: Mapping[str, Sequence[float]] | None = None,
                    host_bound: Mapping[str, Sequence[float]] | None = None) -> dict[str, Any]:
    """``time_error_bar_pct`` (and ``time_coverage``) of ``accuracy.json`` from the error tables, grouped for
    :func:`held_out_bar`:

    - ``single_gpu``: the H200 single-GPU calibration cases, by model family (leave-one-family-out);
    - ``multi_gpu``: published PyTorch runs below ``LONG_SEQUENCE_TOKENS`` tokens, by source
      (leave-one-source-out); ``multi_gpu_long`` (when given): those at or above it, by GPU (one source only,
      so leave-one-GPU-out);
    - ``megatron``: published Megatron-LM / Megatron-Core / NeMo / Megatron-Bridge runs, by source, and (when
      given) by model family (GPT, Llama, Nemotron): the wider of the two calibrations is shipped, the
      family one reported as ``megatron_by_family``;
    - ``unmeasured_floor``: every published run below ``LONG_SEQUENCE_TOKENS`` tokens, by source, and never
      below the single-GPU or the Megatron class: the error to expect of a set-up no measurement covers;
    - ``host_bound`` (when given): the measured H200 steps the host paces
      (``estimator.training.timing.Pass.host_bound``), by model family (held-out refit errors and the per-family
      device call's cases); never narrower than ``single_gpu``;
    - ``all``: the widest class (the fallback).

    Returns ``{"bars": {class: pct}, "coverage": {class: held_out_bar(...)}}``."""
    classes = {"single_gpu": held_out_bar(single_gpu), "multi_gpu": held_out_bar(pytorch),
               "megatron": held_out_bar(megatron)}
    if pytorch_long:
        classes["multi_gpu_long"] = held_out_bar(pytorch_long)
    if megatron_by_family:
        by_family = held_out_bar(megatron_by_family)
        classes["megatron"] = max(classes["megatron"], by_family, key=lambda c: c["bar_pct"])
        classes["megatron_by_family"] = by_family
    if host_bound:
        classes["host_bound"] = held_out_bar(host_bound)
        classes["host_bound"]["bar_pct"] = max(classes["host_bound"]["bar_pct"], classes["single_gpu"]["bar_pct"])
    floor = held_out_bar(published_short)
    widest = max(c["bar_pct"] for k, c in classes.items() if k != "megatron_by_family")
    # the floor is never narrower than a measured class, bar the long-sequence PyTorch one (llm-foundry's 2023
    # attention kernels, a known gap kept out of the floor's rows)
    floor["bar_pct"] = max(floor["bar_pct"], classes["single_gpu"]["bar_pct"], classes["megatron"]["bar_pct"],
                           classes["multi_gpu"]["bar_pct"])
    classes["unmeasured_floor"] = floor
    bars = {k: v["bar_pct"] for k, v in classes.items() if k != "megatron_by_family"}
    bars["all"] = widest
    return {"bars": bars, "coverage": classes}
