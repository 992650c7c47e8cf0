"""The HTML side of the one exception-to-response path: ``app.errors`` builds the problem, this draws it."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from app.schemas.problem import Problem
from app.web.templating import is_htmx, render

__all__ = ["render_problem"]


def render_problem(request: Request, problem: Problem) -> Response:
    """``error.html`` (or, for htmx, just its message card) with the problem's status code."""
    template = "_error.html" if is_htmx(request) else "error.html"
    return render(request, template, {"problem": problem}, status_code=problem.status)
