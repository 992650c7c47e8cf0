"""Schemathesis over the OpenAPI document: no 5xx, and every response matches its schema.

The app is built at import time (schemathesis needs the schema to parametrize) with the shipped hardware
catalog on a temporary SQLite file, so the API key made before the run is still there when schemathesis starts
the app's lifespan itself.
Two checks are left out, on purpose: ``negative_data_rejection`` (pydantic's lax mode accepts ``0`` for a
boolean and ``"8"`` for an integer, by design) and ``positive_data_acceptance`` (a schema-valid request can
still be a domain error, e.g. ``tp`` not dividing the heads: a 422 naming the field, not a 2xx).

Two runs, timed on the 2-core machine (2026-12-03, other work running, load ~1.2):
- ``test_api_conforms_to_its_schema``: the examples and fuzzing phases, ``FUZZ_EXAMPLES`` random cases per
  operation: 8 took 16 s, 40 took 45 s, so 40 keeps it within about a minute.
- ``test_api_boundaries_conform_to_its_schema`` (marked ``slow``): the coverage phase, schemathesis' fixed
  boundary and negative cases (about 1,000 per large request body, ~10,000 in all); it does not depend on
  ``max_examples`` and took 120-145 s, most of it one ASGI round trip per case. ``-m "not slow"`` skips it."""

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
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from app.core.settings import Settings
from app.main import create_app
from app.repositories.api_keys import create_key

_DIR = Path(tempfile.mkdtemp(prefix="capplan-contract-"))
APP = create_app(
    Settings(database_url=f"sqlite:///{_DIR / 'contract.db'}", rate_limit_anonymous="100000/minute",
             rate_limit_per_key="100000/minute"),
)
FUZZ_EXAMPLES = 40
_FUZZ = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": False}}})
_BOUNDARIES = schemathesis.Config.from_dict(
    {"phases": {"examples": {"enabled": False}, "fuzzing": {"enabled": False}, "coverage": {"enabled": True}}}
)
schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", APP, config=_FUZZ)
boundaries = schemathesis.openapi.from_asgi("/api/v1/openapi.json", APP, config=_BOUNDARIES)
_EXCLUDED = [negative_data_rejection, positive_data_acceptance]


@pytest.fixture(scope="module")
def contract_key() -> Iterator[str]:
    with TestClient(APP), APP.state.sessionmaker() as session:  # the lifespan migrates and seeds the file
        _row, key = create_key(session=session, name="schemathesis")
        session.commit()
    yield key
    shutil.rmtree(_DIR, ignore_errors=True)


@schema.parametrize()
@hypothesis_settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: Any, contract_key: str) -> None:
    case.call_and_validate(headers={"X-API-Key": contract_key}, excluded_checks=_EXCLUDED)


@pytest.mark.slow
@boundaries.parametrize()
@hypothesis_settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_boundaries_conform_to_its_schema(case: Any, contract_key: str) -> None:
    case.call_and_validate(headers={"X-API-Key": contract_key}, excluded_checks=_EXCLUDED)
