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


def test_the_in_process_moving_window_counts_the_last_expiry_seconds() -> None:
    from limits import parse

    from app.core.ratelimit import MovingWindows

    windows, item = MovingWindows(sweep_every=3), parse("2/minute")
    assert windows.hit(item, "a", now=0.0) == (True, 1, 60.0)
    assert windows.hit(item, "a", now=10.0) == (True, 0, 60.0)
    assert windows.hit(item, "a", now=59.9) == (False, 0, 60.0)  # two hits in the last 60 s: refused
    assert windows.hit(item, "b", now=59.9)[0]  # another identity has its own window
    assert windows.hit(item, "a", now=60.0)[0] is False  # a hit exactly 60 s old still counts (as in limits)
    assert windows.hit(item, "a", now=60.5) == (True, 0, 70.0)  # the hit at 0 has left the window
    windows.hit(item, "c", now=500.0)  # a sweep drops the windows that have emptied ("a", "b")
    assert windows.hit(item, "a", now=500.0) == (True, 1, 560.0)
