"""Shared fixtures and guards. Keep this small; put area fixtures in the area's own conftest."""

from __future__ import annotations

import os

import pytest

POSTGRES_URL_ENV = "CAPPLAN_TEST_POSTGRES_URL"


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI the PostgreSQL tests must run: refuse to start without their database."""
    if os.environ.get("CI", "").lower() == "true" and not os.environ.get(POSTGRES_URL_ENV):
        raise pytest.UsageError(f"CI=true but {POSTGRES_URL_ENV} is unset: the postgres tests would be skipped")


@pytest.fixture
def postgres_url() -> str:
    """A PostgreSQL URL for tests marked ``postgres`` (skips outside CI when there is none)."""
    url = os.environ.get(POSTGRES_URL_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    return url
