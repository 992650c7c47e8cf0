"""Writes need a live API key (401 problem otherwise); reads are open; only hashes are stored."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.models import ApiKey
from tests.api.conftest import BOTH_BACKENDS
from tests.api.problems import assert_problem

pytestmark = BOTH_BACKENDS

QUOTE = {"name": "q", "customer": "c", "inputs": {"model": "llama-3.2-1b"}, "price": 1}
WRITES = [
    ("POST", "/api/v1/quotes", QUOTE),
    ("POST", "/api/v1/quotes/1/recompute", None),
    ("DELETE", "/api/v1/quotes/1", None),
    ("POST", "/api/v1/saved-plans", {"name": "p", "inputs": {}}),
    ("POST", "/api/v1/saved-plans/1/recompute", None),
    ("DELETE", "/api/v1/saved-plans/1", None),
    ("POST", "/api/v1/catalog/servers", {"id": "x"}),
    ("PATCH", "/api/v1/catalog/servers/dgx-a100-80gb", {"set": {"price_usd": 1}, "reason": "r"}),
    ("POST", "/api/v1/catalog/gpus", {"id": "x"}),
    ("PATCH", "/api/v1/catalog/gpus/h100-sxm5-80gb", {"set": {"tdp_w": 1}, "reason": "r"}),
    ("POST", "/api/v1/catalog/cloud-offers", {"id": "x"}),
    ("PATCH", "/api/v1/catalog/cloud-offers/aws-p5-48xlarge", {"set": {"usd_per_hour": 1}, "reason": "r"}),
]


@pytest.mark.parametrize(("method", "url", "body"), WRITES)
def test_writes_without_a_key_are_401(client: TestClient, method: str, url: str, body: object) -> None:
    r = client.request(method, url, json=body)
    assert_problem(r, 401)
    assert r.headers["www-authenticate"] == "ApiKey"


@pytest.mark.parametrize(("method", "url", "body"), WRITES[:1] + WRITES[6:8])
def test_writes_with_a_revoked_key_are_401(
    client: TestClient, make_key: Callable[..., str], method: str, url: str, body: object
) -> None:
    key = make_key("old-tool", revoked=True)
    assert_problem(client.request(method, url, json=body, headers={"X-API-Key": key}), 401)


@pytest.mark.parametrize("key", ["", "nonsense", "cpk_000000000000_wrong", "cpk__x"])
def test_malformed_or_unknown_keys_are_401_even_on_reads(client: TestClient, key: str) -> None:
    assert_problem(client.get("/api/v1/catalog/gpus", headers={"X-API-Key": key}), 401)


def test_a_wrong_secret_with_a_real_prefix_is_401(client: TestClient, make_key: Callable[..., str]) -> None:
    prefix = make_key("tool").split("_")[1]
    assert_problem(client.get("/api/v1/quotes", headers={"X-API-Key": f"cpk_{prefix}_guess"}), 401)


def test_reads_need_no_key(client: TestClient) -> None:
    assert client.get("/api/v1/catalog/gpus").status_code == 200
    assert client.get("/api/v1/quotes").status_code == 200


def test_a_live_key_can_write_and_is_the_author(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post("/api/v1/quotes", json=QUOTE, headers=auth)
    assert r.status_code == 201, r.text
    assert r.json()["created_by"] == "test-tool"


def test_only_hashes_are_stored(make_key: Callable[..., str], sessions: sessionmaker[Session]) -> None:
    key = make_key("tool")
    with sessions() as session:
        row = session.scalars(select(ApiKey)).one()
    secret = key.split("_", 2)[2]
    assert secret not in (row.key_hash, row.salt, row.prefix)
    assert len(row.key_hash) == 64
