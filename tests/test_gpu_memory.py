"""NVML's used memory: one reading for ``capplan check --run`` and the calibration (app/check/gpu_memory.py).

On the H100 (device call of 2026-12-06 07:51 UTC, ``tests/data/check_run_h100``) ``--run`` first read NVML's version 1
``used``, 503,316,480 bytes (the driver's own reservation) above the calibration's version 2 reading of the same
cases; both now read through :func:`app.check.gpu_memory.nvml_memory`."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from app.check import gpu_memory

ROOT = Path(__file__).resolve().parents[1]


class _Info:
    def __init__(self, used: int, reserved: int | None) -> None:
        self.used, self.total, self.free = used, 80 * 2**30, 80 * 2**30 - used
        if reserved is not None:
            self.reserved = reserved


def _fake_nvml(v2: bool) -> types.SimpleNamespace:
    reserved = 503_316_480

    def info(handle: object, version: object = None) -> _Info:
        if version is None:  # version 1: the reservation counted as used
            return _Info(30 * 2**30 + reserved, None)
        if not v2:
            raise RuntimeError("NVML_ERROR_FUNCTION_NOT_FOUND")
        return _Info(30 * 2**30, reserved)

    return types.SimpleNamespace(nvmlDeviceGetMemoryInfo=info, nvmlMemory_v2=object())


def test_reads_version_2_and_keeps_the_driver_reservation_apart() -> None:
    mem = gpu_memory.nvml_memory(_fake_nvml(True), object())
    assert mem == {"used": 30 * 2**30, "total": 80 * 2**30, "free": 50 * 2**30, "reserved": 503_316_480,
                   "nvml_version": 2}


def test_falls_back_to_version_1_and_says_so() -> None:
    mem = gpu_memory.nvml_memory(_fake_nvml(False), object())
    assert mem is not None and mem["nvml_version"] == 1 and mem["used"] == 30 * 2**30 + 503_316_480


def test_no_nvml_is_none() -> None:
    assert gpu_memory.nvml_memory(None, None) is None


def test_calibration_and_run_share_the_reading() -> None:
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "benchmarks" / "calibration"))
    try:
        spec = importlib.util.spec_from_file_location("measure_for_nvml_test",
                                                      ROOT / "benchmarks" / "calibration" / "measure.py")
        assert spec is not None and spec.loader is not None
        measure = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(measure)
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "calibration"))
    from app.check import run

    code = measure._nvml_mem.__code__  # the same function of the same file (loaded there by its path)
    assert (code.co_filename, code.co_name) == (gpu_memory.__file__, "nvml_memory")
    assert run.gpu_memory.nvml_memory is gpu_memory.nvml_memory
