"""``/api/v1/version``: which capplan and which estimator build answer (issue 27).

The compiled estimator (mypyc, ``estimator.native``) gives the same numbers as the plain-Python one, a few times
faster; an operator or a quoting tool can see which one this process runs, and why not the compiled one."""

from __future__ import annotations

import platform
from importlib.metadata import version
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from estimator import ESTIMATOR_VERSION, native

router = APIRouter(prefix="/version", tags=["version"])


class VersionOut(BaseModel):
    capplan_version: str = Field(description="the installed capplan package's version")
    estimator_version: str = Field(description="the estimator's version, recorded with every saved quote and plan")
    estimator_build: Literal["compiled", "python"] = Field(
        description="`compiled`: the estimator's mypyc build (docs/native.md); `python`: the same code as plain "
                    "Python (same numbers, slower)")
    estimator_build_detail: str = Field(description="why: the build's location, or why it is not used")
    compiled_modules: int = Field(ge=0, description="estimator modules loaded from the compiled build")
    python_version: str


def current_version() -> VersionOut:
    """What this process runs (the same line ``capplan serve`` logs at start)."""
    build = native.status()
    return VersionOut(
        capplan_version=version("capplan"), estimator_version=ESTIMATOR_VERSION,
        estimator_build="compiled" if build.active else "python", estimator_build_detail=build.reason,
        compiled_modules=build.modules, python_version=platform.python_version(),
    )


@router.get("", response_model=VersionOut, summary="Versions and the estimator build")
def get_version() -> VersionOut:
    """The capplan and estimator versions, and whether the estimator runs compiled (`estimator_build`)."""
    return current_version()
