"""The work budget of one request (estimator.planner.budget) from the settings: planner layouts and wall clock."""

from __future__ import annotations

from contextlib import AbstractContextManager

from app.core.settings import Settings
from estimator.planner.budget import Budget, work_budget

__all__ = ["request_budget"]


def request_budget(settings: Settings, field: str = "constraints") -> AbstractContextManager[Budget]:
    """``CAPPLAN_MAX_LAYOUTS_PER_REQUEST`` layouts and ``CAPPLAN_COMPUTE_TIMEOUT_S`` seconds; past the first a
    422 naming ``field`` (or the field the planner names), past the second a 503 with ``Retry-After``."""
    return work_budget(max_layouts=settings.max_layouts_per_request, seconds=settings.compute_timeout_s, field=field)
