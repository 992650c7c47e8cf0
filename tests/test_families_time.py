"""Step time of model families no fit ever saw, on one H200 (issue 14, item 4): Llama 3.1 8B, Qwen3 8B, Qwen2.5 14B,
Phi-3 mini / medium, Gemma 2 9B (eager and SDPA), Mistral 7B at 8 decoder layers of their real widths, Llama 3.2 1B
at short sequences, a 4-layer Llama 3.1 8B LoRA at 32k / 64k tokens with checkpointing
(``tests/data/families_h200_raw``, made by ``benchmarks/calibration/time/families.py``;
``benchmarks/calibration/families.py`` turns each into its request). Error = estimated / measured step time - 1.

Tolerances, per case (measured errors in ``docs/accuracy-time.md``, "Families the fit never saw"):

- ``FAMILY_LIMIT`` 10% for every GPU-bound case (sequence >= 2048): the mechanisms of issue 14 (Qwen3's q/k norms,
  the head-dim-256 attention rate, Phi-3's fused projections) brought them within -7.4..+5.2%;
- the CPU-bound short-sequence cases (``CPU_BOUND``) within 45%: peft's Python adapter path costs 0.14-0.19 ms per
  adapter and forward on the measuring host against the 46 us the model prices, a known gap (-39% for the 1B LoRA
  at 512 tokens), and the 1B steps themselves spread 50-68 ms on that host for the same work;
- the median over all cases within 5%.
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.calibration.families import errors, step_cases

FAMILY_LIMIT = 0.10
CPU_BOUND = {"llama32-1b-l16-full-s256": 0.10, "llama32-1b-l16-full-s512": 0.30, "llama32-1b-l16-full-s1024": 0.10,
             "llama32-1b-l16-lora-s512": 0.45, "llama31-8b-l8-lora-s1024": 0.25, "qwen3-8b-l8-lora-s1024": 0.25,
             "phi3-mini-l8-lora-s1024": 0.10}
MEDIAN_LIMIT = 0.05


def test_every_measured_case_is_there() -> None:
    ids = {r["id"] for r in step_cases()}
    assert len(ids) >= 26 and set(CPU_BOUND) <= ids


@pytest.mark.parametrize("case_id", sorted(errors()))
def test_family_case_within_its_tolerance(case_id: str) -> None:
    assert abs(errors()[case_id]) <= CPU_BOUND.get(case_id, FAMILY_LIMIT)


def test_median_over_the_families_within_5_percent() -> None:
    assert statistics.median(abs(e) for e in errors().values()) <= MEDIAN_LIMIT


def test_not_one_sign() -> None:
    """Issue 14: the families outside the calibration set read 9-22% fast, every one; now both signs."""
    gpu_bound = [e for cid, e in errors().items() if cid not in CPU_BOUND]
    assert min(gpu_bound) < 0 < max(gpu_bound)


def test_the_cpu_bound_cases_are_the_launch_bound_class() -> None:
    """The cases with a wider tolerance here are exactly those the estimator calls launch-bound (their error bar
    is the ``host_bound`` class's, ``tests/test_host_bound_time.py``)."""
    from benchmarks.calibration.time_report import host_bound_ids

    assert set(CPU_BOUND) == {r["id"] for r in step_cases()} & host_bound_ids()
