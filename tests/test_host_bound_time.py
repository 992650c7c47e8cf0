"""Launch-bound (host-bound) steps get their own step-time error bar and an assumption line (issue 14, items 4-5).

A step is launch-bound when issuing its forward from Python takes the host at least ``HOST_BOUND_SHARE`` of the
forward's GPU time (``estimator.training.timing.Pass.host_bound``, LoRA adapters at peft's measured per-adapter
cost). The rule is checked against the measured phases of the families call (``tests/data/families_h200_raw``: where the
host returns from forward only after about the forward's GPU time, the GPU waited on it), and the class's bar
against its held-out cases.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.calibration import families as fam
from benchmarks.calibration import time_report
from estimator.estimate import estimate
from estimator.request import EstimateRequest
from estimator.training.accuracy import HELD_OUT_COVERAGE, accuracy_table, time_error_bar_pct

# The host returns from the forward after at least this share of its GPU time only when the GPU waited on it.
MEASURED_WAIT_SHARE = 0.85


def _measured_share(res: dict[str, Any]) -> float:
    p = res["measured"]["phases_median"]
    return float(p["cpu_fwd_s"] / p["gpu_fwd_s"])


@pytest.mark.parametrize("res", fam.step_cases(), ids=lambda r: r["id"])
def test_the_rule_flags_the_steps_whose_measured_forward_waited_on_the_host(res: dict[str, Any]) -> None:
    flagged = res["id"] in time_report.host_bound_ids()
    assert flagged is (_measured_share(res) >= MEASURED_WAIT_SHARE)


def test_host_bound_bar_holds_on_its_held_out_cases() -> None:
    cov = accuracy_table()["time_coverage"]["host_bound"]
    bars = accuracy_table()["time_error_bar_pct"]
    assert cov["rows"] >= 10 and cov["groups"] >= 3
    assert cov["coverage"] >= HELD_OUT_COVERAGE
    assert bars["host_bound"] > bars["single_gpu"]
    inside = [abs(e) <= bars["host_bound"] / 100 for g in time_report.single_held_out(True).values() for e in g]
    assert sum(inside) >= HELD_OUT_COVERAGE * len(inside)


def _estimate(case_id: str) -> Any:
    res = next(r for r in fam.step_cases() if r["id"] == case_id)
    return estimate(EstimateRequest.model_validate(fam.request(res)))


def test_a_launch_bound_estimate_warns_and_takes_the_wide_bar() -> None:
    resp = _estimate("llama32-1b-l16-lora-s512")
    assert resp.time is not None
    assert resp.time.error_bar_pct == time_error_bar_pct(False, True, host_bound=True)
    assert resp.time.error_bar_pct > time_error_bar_pct(False)
    assert any(line.startswith("Step time: launch-bound.") for line in resp.assumptions)


def test_a_gpu_bound_estimate_keeps_the_single_gpu_bar() -> None:
    resp = _estimate("llama31-8b-l8-lora-s4096")
    assert resp.time is not None
    assert resp.time.error_bar_pct == time_error_bar_pct(False)
    assert not any("launch-bound" in line for line in resp.assumptions)


def test_the_host_bound_bar_never_narrows_a_class() -> None:
    assert time_error_bar_pct(True, True, "pytorch", 32768, host_bound=True) == time_error_bar_pct(
        True, True, "pytorch", 32768)
    assert time_error_bar_pct(False, False, host_bound=True) >= time_error_bar_pct(False, False)
