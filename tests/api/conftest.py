"""API test fixtures: each test gets its own in-memory SQLite (StaticPool), migrated and seeded, injected with
``dependency_overrides``; the overrides are cleared afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from app.deps import get_session
from app.main import create_app
from app.repositories.api_keys import create_key, revoke_key
from app.settings import Settings
from app.startup import prepare_database
from tests.api.fake_catalog import fake_catalog


@pytest.fixture
def catalog() -> Any:
    return fake_catalog()


@pytest.fixture
def engine(catalog: Any) -> Iterator[Engine]:
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


def _new_key(sessions: sessionmaker[Session], name: str, rate_limit: str | None = None) -> str:
    with sessions() as session:
        _row, plaintext = create_key(session=session, name=name, rate_limit=rate_limit)
        session.commit()
    return plaintext


@pytest.fixture
def api_key(sessions: sessionmaker[Session]) -> str:
    return _new_key(sessions, "test-tool")


@pytest.fixture
def auth(api_key: str) -> dict[str, str]:
    return {"X-API-Key": api_key}


@pytest.fixture
def revoked_key(sessions: sessionmaker[Session]) -> str:
    key = _new_key(sessions, "old-tool")
    with sessions() as session:
        revoke_key(session=session, name_or_prefix="old-tool")
        session.commit()
    return key


@pytest.fixture
def make_key(sessions: sessionmaker[Session]) -> Any:
    return lambda name, rate_limit=None: _new_key(sessions, name, rate_limit)
