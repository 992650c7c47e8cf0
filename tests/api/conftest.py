"""API test fixtures. Each test gets its own in-memory SQLite (StaticPool), migrated and seeded, injected with
``dependency_overrides`` (cleared afterwards). Modules that mark themselves with ``BOTH_BACKENDS`` run on a
real PostgreSQL too: one migrated database per session, emptied and re-seeded for each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from app.core.db import make_engine
from app.core.migrate import upgrade
from app.core.settings import Settings
from app.core.startup import prepare_database
from app.deps import get_session
from app.main import create_app
from app.models import Base
from app.repositories.api_keys import create_key, revoke_key
from tests.api.fake_catalog import fake_catalog

#: ``pytestmark = BOTH_BACKENDS`` runs a module's tests on SQLite and on PostgreSQL
BOTH_BACKENDS = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def catalog(request: pytest.FixtureRequest) -> Any:
    """The small stand-in catalog; ``@pytest.mark.parametrize("catalog", ["shipped"], indirect=True)`` gives the
    shipped one, for a test that renders pages (they run the serving estimate, which needs the whole catalog)."""
    if getattr(request, "param", None) == "shipped":
        from hardware_catalog.loader import load_catalog

        return load_catalog()
    return fake_catalog()


@pytest.fixture(scope="session")
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url)
    upgrade(engine)
    yield engine
    engine.dispose()


def _emptied(engine: Engine) -> Engine:
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    return engine


@pytest.fixture
def engine(backend: str, catalog: Any, request: pytest.FixtureRequest) -> Iterator[Engine]:
    if backend == "postgres":
        engine = _emptied(request.getfixturevalue("pg_engine"))
        prepare_database(engine, catalog, migrate=False)
        yield engine
        return
    engine = create_engine("sqlite://", connect_args={"check_same_thread": False}, poolclass=StaticPool)
    prepare_database(engine, catalog)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url="sqlite://", migrate_on_start=False, seed_catalog_on_start=False,
                    rate_limit_anonymous="1000/minute", rate_limit_per_key="1000/minute")


@pytest.fixture
def app(settings: Settings, sessions: sessionmaker[Session], catalog: Any) -> Iterator[FastAPI]:
    app = create_app(settings, catalog=catalog)

    def override_session() -> Iterator[Session]:
        with sessions() as session:
            yield session

    app.dependency_overrides[get_session] = override_session
    yield app
    app.dependency_overrides.clear()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as client:
        yield client


@pytest.fixture
def make_key(sessions: sessionmaker[Session]) -> Callable[..., str]:
    def make(name: str, rate_limit: str | None = None, revoked: bool = False) -> str:
        with sessions() as session:
            _row, plaintext = create_key(session=session, name=name, rate_limit=rate_limit)
            if revoked:
                revoke_key(session=session, name_or_prefix=name)
            session.commit()
        return plaintext

    return make


@pytest.fixture
def auth(make_key: Callable[..., str]) -> dict[str, str]:
    """Headers with a live key named ``test-tool``."""
    return {"X-API-Key": make_key("test-tool")}
