"""The GPU's used memory as NVML reports it: one implementation for ``capplan check --run`` and the calibration's
measurement scripts (``benchmarks/calibration/measure.py``, ``measure_stacks.py``), so that their NVML figures are
the same reading.

NVML's ``nvmlDeviceGetMemoryInfo`` has two versions. Version 1's ``used`` includes the memory the driver reserves
for itself (about 480 MiB on an H100 with driver 580); version 2 reports it apart (``reserved``) and leaves it out of
``used``. The calibration has read version 2 since its first device call, so this reads version 2 and falls back to
version 1 only where the driver or nvidia-ml-py lacks it (the record then says ``nvml_version`` 1).

It imports nothing but the standard library and, when present, ``pynvml`` (nvidia-ml-py): the measurement scripts
run on a bare GPU machine and load it by its path.
"""

from __future__ import annotations

from typing import Any

__all__ = ["nvml", "nvml_memory"]


def nvml(index: int = 0) -> tuple[Any, Any]:
    """``(pynvml, handle of GPU index)``, or ``(None, None)`` without nvidia-ml-py or NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None, None


def nvml_memory(nv: Any, handle: Any) -> dict[str, int] | None:
    """``used``, ``total``, ``free`` (and ``reserved``, ``nvml_version``) of the device, or ``None`` without NVML."""
    if nv is None:
        return None
    try:
        try:
            m = nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2)
            return {"used": int(m.used), "total": int(m.total), "free": int(m.free),
                    "reserved": int(getattr(m, "reserved", 0)), "nvml_version": 2}
        except Exception:
            m = nv.nvmlDeviceGetMemoryInfo(handle)
            return {"used": int(m.used), "total": int(m.total), "free": int(m.free), "nvml_version": 1}
    except Exception:
        return None
