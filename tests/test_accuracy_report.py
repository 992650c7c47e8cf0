"""The committed accuracy files are what ``benchmarks/calibration/accuracy_report.py`` writes from the H200
measurements and the current estimator: ``estimator/data/accuracy.json`` (``memory_error_bar_pct``, behind
every response's ``error_bar_pct``), ``docs/accuracy-memory.md`` and the memory section of ``docs/accuracy.md``.
Nothing here writes a file: the report is regenerated in memory and compared.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.calibration import accuracy_report as report
from estimator.training.accuracy import memory_error_bar_pct


def test_committed_memory_accuracy_files_are_up_to_date() -> None:
    stale = [str(p.relative_to(report.ROOT)) for p in report.stale_files()]
    assert stale == [], f"regenerate with python -m benchmarks.calibration.accuracy_report: {stale}"


def test_response_error_bars_are_the_calibrated_class_bars() -> None:
    """Every measured set feeds the bars (calibration file, LoRA calls 7-8, the TP set), each class's p90 widened
    until leave-one-family-out coverage reaches 80 %."""
    rows = report.all_rows()
    bars = report.memory_bars(rows)
    assert memory_error_bar_pct(False, "full") == bars["full"]
    assert memory_error_bar_pct(False, "lora") == bars["lora"]
    assert memory_error_bar_pct(True, "full") == bars["sharded"]
    assert memory_error_bar_pct(False, "full", tensor_parallel=True) == bars["tensor_parallel"]
    assert memory_error_bar_pct(True, "full", measured_kind=False) >= 10.0
    for klass in report.CLASSES:
        kr = [r for r in rows if r.klass == klass]
        covered, compared = report.leave_one_family_out(kr, bars[klass] / report._bar(kr))
        assert compared >= 19 and covered >= 0.8 * compared, (klass, covered, compared)


def _row(family: str, error: float) -> report.MemoryRow:
    measured = 1_000_000
    return report.MemoryRow(f"{family}-{error}", "sharded", False, measured, round(measured * (1 + error)),
                            0, 0, True, family)


def test_a_bar_too_narrow_for_a_left_out_family_is_widened() -> None:
    """Family A's cases are 1 % off, family B's 3 %: B left out gets A's 2 % bar and is outside it, so the
    bars are widened (1.5 x brings B's left-out bar to 3 %) and the class's bar (p90 3 %) with them."""
    rows = [_row("A", 0.01)] * 8 + [_row("B", 0.03)] * 4
    assert report.leave_one_family_out(rows) == (8, 12)
    assert report.widening(rows) == 1.5
    assert report.class_bar(rows) == 4.5
    one_family = [_row("A", 0.01)] * 8
    assert report.class_bar(one_family) >= 10.0


def test_check_exits_0_and_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    before = {p: p.read_bytes() for p in report.expected_files()}
    monkeypatch.setattr(Path, "write_text", _no_write)
    assert report.main(["--check"]) == 0
    assert {p: p.read_bytes() for p in before} == before


def test_check_finds_a_stale_file_and_leaves_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    stale_json = tmp_path / "accuracy.json"
    old = {"memory_error_bar_pct": {"all": 99.0}, "time_error_bar_pct": {"all": 1.0}}
    stale_json.write_text(json.dumps(old))
    monkeypatch.setattr(report, "ACCURACY_JSON", stale_json)
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "ACCURACY_MD", tmp_path / "accuracy-memory.md")  # missing: stale too
    monkeypatch.setattr(report, "SUMMARY_MD", tmp_path / "accuracy.md")  # missing: not checked
    assert report.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "stale: accuracy.json" in out and "stale: accuracy-memory.md" in out
    assert json.loads(stale_json.read_text()) == old
    assert not (tmp_path / "accuracy-memory.md").exists()


def test_the_step_time_part_is_left_alone() -> None:
    expected = json.loads(report.expected_files()[report.ACCURACY_JSON])
    committed = json.loads(report.ACCURACY_JSON.read_text())
    assert expected["time_error_bar_pct"] == committed["time_error_bar_pct"]
    summary = report.expected_files()[report.SUMMARY_MD]
    text = report.SUMMARY_MD.read_text()
    assert summary[summary.index("## Step time"):] == text[text.index("## Step time"):]


def _no_write(self: Path, *args: object, **kwargs: object) -> int:
    raise AssertionError(f"--check wrote {self}")
