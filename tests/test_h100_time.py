"""Issue 33 item 3: single-GPU step time on the H100 80GB HBM3 (first real H100 measurements).

The plain cases (no stack mechanism) of ``tests/data/stacks_h100_raw``, listed by id below so that a case that
drops out of the data (or a new one) shows here. Each must fall within the estimate's own error bar and the
median |error| must be at most 8% (issue 33's target). Only the ``fit`` cases determined
``efficiency.Constants.onchip_share``; the ``held_out`` ones are checked on their own. The mechanism the constant
models (the eager elementwise chain partly served on chip, so the H100 is not 4.8 / 3.35 = 1.43x slower on it
than the H200) is checked against the H100 / H200 ratio of the cases measured on both.
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.calibration.h100_time import MEDIAN_TARGET_PCT, rows
from estimator.training.efficiency import H200_FIT, rates_for
from hardware_catalog import load_catalog

FIT = {
    "h100-py1b4-lora16al-fused-b2-s2048-nock", "h100-py1b4-lora16al-fused-b2-s2048-ck",
    "h100-l1b-full-mixed-fused-b1-s4096-ck", "h100-l1b-full-mixed-fused-b1-s2048-ck",
    "h100-l1b-full-mixed-fused-b1-s8192-ck", "h100-l1b-full-mixed-fused-b1-s4096-nock",
    "h100-l8b-lora16al-fused-b1-s32768-ck", "h100-l8b-lora16al-fused-b1-s32768-ck-expseg",
    "h100-py2b8-lora16al-fused-b2-s2048-nock", "h100-py6b9-lora16al-fused-b2-s4096-ck",
    "h100-l1b-full-mixed-fused-b4-s4096-ck", "h100-l3b-full-mixed-fused-b2-s4096-ck",
    "h100-l8b-lora16al-fused-b2-s4096-ck", "h100-py1b4-full-mixed-fused-b2-s2048-ck",
    "h100-q1b5-lora16al-fused-b1-s8192-ck", "h100-l8b-lora16al-fused-b1-s4096-nock",
    "h100-g2b-lora16al-eager-fused-b1-s4096-ck", "h100-py1b4-lora16al-fused-b2-s4096-ck",
}
HELD_OUT = {
    "h100-py1b4-lora16al-fused-b2-s4096-nock", "h100-l1b-full-mixed-fused-b1-s16384-ck",
    "h100-m7b-lora16al-fused-b1-s8192-ck", "h100-q1b5-full-mixed-fused-b1-s2048-ck",
    "h100-py2b8-lora16al-fused-b2-s2048-ck",
    # third session's device calls (2026-12-06 08:01 UTC, call5): the held-out cases not reached before
    "h100-py6b9-lora16al-fused-b2-s2048-nock", "h100-q7b-lora16al-fused-b2-s4096-ck",
    "h100-l3b-full-true-fused-b2-s4096-ck", "h100-q1b5-full-mixed-fused-b4-s4096-ck",
    "h100-l8b-lora16al-fused-b1-s16384-ck", "h100-l8b-lora16al-fused-b1-s16384-ck-expseg",
}
BY_ID = {r["id"]: r for r in rows()}


def test_the_named_cases_are_the_plain_h100_cases() -> None:
    assert set(BY_ID) == FIT | HELD_OUT
    assert {i for i, r in BY_ID.items() if r["holdout"] == "held_out"} == HELD_OUT


def test_the_cases_measured_again_on_other_machines_are_inside_their_bars() -> None:
    """Issue 29's calls 9-10 measured the plain Llama 3.2 1B 2k case again (``-rep8`` on a machine with a slower
    host: 0.129 s against 0.091 s; ``-rep10`` on another: 0.093 s): inside the launch-bound bar the estimate carries."""
    from benchmarks.calibration.h100_time import repeats

    reps = {r["id"]: r for r in repeats()}
    assert set(reps) == {"h100-l1b-full-mixed-fused-b1-s2048-ck-rep8", "h100-l1b-full-mixed-fused-b1-s2048-ck-rep10"}
    for r in reps.values():
        assert r["repeat_of"] == "h100-l1b-full-mixed-fused-b1-s2048-ck"
        assert abs(r["error_pct"]) <= r["bar_pct"], r


@pytest.mark.parametrize("case_id", sorted(FIT | HELD_OUT))
def test_each_case_within_its_error_bar(case_id: str) -> None:
    r = BY_ID[case_id]
    assert abs(r["error_pct"]) <= r["bar_pct"], r


def test_median_error_meets_issue_33_target() -> None:
    assert statistics.median(abs(r["error_pct"]) for r in rows()) <= MEDIAN_TARGET_PCT
    assert statistics.median(abs(BY_ID[i]["error_pct"]) for i in HELD_OUT) <= MEDIAN_TARGET_PCT
    assert max(abs(r["error_pct"]) for r in rows()) <= 10.0  # measured worst: Gemma 2 eager, +8.8%


def test_h100_to_h200_ratio_follows_the_measured_one() -> None:
    """The cases measured on both GPUs: measured H100 / H200 step ratio 1.05-1.11; the HBM datasheet ratio
    (1.43 on memory-bound work) made the estimate 1.14-1.35 before the on-chip share; now 1.07-1.14, within 0.06
    of the measured one (worst: the full fine-tunes, Llama 3.2 3B at 1.11 vs 1.06)."""
    twins = [r for r in rows() if "h200_measured_s" in r]
    assert len(twins) >= 6
    for r in twins:
        measured = r["measured_s"] / r["h200_measured_s"]
        estimated = r["estimated_s"] / r["h200_estimated_s"]
        assert 1.0 < measured < 1.2
        assert abs(estimated - measured) <= 0.06, r["id"]


def test_elementwise_rate_h200_unchanged_h100_between_hbm_and_h200() -> None:
    cat = load_catalog()
    h200 = rates_for(cat.gpus["h200-sxm-141gb"], "bf16-mixed")
    h100 = rates_for(cat.gpus["h100-sxm5-80gb"], "bf16-mixed")
    assert h200.elem_time(1e9) == h200.mem_time(1e9)  # the calibration GPU: the constant cannot move it
    assert h100.mem_time(1e9) > h100.elem_time(1e9) > h200.elem_time(1e9)
    share = H200_FIT.onchip_share
    assert h100.elem_time(1e9) == pytest.approx((1 - share) * h100.mem_time(1e9) + share * h200.mem_time(1e9))
    for gid in ("a100-sxm4-80gb", "b200-sxm-180gb", "mi300x-192gb"):  # other architectures: HBM only
        r = rates_for(cat.gpus[gid], "bf16-mixed")
        assert r.elem_time(1e9) == r.mem_time(1e9)
