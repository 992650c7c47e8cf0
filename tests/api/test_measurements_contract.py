"""Schemathesis on the measurement operations alone (``test_contract.py`` fuzzes every operation, these
included; this runs them with more examples): no 5xx, every response matches its schema, schema-invalid
records are rejected (``negative_data_rejection``), and a stored record reads back by its id unchanged."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.core.settings import Settings
from app.main import create_app
from app.repositories.api_keys import create_key

_DIR = Path(tempfile.mkdtemp(prefix="capplan-measurements-contract-"))
APP = create_app(Settings(database_url=f"sqlite:///{_DIR / 'contract.db'}", rate_limit_anonymous="100000/minute",
                          rate_limit_per_key="100000/minute"))
_CONFIG = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": False}}})
schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", APP, config=_CONFIG).include(
    path_regex=r"^/api/v1/measurements")


@pytest.fixture(scope="module")
def key() -> Iterator[str]:
    with TestClient(APP), APP.state.sessionmaker() as session:
        _row, plaintext = create_key(session=session, name="schemathesis-measurements")
        session.commit()
    yield plaintext
    shutil.rmtree(_DIR, ignore_errors=True)


@schema.parametrize()
@hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_measurement_operations_conform_to_their_schema(case: Any, key: str) -> None:
    response = case.call_and_validate(headers={"X-API-Key": key}, excluded_checks=[positive_data_acceptance])
    if case.method.upper() == "POST" and response.status_code == 201:
        stored = response.json()
        with TestClient(APP) as client:
            assert client.get(f"/api/v1/measurements/{stored['id']}").json() == stored
