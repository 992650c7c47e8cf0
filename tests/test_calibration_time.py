"""Step time against the H200 calibration measurements (``tests/data/calibration_h200.json``).

Every measured, non-OOM single-GPU case (``run.world_size_fake`` is null): the median of the timed steps
(``measured.step_time_s``, PyTorch 2.11 + Hugging Face transformers 5.17) against
``estimator.training.timing.step_time`` for the case's own request. Acceptance (issue #3): median |error| <= 10%,
every case within +-20%.

When a case's timed steps disagree by more than ``NOISY_SPREAD`` (slowest / fastest - 1: the host, a shared
VM, disturbed a CPU-bound run -- small QLoRA models, whose Python path issues the kernels), three steps give no
reliable median: the median of every steady-state step (memory steps from the second on, and the timed steps)
is used instead (:func:`measured_step_s`). Six cases qualify; only one moves by more than 3%
(l8b-qlora16al-fused-b1-s4096-ck: timed 0.819, 1.104, 0.720 s, memory steps 0.702, 0.669 s -> 0.720 s).

The FSDP2 and DDP cases ran rank 0 under PyTorch's fake process group: their collectives move no data, so their
step time is compute plus the framework's own copies (FSDP2's copy-in/out, DDP's bucket copies). They are
compared with the estimate's compute only: the step minus its exposed communication and minus the slow-down
that hidden communication causes (``timing.COMM_OVERLAP_PENALTY`` of it: NCCL kernels that never ran), and held
to the same +-20%. (The FSDP2 cases set ``fsdp_scale``; the other fitted constants come from the single-GPU
cases -- ``estimator/training/efficiency.py``.)
"""

from __future__ import annotations

import json
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from benchmarks.calibration.step_times import measured_step_s as measured_step_s_of
from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.training.layout import build_layout
from estimator.training.timing import step_time, without_collectives_s
from hardware_catalog import Catalog, load_catalog

DATA = Path(__file__).resolve().parent / "data" / "calibration_h200.json"
CASE_LIMIT = 0.20
MEDIAN_LIMIT = 0.10


@cache
def catalog() -> Catalog:
    return load_catalog()


@cache
def _cases() -> tuple[dict[str, Any], ...]:
    data = json.loads(DATA.read_text())
    return tuple(c for c in data["cases"] if not c["measured"].get("oom") and c["measured"].get("step_time_s"))


def _single() -> list[dict[str, Any]]:
    return [c for c in _cases() if not c["run"].get("world_size_fake")]


def _fake_pg() -> list[dict[str, Any]]:
    return [c for c in _cases() if c["run"].get("world_size_fake")]


def estimated_step_s(case: dict[str, Any]) -> float:
    req = EstimateRequest.model_validate(case["request"])
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    c = catalog()
    t = step_time(job_of(req), shape, layout, c.gpus[req.hardware.gpu], None, c)
    if case["run"].get("world_size_fake"):
        return without_collectives_s(t.step_time_s, t.communication_s, t.exposed_communication_s)
    return t.step_time_s


def measured_step_s(case: dict[str, Any]) -> float:
    """The case's step time (:func:`benchmarks.calibration.step_times.measured_step_s`, ``NOISY_SPREAD`` rule)."""
    return measured_step_s_of(case["measured"])


def relative_error(case: dict[str, Any]) -> float:
    return estimated_step_s(case) / measured_step_s(case) - 1.0


def test_the_calibration_set_is_there() -> None:
    assert len(_single()) >= 70 and len(_fake_pg()) >= 18


def test_call_4_kinds_are_checked() -> None:
    """Device call 4's kinds are in the set: QLoRA, 8-bit AdamW, SGD, Adafactor, eager attention (one GPU), DDP
    and FSDP2 shard-grad-op (fake process group)."""
    single = [c["request"] for c in _single()]
    trainings = [r["training"] for r in single]
    assert {"qlora"} <= {t["method"] for t in trainings}
    assert {"adamw-8bit", "sgd", "adafactor"} <= {t.get("optimizer", "adamw") for t in trainings}
    assert "eager" in {t.get("attention", "sdpa") for t in trainings}
    fake = [(c["run"].get("wrap"), c["request"]["parallelism"].get("sharding")) for c in _fake_pg()]
    assert ("ddp", "none") in fake and any(s == "zero2" for _w, s in fake)


@pytest.mark.parametrize("case", _single(), ids=lambda c: c["id"])
def test_single_gpu_case_within_20_percent(case: dict[str, Any]) -> None:
    assert abs(relative_error(case)) <= CASE_LIMIT


def test_single_gpu_median_error_within_10_percent() -> None:
    errors = [abs(relative_error(c)) for c in _single()]
    assert statistics.median(errors) <= MEDIAN_LIMIT


@pytest.mark.parametrize("case", _fake_pg(), ids=lambda c: c["id"])
def test_fsdp_fake_process_group_compute_within_20_percent(case: dict[str, Any]) -> None:
    assert abs(relative_error(case)) <= CASE_LIMIT
