"""Per-key and per-address limits; 429 problem with Retry-After past the limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from tests.api.problems import assert_problem


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url="sqlite://", migrate_on_start=False, seed_catalog_on_start=False,
                    rate_limit_anonymous="3/minute", rate_limit_per_key="5/minute")


def test_anonymous_requests_are_limited_per_address(client: TestClient) -> None:
    for _ in range(3):
        assert client.get("/api/v1/catalog/gpus").status_code == 200
    r = client.get("/api/v1/catalog/gpus")
    assert_problem(r, 429)
    assert int(r.headers["retry-after"]) >= 1


def test_a_key_has_its_own_budget(client: TestClient, make_key: Callable[..., str]) -> None:
    headers = {"X-API-Key": make_key("tool")}
    for _ in range(3):
        client.get("/api/v1/quotes")
    assert client.get("/api/v1/quotes").status_code == 429
    assert all(client.get("/api/v1/quotes", headers=headers).status_code == 200 for _ in range(5))
    assert_problem(client.get("/api/v1/quotes", headers=headers), 429)


def test_a_key_can_carry_its_own_limit(client: TestClient, make_key: Callable[..., str]) -> None:
    headers = {"X-API-Key": make_key("slow-tool", rate_limit="1/minute")}
    assert client.get("/api/v1/quotes", headers=headers).status_code == 200
    assert_problem(client.get("/api/v1/quotes", headers=headers), 429)


def test_health_and_metrics_are_not_limited(client: TestClient) -> None:
    assert all(client.get("/healthz").status_code == 200 for _ in range(10))
