"""Shared fixtures and guards. Keep this small; put area fixtures in the area's own conftest."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

POSTGRES_URL_ENV = "CAPPLAN_TEST_POSTGRES_URL"


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI the PostgreSQL tests must run: refuse to start without their database."""
    if os.environ.get("CI", "").lower() == "true" and not os.environ.get(POSTGRES_URL_ENV):
        raise pytest.UsageError(f"CI=true but {POSTGRES_URL_ENV} is unset: the postgres tests would be skipped")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL database for this test session (tests marked ``postgres``).

    ``CAPPLAN_TEST_POSTGRES_URL`` points at a server (any database on it); this creates a fresh database
    there and drops it at the end. Skips when the variable is unset (never in CI, see above)."""
    server_url = os.environ.get(POSTGRES_URL_ENV)
    if not server_url:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    url = make_url(server_url).set(drivername="postgresql+psycopg")
    name = f"capplan_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
