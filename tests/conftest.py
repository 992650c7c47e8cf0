"""Shared fixtures and guards. Keep this small; put area fixtures in the area's own conftest."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

POSTGRES_URL_ENV = "CAPPLAN_TEST_POSTGRES_URL"
REDIS_URL_ENV = "CAPPLAN_TEST_REDIS_URL"  # a Redis server for the several-workers test (scripts/test starts one)

# Starlette's TestClient sends ``Host: testserver``: allow it (and the loopback names the live servers use)
# for every Settings the tests make, unless a test sets its own list
os.environ.setdefault("CAPPLAN_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
# the app's start-up freeze of the heap (app.core.startup.frozen_heap) collects garbage first: ~0.1 s per app
os.environ.setdefault("CAPPLAN_GC_FREEZE", "0")


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI the PostgreSQL tests must run: refuse to start without their database."""
    if os.environ.get("CI", "").lower() == "true" and not os.environ.get(POSTGRES_URL_ENV):
        raise pytest.UsageError(f"CI=true but {POSTGRES_URL_ENV} is unset: the postgres tests would be skipped")
    if os.environ.get("CI", "").lower() == "true" and not os.environ.get(REDIS_URL_ENV):
        raise pytest.UsageError(f"CI=true but {REDIS_URL_ENV} is unset: the several-workers test would be skipped")


@contextmanager
def fresh_postgres_database(server_url: str) -> Iterator[str]:
    """Create an empty database on the server of ``server_url``; yield its URL; drop it afterwards."""
    url = make_url(server_url).set(drivername="postgresql+psycopg")
    name = f"capplan_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield url.set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """``CAPPLAN_TEST_POSTGRES_URL`` (a server; any database on it). Skips when unset, which CI forbids."""
    server_url = os.environ.get(POSTGRES_URL_ENV)
    if not server_url:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    return server_url


@pytest.fixture(scope="session")
def redis_url() -> str:
    """``CAPPLAN_TEST_REDIS_URL`` (a Redis server the test may flush). Skips when unset, which CI forbids."""
    url = os.environ.get(REDIS_URL_ENV)
    if not url:
        pytest.skip(f"{REDIS_URL_ENV} is not set")
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def blank_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database: a SQLite file, and (marked postgres) a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'capplan.db'}"
        return
    with fresh_postgres_database(request.getfixturevalue("postgres_server_url")) as url:
        yield url


@pytest.fixture
def blank_database_engine(blank_database_url: str) -> Iterator[Engine]:
    """An engine on :func:`blank_database_url`; for the migration tests, which build the schema of an older
    revision themselves."""
    from app.core.db import make_engine

    engine = make_engine(blank_database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """A throwaway PostgreSQL database shared by this test session."""
    with fresh_postgres_database(postgres_server_url) as url:
        yield url


@pytest.fixture
def cli_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh SQLite file for one CLI test (``CAPPLAN_DATABASE_URL``), the settings cache cleared around it;
    CLI test modules take it with ``pytestmark = pytest.mark.usefixtures("cli_database")``."""
    path = tmp_path / "cli.db"
    monkeypatch.setenv("CAPPLAN_DATABASE_URL", f"sqlite:///{path}")
    from app.core.settings import get_settings

    get_settings.cache_clear()
    yield path
    get_settings.cache_clear()


def write_input(tmp_path: Path, content: str, name: str = "input.json") -> str:
    """``content`` written to ``tmp_path / name``; the path, for ``--input``."""
    path = tmp_path / name
    path.write_text(content)
    return str(path)
