"""The compiled estimator (estimator/native.py, scripts/build_native.py, docs/native.md).

- The loader uses a build only when it matches: every source digest, the interpreter's extension suffix, every
  file present; otherwise it says why, and ``CAPPLAN_NATIVE=1`` turns that into an ``ImportError``.
- The compiled build gives the same bytes as the plain sources: the request guard (benchmarks/guard.py, 2,754
  requests through estimate, plan, answer, TCO) run once compiled and once plain, byte for byte. Without a
  matching build the test builds one first (about 70 s on two cores; ``scripts/test`` builds it before pytest).
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from estimator import native

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _keep_status() -> Iterator[None]:
    """Tests that call :func:`native.install` leave the status the package was imported with."""
    before = native._STATUS
    yield
    native._STATUS = before


def _fake_build(tmp_path: Path, **changes: object) -> Path:
    """A native directory whose manifest matches the current sources, with empty stand-ins for the files."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    module, support = f"estimator/training/timing{suffix}", f"capplan_estimator__mypyc{suffix}"
    manifest: dict[str, object] = {"ext_suffix": suffix, "sources": native.current_sources(),
                                   "modules": {"estimator.training.timing": module},
                                   "support": {"capplan_estimator__mypyc": support}}
    manifest.update(changes)
    for rel in (module, support):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    (tmp_path / native.MANIFEST_NAME).write_text(json.dumps(manifest))
    return tmp_path


def test_a_matching_build_maps_each_module_to_its_file(tmp_path: Path) -> None:
    build = _fake_build(tmp_path)
    files = native._check(json.loads((build / native.MANIFEST_NAME).read_text()), build)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    assert files == {"estimator.training.timing": build / f"estimator/training/timing{suffix}",
                     "capplan_estimator__mypyc": build / f"capplan_estimator__mypyc{suffix}"}


def test_an_edited_source_makes_the_build_unusable(tmp_path: Path) -> None:
    sources = dict(native.current_sources())
    sources["estimator/training/timing.py"] = "0" * 64
    build = _fake_build(tmp_path, sources=sources)
    reason = native._check(json.loads((build / native.MANIFEST_NAME).read_text()), build)
    assert reason == "estimator/training/timing.py changed since the build (scripts/build-native rebuilds)"


def test_an_added_source_makes_the_build_unusable(tmp_path: Path) -> None:
    sources = dict(native.current_sources())
    del sources["estimator/training/flops.py"]
    build = _fake_build(tmp_path, sources=sources)
    reason = native._check(json.loads((build / native.MANIFEST_NAME).read_text()), build)
    assert reason == "estimator/training/flops.py added or removed since the build (scripts/build-native rebuilds)"


def test_a_build_for_another_interpreter_is_not_used(tmp_path: Path) -> None:
    build = _fake_build(tmp_path, ext_suffix=".cpython-39-x86_64-linux-gnu.so")
    reason = native._check(json.loads((build / native.MANIFEST_NAME).read_text()), build)
    assert isinstance(reason, str) and reason.startswith("built for .cpython-39-x86_64-linux-gnu.so")


def test_a_missing_file_makes_the_build_unusable(tmp_path: Path) -> None:
    build = _fake_build(tmp_path)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (build / f"estimator/training/timing{suffix}").unlink()
    reason = native._check(json.loads((build / native.MANIFEST_NAME).read_text()), build)
    assert reason == f"missing from the build: {build / f'estimator/training/timing{suffix}'}"


def test_required_but_unusable_is_an_import_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_NATIVE", "1")
    with pytest.raises(ImportError, match="no compiled build"):
        native.install(tmp_path)


def test_turned_off_loads_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_NATIVE", "0")
    before = list(sys.meta_path)
    status = native.install(_fake_build(tmp_path))
    assert (status.active, status.reason) == (False, "turned off (CAPPLAN_NATIVE=0)")
    assert sys.meta_path == before


def test_without_a_build_the_package_runs_plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_NATIVE", "auto")
    status = native.install(tmp_path)
    assert (status.active, status.reason) == (False, "no compiled build (scripts/build-native makes one)")


def _run(*args: str, native_mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CAPPLAN_NATIVE": native_mode, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def native_build() -> None:
    """A build matching the sources: the existing one, or a new one (scripts/build_native.py)."""
    build = _run("scripts/build_native.py", native_mode="0")
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-4000:]


@pytest.mark.slow
def test_compiled_modules_are_the_ones_imported(native_build: None) -> None:
    probe = _run("-c", "import sys, estimator; s = estimator.native.status(); "
                 "print(s.active, s.modules, sys.modules['estimator.training.timing'].__file__)", native_mode="1")
    assert probe.returncode == 0, probe.stderr
    active, modules, timing_file = probe.stdout.split()
    assert active == "True" and int(modules) > 40
    assert timing_file.startswith(str(native.NATIVE_DIR)) and timing_file.endswith(".so")


@pytest.mark.slow
def test_the_compiled_build_answers_the_guard_byte_for_byte(native_build: None, tmp_path: Path) -> None:
    """benchmarks/guard.py: 2,754 fixed requests (estimates, refusals, 26 planner searches, 9 reverse questions,
    TCO, job cost, upgrade, issue 29's mechanisms), one canonical JSON line each: compiled and plain output must be
    the same bytes."""
    compiled, plain = tmp_path / "compiled.jsonl", tmp_path / "plain.jsonl"
    for mode, out in (("1", compiled), ("0", plain)):
        run = _run("-m", "benchmarks.guard", "--out", str(out), native_mode=mode)
        assert run.returncode == 0, run.stderr[-4000:]
    compiled_lines, plain_lines = compiled.read_text().splitlines(), plain.read_text().splitlines()
    assert len(plain_lines) == 2754
    differing = [i for i, (a, b) in enumerate(zip(compiled_lines, plain_lines, strict=True)) if a != b]
    assert differing == [], f"{len(differing)} lines differ, first: {plain_lines[differing[0]][:300]}"
