"""Issue 31 for issue 29's mechanism classes: one H100 case of each through ``capplan check --run`` (the mechanisms
applied by app/check/stacks.py), and the calibration's ``measure_stacks.py`` on the same cases on the same GPU right
after (``tests/data/check_run_h100/call3`` and ``call4``, ``check_run_batch.py --mechanisms --baseline``).

Memory: the allocated and reserved peaks of a run equal the calibration's (one function,
``app.check.record.measured_figures``, reads both) within 0.02 %, NVML's used memory within 0.1 % (measured: equal to
the byte but for the torchtune loss, 2 MiB of 20 GiB, its labels now built on each call, and one NVML reading, 6 MiB).
Step time: these are small host-bound steps (0.14-0.43 s); the same script on the same case moved by up to 36 %
between two H100 sessions (``stacks_h100_raw`` call 1 at 05:21 UTC vs the baseline here at 08:34), so a run is held to
that spread, not to the memory's equality; the one GPU-bound case (activation offloading at 8k tokens) agrees within
0.1 %."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.check.record import measured_figures
from estimator.training.accuracy import accuracy_table

ROOT = Path(__file__).resolve().parents[1]
CALLS = [ROOT / "tests" / "data" / "check_run_h100" / c for c in ("call3", "call4")]
RAW = ROOT / "tests" / "data" / "stacks_h100_raw"
MEMORY = ("peak_allocated_bytes", "peak_reserved_bytes", "nvml_used_bytes")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _pairs() -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(class, case id, the run's measured figures, the baseline's measured figures)."""
    out = []
    for call in CALLS:
        base = {r["id"]: r for r in _lines(call / "measure_stacks" / "results.jsonl") if r["status"] == "ok"}
        for row in _lines(call / "check_run_mechanisms.jsonl"):
            assert row["rc"] == 0 and row["record"], row["case_id"]
            b = base[row["case_id"]]
            out.append((row["class"], row["case_id"], row["record"]["measured"],
                        measured_figures(b["measured"], memory_only=False)))
    return out


PAIRS = _pairs()


def test_every_mechanism_class_has_a_run_record() -> None:
    classes = set(accuracy_table()["mechanism_memory_error_bar_pct"])
    assert classes <= {c for c, *_ in PAIRS}, classes - {c for c, *_ in PAIRS}


@pytest.mark.parametrize("pair", PAIRS, ids=[p[1] for p in PAIRS])
def test_memory_equals_the_calibration_on_the_same_gpu(pair: tuple[str, str, dict, dict]) -> None:
    _klass, _cid, run, base = pair
    for fig in MEMORY:  # NVML reads the whole device at one moment: torchao AdamW8bit's run read 6 MiB more
        assert run[fig] == pytest.approx(base[fig], rel=1e-3 if fig.startswith("nvml") else 2e-4), fig


def test_the_runs_applied_their_mechanisms_and_name_the_libraries() -> None:
    for klass, cid, run, _base in PAIRS:
        field = klass.split(":")[0]
        assert any(field in k for k in run.get("mechanisms", {})), (cid, run.get("mechanisms"))


def _session_spread() -> float:
    """The largest relative move of the same script's step time on the same case between two H100 sessions."""
    first = {}
    for path in sorted(RAW.glob("call[1-5]_results.jsonl")):
        for r in _lines(path):
            if r.get("status") == "ok":
                first.setdefault(r["id"], r["measured"]["step_time_s"])
    moves = []
    for call in CALLS:
        for r in _lines(call / "measure_stacks" / "results.jsonl"):
            if r["id"] in first:
                moves.append(abs(r["measured"]["step_time_s"] / first[r["id"]] - 1))
    return max(moves)


def test_step_time_within_the_calibrations_own_session_spread() -> None:
    spread = _session_spread()
    assert 0.30 < spread < 0.45  # paged AdamW32bit, 0.1086 s then 0.1472 s
    for _klass, cid, run, base in PAIRS:
        assert abs(run["step_time_s"] / base["step_time_s"] - 1) <= spread, cid
    offload = next(p for p in PAIRS if p[1].endswith("-offtrl"))
    assert offload[2]["step_time_s"] == pytest.approx(offload[3]["step_time_s"], rel=1e-3)
