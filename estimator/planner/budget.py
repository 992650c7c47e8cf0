"""A work budget for one computation: how many planner layouts it may search and until when it may run.

The library has no limit of its own (``plan()`` from Python or the CLI searches what it is asked to); a
server that answers strangers sets one around each request with :func:`work_budget`::

    with work_budget(max_layouts=400_000, seconds=10.0, field="constraints.max_nodes"):
        plan(request, catalog)

The planner *charges* the layouts it is about to search (:func:`charge`, before the work, so a request over
the limit fails at once with :class:`WorkBudgetError`, a 422 naming the field) and the long loops call
:func:`check_time`, which raises :class:`DeadlineExceeded` once the wall-clock allowance is spent. The
budget lives in a :class:`contextvars.ContextVar`, so concurrent requests (threads, tasks) each have their
own; outside :func:`work_budget` both calls do nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

from estimator.errors import InvalidRequestError

__all__ = ["Budget", "DeadlineExceeded", "WorkBudgetError", "charge", "check_time", "current", "work_budget"]


class WorkBudgetError(InvalidRequestError):
    """The request would search more layouts than one request may: a property of the request (422)."""


class DeadlineExceeded(Exception):
    """The computation ran past its wall-clock allowance (the machine is busy, or the request is too big)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the computation ran past its {seconds:g} s allowance")
        self.seconds = seconds


@dataclass
class Budget:
    max_layouts: int | None
    seconds: float | None
    field: str
    started: float
    layouts: int = 0

    @property
    def deadline(self) -> float | None:
        return None if self.seconds is None else self.started + self.seconds


_current: Final[ContextVar[Budget | None]] = ContextVar("capplan_work_budget", default=None)


def current() -> Budget | None:
    """The budget in force, or ``None``."""
    return _current.get()


@contextmanager
def work_budget(*, max_layouts: int | None, seconds: float | None, field: str = "constraints") -> Iterator[Budget]:
    """Run the body under a budget of ``max_layouts`` planner layouts and ``seconds`` of wall clock; ``field``
    is the request field a :class:`WorkBudgetError` names unless the planner names a better one."""
    budget = Budget(max_layouts, seconds, field, time.monotonic())
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


def charge(layouts: int, field: str | None = None, *, what: str = "layouts", advice: str | None = None) -> None:
    """Count ``layouts`` against the budget before searching them; :class:`WorkBudgetError` past the limit
    (``advice``: what to narrow, when not the hardware and parallelism)."""
    budget = _current.get()
    if budget is None:
        return
    check_time()
    if budget.max_layouts is not None and budget.layouts + layouts > budget.max_layouts:
        raise WorkBudgetError(
            f"this request would search {budget.layouts + layouts:,} {what}, more than the {budget.max_layouts:,} "
            "one request may: " + (advice or "narrow constraints.gpus or constraints.servers, lower "
                                   "constraints.max_nodes, or pin hardware or parallelism fields"),
            field or budget.field)
    budget.layouts += layouts


def check_time() -> None:
    """:class:`DeadlineExceeded` once the budget's wall-clock allowance is spent."""
    budget = _current.get()
    if budget is None or budget.deadline is None:
        return
    if time.monotonic() > budget.deadline:
        raise DeadlineExceeded(budget.seconds or 0.0)
