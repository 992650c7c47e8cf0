"""``POST /tco`` on the shipped catalog: owning vs renting, per-run costs, sales price overrides, bad input."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem

URL = "/api/v1/tco"


@pytest.fixture
def catalog() -> Any:  # the TCO model needs the real catalog (its TCO defaults, lookups)
    from hardware_catalog import load_catalog

    return load_catalog()


@pytest.fixture
def server(catalog: Any) -> str:
    priced = sorted(s.id for s in catalog.servers.values() if s.price_usd and s.gpu_id.startswith("h100-sxm"))
    return priced[0]


def test_owning_is_set_against_each_cloud_offer(client: TestClient, server: str) -> None:
    r = client.post(URL, json={"server": server, "num_nodes": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    kinds = [o["kind"] for o in body["options"]]
    assert kinds[0] == "own" and len(kinds) > 1
    assert body["own_vs_cloud"]["ownership"]["num_nodes"] == 2
    assert {row["name"] for row in body["assumptions"]} >= {"pue", "electricity_usd_per_kwh"}
    assert (body["job"], body["runs"], body["estimate"]) == (None, [], None)


def test_a_sales_price_override_changes_the_capex(client: TestClient, server: str, auth: dict[str, str]) -> None:
    before = client.post(URL, json={"server": server}).json()["options"][0]["capex_usd"]
    client.patch(f"/api/v1/catalog/servers/{server}", json={"set": {"price_usd": 1000}, "reason": "t"}, headers=auth)
    after = client.post(URL, json={"server": server}).json()["options"][0]["capex_usd"]
    assert after < before


def test_assumptions_can_be_changed(client: TestClient, server: str) -> None:
    cheap = client.post(URL, json={"server": server, "assumptions": {"electricity_usd_per_kwh": 0}}).json()
    assert cheap["options"][0]["power_usd"] == 0


@pytest.mark.parametrize(("body", "field"), [
    ({"server": "nope"}, "server"),
    ({"offer_id": "nope"}, "offer_id"),
    ({"num_nodes": 0}, "num_nodes"),
    ({"assumptions": {"pue": 0.5}}, "assumptions.pue"),
    ({"assumptions": {"colour": 1}}, "assumptions.colour"),
    ({"job": {"training": {"seq_len": 0}}}, "job.training.seq_len"),
    ({"job": {"model": "llama-3.2-1b"}}, "job.training.train_tokens"),
])
def test_bad_tco_requests_are_422(client: TestClient, server: str, body: dict[str, Any], field: str) -> None:
    assert_problem(client.post(URL, json={"server": server, **body}), 422, field)
