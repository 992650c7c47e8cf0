"""Catalog reads, custom entries and audited overrides; the seeded data always stays visible."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import BOTH_BACKENDS
from tests.api.problems import assert_problem

pytestmark = BOTH_BACKENDS

SERVERS = "/api/v1/catalog/servers"
CUSTOM = {"id": "acme-8x-h100", "name": "Acme 8x H100", "gpu_id": "h100-sxm5-80gb", "gpu_count": 8,
          "price_usd": 250000, "sources": ["Acme quote 2026-11"]}


@pytest.mark.parametrize(("kind", "some_id"), [("gpus", "h100-sxm5-80gb"), ("servers", "dgx-a100-80gb"),
                                                 ("cloud-offers", "aws-p5-48xlarge")])
def test_lists_and_entries_show_seeded_data(client: TestClient, kind: str, some_id: str) -> None:
    listing = client.get(f"/api/v1/catalog/{kind}").json()
    assert listing["catalog_version"] == "test-1"
    assert some_id in [e["id"] for e in listing["items"]]
    entry = client.get(f"/api/v1/catalog/{kind}/{some_id}").json()
    assert entry["origin"] == "seeded"
    assert entry["effective"] == entry["seeded"]
    assert [h["action"] for h in entry["history"]] == ["seed"]


@pytest.mark.parametrize("kind", ["gpus", "servers", "cloud-offers"])
def test_unknown_ids_are_404(client: TestClient, kind: str) -> None:
    assert_problem(client.get(f"/api/v1/catalog/{kind}/no-such-id"), 404)


def test_model_presets_are_listed(client: TestClient) -> None:
    ids = [m["id"] for m in client.get("/api/v1/catalog/models").json()]
    assert "llama-3.1-70b" in ids


def test_a_custom_server_is_added_audited_and_usable(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post(SERVERS, json=CUSTOM, headers=auth)
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["origin"], body["seeded"], body["custom"]["name"]) == ("custom", None, "Acme 8x H100")
    assert body["history"][0]["action"] == "create"
    assert body["history"][0]["actor"] == "test-tool"
    est = client.post("/api/v1/estimates", json={"model": "llama-3.2-1b", "hardware": {"server": CUSTOM["id"]}})
    assert est.status_code == 200, est.text
    assert est.json()["catalog_version"].startswith("test-1+db.")


def test_a_duplicate_id_is_a_409(client: TestClient, auth: dict[str, str]) -> None:
    seeded = {**CUSTOM, "id": "dgx-a100-80gb"}
    assert_problem(client.post(SERVERS, json=seeded, headers=auth), 409, "id")
    assert client.post(SERVERS, json=CUSTOM, headers=auth).status_code == 201
    assert_problem(client.post(SERVERS, json=CUSTOM, headers=auth), 409, "id")


@pytest.mark.parametrize(("change", "field"), [
    ({"gpu_count": 0}, "gpu_count"),
    ({"gpu_count": "many"}, "gpu_count"),
    ({"colour": "red"}, "colour"),
    ({"gpu_id": "no-such-gpu"}, "gpu_id"),
])
def test_a_bad_custom_server_is_a_422_naming_the_field(
    client: TestClient, auth: dict[str, str], change: dict[str, object], field: str
) -> None:
    assert_problem(client.post(SERVERS, json={**CUSTOM, **change}, headers=auth), 422, field)


def test_an_override_keeps_the_seeded_value_and_records_who(client: TestClient, auth: dict[str, str]) -> None:
    url = f"{SERVERS}/dgx-a100-80gb"
    r = client.patch(url, json={"set": {"price_usd": 180000}, "reason": "Q3 discount"}, headers=auth)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["effective"]["price_usd"] == 180000
    assert body["seeded"]["price_usd"] == 200000
    assert body["overrides"] == {"price_usd": 180000}
    last = body["history"][-1]
    assert (last["action"], last["actor"], last["reason"]) == ("override", "test-tool", "Q3 discount")
    assert last["previous"] == {}
    listing = client.get(SERVERS).json()
    assert listing["catalog_version"].startswith("test-1+db.")


def test_unset_returns_to_the_seeded_value(client: TestClient, auth: dict[str, str]) -> None:
    url = f"{SERVERS}/dgx-a100-80gb"
    client.patch(url, json={"set": {"price_usd": 1}, "reason": "oops"}, headers=auth)
    body = client.patch(url, json={"unset": ["price_usd"], "reason": "undo"}, headers=auth).json()
    assert body["effective"]["price_usd"] == 200000
    assert body["overrides"] == {}
    assert [h["action"] for h in body["history"]] == ["seed", "override", "override"]
    assert client.get(SERVERS).json()["catalog_version"] == "test-1"


@pytest.mark.parametrize(("patch", "field"), [
    ({"set": {"price_usd": -1}, "reason": "r"}, "set.price_usd"),
    ({"set": {"gpu_id": "nope"}, "reason": "r"}, "set.gpu_id"),
    ({"set": {"id": "other"}, "reason": "r"}, "set"),
    ({"unset": ["id"], "reason": "r"}, "unset"),
    ({"set": {}, "reason": "r"}, "unset"),
    ({"reason": "r"}, "unset"),
    ({"set": {"price_usd": 1}}, "reason"),
    ({"unset": ["price_usd"], "reason": "r"}, "unset"),
    ({"set": {"price_usd": 1}, "reason": "r", "extra": 1}, "extra"),
])
def test_bad_overrides_are_422(client: TestClient, auth: dict[str, str], patch: object, field: str) -> None:
    assert_problem(client.patch(f"{SERVERS}/dgx-a100-80gb", json=patch, headers=auth), 422, field)


def test_overriding_an_unknown_entry_is_404(client: TestClient, auth: dict[str, str]) -> None:
    r = client.patch(f"{SERVERS}/nope", json={"set": {"price_usd": 1}, "reason": "r"}, headers=auth)
    assert_problem(r, 404)


def test_a_gpu_override_changes_estimates(client: TestClient, auth: dict[str, str]) -> None:
    request = {"model": "llama-3.2-1b", "hardware": {"gpu": "a100-sxm4-80gb"}}
    before = client.post("/api/v1/estimates", json=request).json()["memory"]["capacity_bytes"]
    client.patch("/api/v1/catalog/gpus/a100-sxm4-80gb", json={"set": {"memory_bytes": 40 * 2**30},
                                                              "reason": "test"}, headers=auth)
    after = client.post("/api/v1/estimates", json=request).json()["memory"]["capacity_bytes"]
    assert (before, after) == (80 * 2**30, 40 * 2**30)
