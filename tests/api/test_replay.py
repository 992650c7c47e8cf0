"""``app.api.replay``: a repeated ``POST /api/v1/estimates`` answered before the router must look exactly like
the route's answer (bytes, headers the middlewares add, metrics) and be rate limited exactly once."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from tests.api.problems import assert_problem

ONE = {"model": "llama-3.2-1b", "training": {"seq_len": 2048}}
URL = "/api/v1/estimates"


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url="sqlite://", migrate_on_start=False, seed_catalog_on_start=False,
                    rate_limit_anonymous="3/minute", rate_limit_per_key="1000/minute")


def _metric(client: TestClient, line_start: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_replayed_answer_is_the_routes(client: TestClient) -> None:
    first = client.post(URL, json=ONE)
    second = client.post(URL, json=ONE)
    assert first.status_code == second.status_code == 200
    assert second.content == first.content
    ignore = {"x-request-id", "content-security-policy", "date"}
    assert [(k, v) for k, v in second.headers.items() if k not in ignore] == [
        (k, v) for k, v in first.headers.items() if k not in ignore]
    assert second.headers["x-request-id"] != first.headers["x-request-id"]
    route = 'capplan_http_requests_total{method="POST",route="/api/v1/estimates",status="200"}'
    assert _metric(client, route) == 2
    assert _metric(client, 'capplan_estimates_total{endpoint="estimates"}') == 2


def test_the_rate_limit_counts_a_replayed_request_once(client: TestClient) -> None:
    assert [client.post(URL, json=ONE).status_code for _ in range(3)] == [200, 200, 200]
    refused = client.post(URL, json=ONE)
    assert_problem(refused, 429)
    assert "Retry-After" in refused.headers


def test_other_bytes_or_a_key_go_through_the_route(client: TestClient, auth: dict[str, str]) -> None:
    body = client.post(URL, json=ONE).content
    spaced = client.post(URL, content=json.dumps(ONE, indent=1).encode(), headers={"content-type": "application/json"})
    assert spaced.content == body
    keyed = client.post(URL, json=ONE, headers=auth)  # counted against the key, not the address
    assert keyed.content == body


def test_a_body_in_several_chunks_is_read_whole(client: TestClient) -> None:
    raw = json.dumps(ONE).encode()
    expected = client.post(URL, content=raw, headers={"content-type": "application/json"}).content
    chunked = client.post(URL, content=iter([raw[:7], raw[7:20], raw[20:]]),
                          headers={"content-type": "application/json"})
    assert chunked.status_code == 200
    assert chunked.content == expected
    bad = client.post(URL, content=iter([raw[:7], b"}"]), headers={"content-type": "application/json"})
    whole = client.post(URL, content=raw[:7] + b"}", headers={"content-type": "application/json"})
    assert bad.status_code == whole.status_code == 422
    assert bad.json()["errors"] == whole.json()["errors"]
