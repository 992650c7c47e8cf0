"""Step time against the H200 calibration measurements (``tests/data/calibration_h200.json``).

Every measured, non-OOM single-GPU case (``run.world_size_fake`` is null): the median of the timed steps
(``measured.step_time_s``, PyTorch 2.11 + Hugging Face transformers 5.17, SDPA attention, AdamW) against
``estimator.timing.step_time`` for the case's own request. Acceptance (issue #3): median |error| <= 10%,
every case within +-20%.

The FSDP2 cases ran rank 0 under PyTorch's fake process group: their collectives move no data, so their step
time is compute plus FSDP's own copies. They are compared with the estimate minus its exposed communication,
and held to the same +-20%. (They set ``fsdp_scale``; the other fitted constants come from the single-GPU
cases -- ``estimator/efficiency.py``.)
"""

from __future__ import annotations

import json
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from estimator.layout import build_layout
from estimator.modelspec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.timing import step_time
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
    layout = build_layout(req, shape)
    c = catalog()
    t = step_time(req, shape, layout, c.gpus[req.hardware.gpu], None, c)
    if case["run"].get("world_size_fake"):
        return t.step_time_s - t.exposed_communication_s
    return t.step_time_s


def relative_error(case: dict[str, Any]) -> float:
    return estimated_step_s(case) / float(case["measured"]["step_time_s"]) - 1.0


def test_the_calibration_set_is_there() -> None:
    assert len(_single()) >= 40 and len(_fake_pg()) >= 10


@pytest.mark.parametrize("case", _single(), ids=lambda c: c["id"])
def test_single_gpu_case_within_20_percent(case: dict[str, Any]) -> None:
    assert abs(relative_error(case)) <= CASE_LIMIT


def test_single_gpu_median_error_within_10_percent() -> None:
    errors = [abs(relative_error(c)) for c in _single()]
    assert statistics.median(errors) <= MEDIAN_LIMIT


@pytest.mark.parametrize("case", _fake_pg(), ids=lambda c: c["id"])
def test_fsdp_fake_process_group_compute_within_20_percent(case: dict[str, Any]) -> None:
    assert abs(relative_error(case)) <= CASE_LIMIT
