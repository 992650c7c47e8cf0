"""A measured case's step time, one rule for every comparison (the H200 calibration's tests and reports, the H100
stacks comparison): the median of its timed steps, or, when those disagree by more than ``NOISY_SPREAD``
(slowest / fastest - 1: the host or a shared VM disturbed a run whose Python path issues the kernels), the median
of every steady-state step (the memory steps from the second on, and the timed steps)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

NOISY_SPREAD = 0.20


def measured_step_s(measured: Mapping[str, Any]) -> float:
    """The step time of a measurement (``measure.py`` / ``measure_stacks.py``'s ``measured`` figures)."""
    timed = [float(x) for x in measured.get("step_times_s") or []]
    if timed and max(timed) / min(timed) - 1.0 > NOISY_SPREAD:
        return float(statistics.median([float(x) for x in measured.get("memory_step_times_s", [])[1:]] + timed))
    return float(measured["step_time_s"])
