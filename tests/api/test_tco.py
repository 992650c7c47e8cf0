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


def test_an_l40s_server_without_a_catalog_price_is_estimated_from_the_gpu(client: TestClient) -> None:
    # L40S now has a sourced $7-10K range: the R760xa (no catalog price) needs no server_price_usd any more
    from estimator.tco import TcoAssumptions

    r = client.post(URL, json={"server": "dell-r760xa-l40s"})
    assert r.status_code == 200, r.text
    own = r.json()["options"][0]
    assert own["kind"] == "own"
    a = TcoAssumptions()  # server_cost_vs_gpu_price 1.64 from the catalog's TCO defaults (Epoch hardware.py)
    # one node: capex = estimated server ($8,500 midpoint x 4 L40S x 1.64) + storage, no cluster network
    server = 8_500 * 4 * a.server_cost_vs_gpu_price
    assert own["capex_usd"] == pytest.approx(server + a.storage_tb * a.storage_usd_per_tb)


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


# ------------------------------------------------------------------------------------------ audit gaps

JOB = {"model": "llama-3.1-8b", "training": {"method": "full", "train_tokens": 1e9},
       "parallelism": {"sharding": "zero3"}}
UPGRADE = "/api/v1/tco/upgrade"


def test_the_response_names_its_catalog_version(client: TestClient, server: str, catalog: Any) -> None:
    body = client.post(URL, json={"server": server}).json()
    assert body["catalog_version"] == catalog.version


def test_a_gpu_without_cloud_offers_still_gets_its_ownership(client: TestClient) -> None:
    r = client.post(URL, json={"server": "dell-xe9680-mi300x", "server_price_usd": 100_000})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["own_vs_cloud"] is None and "MI300X" in body["notes"][0]
    assert [o["kind"] for o in body["options"]] == ["own"] and body["options"][0]["capex_usd"] == 100_000


def test_an_offer_for_another_gpu_is_a_422_naming_offer_id(client: TestClient) -> None:
    problem = assert_problem(client.post(URL, json={"server": "nvidia-dgx-h100", "offer_id": "aws-p4d-24xlarge"}),
                             422, "offer_id")
    assert "a100-sxm4-40gb" in problem["errors"][0]["detail"]


@pytest.mark.parametrize(("body", "field"), [
    ({"assumptions": {"staff_usd_per_year": "Infinity"}}, "assumptions.staff_usd_per_year"),
    ({"assumptions": {"staff_usd_per_year": 1e308}}, "assumptions.staff_usd_per_year"),
    ({"assumptions": {"electricity_usd_per_kwh": "NaN"}}, "assumptions.electricity_usd_per_kwh"),
    ({"assumptions": {"utilisation": 1e-300}}, "assumptions.utilisation"),
    ({"server_price_usd": "Infinity"}, "server_price_usd"),
    ({"job": {**JOB, "training": {"method": "full", "train_tokens": 1e-300}}}, "job.training.train_tokens"),
])
def test_non_finite_and_absurd_numbers_are_422(client: TestClient, body: dict[str, Any], field: str) -> None:
    assert_problem(client.post(URL, json={"server": "nvidia-dgx-h100", **body}), 422, field)


def test_rack_planning_in_the_response_with_editable_rack_kw(client: TestClient) -> None:
    # DGX H100: 10.2 kW max, 8U -> 4 per 40.8 kW rack (NVIDIA user guide via unanswered.io); at load 8 x 700 W + rest
    body = client.post(URL, json={"server": "nvidia-dgx-h100", "num_nodes": 9}).json()
    rack = body["rack"]
    assert (rack["plan"]["kw_per_node"], rack["plan"]["nodes_per_rack"], rack["racks_needed"]) == (10.2, 4, 3)
    assert rack["plan"]["btu_per_hour_per_node"] == pytest.approx(10_200 * 3.412)
    assert rack["plan"]["rack_units_per_node"] == 8
    non_gpu = next(r["value"] for r in body["assumptions"] if r["name"] == "server_non_gpu_power_w")
    assert rack["kw_per_node_at_load"] == pytest.approx((8 * 700 + non_gpu) / 1000)
    small = client.post(URL, json={"server": "nvidia-dgx-h100", "assumptions": {"rack_kw": 20}}).json()["rack"]
    assert small["plan"]["nodes_per_rack"] == 1 and small["plan"]["limited_by"] == "power"


def test_b200_servers_are_costed_against_b200_offers(client: TestClient) -> None:
    body = client.post(URL, json={"server": "nvidia-dgx-b200"}).json()
    assert body["own_vs_cloud"]["offer_id"] == "spheron-b200"
    assert body["own_vs_cloud"]["ownership"]["server_price_usd"] == 515_000


def test_upgrade_answers_the_seed_question_with_defaults(client: TestClient, catalog: Any) -> None:
    r = client.post(UPGRADE, json={"job": JOB})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["current"]["server"], body["candidate"]["server"]) == ("dell-xe9680-a100", "dell-xe9680-h100")
    assert body["catalog_version"] == catalog.version
    u = body["answer"]
    assert u["time_saved_s"] == pytest.approx(body["current"]["time_to_train_s"] - body["candidate"]["time_to_train_s"])
    assert u["time_saved_s"] > 0 and u["speedup"] > 1.5  # H100 vs A100 on an 8B full fine-tune
    assert u["cost_difference_usd_per_run"] == pytest.approx(u["own_b"]["cost_usd"] - u["own_a"]["cost_usd"])
    assert u["life_years"] == 5 and body["horizon"]["years"] == 3
    assert body["horizon"]["runs"] == pytest.approx(u["runs_per_year"] * 3)
    assert body["verdict"] == u["summary"] and "Verdict:" in body["verdict"]
    if not u["pays_back_within_life"] and u["break_even_runs"]:
        assert "does not pay back within the 5-year life" in body["verdict"]


def test_upgrade_between_dgx_systems_with_a_horizon(client: TestClient) -> None:
    body = client.post(UPGRADE, json={
        "job": JOB, "current": {"server": "nvidia-dgx-a100-640gb"}, "candidate": {"server": "nvidia-dgx-h100"},
        "assumptions": {"horizon_years": 2}}).json()
    u = body["answer"]
    assert u["break_even_runs"] == 0  # the DGX H100 ($270K) costs less than the DGX A100 640GB ($300K)
    assert u["verdict"] == "upgrade" and body["horizon"]["years"] == 2
    assert body["horizon"]["cost_difference_usd"] == pytest.approx(u["cost_difference_usd_per_run"]
                                                                   * body["horizon"]["runs"])


@pytest.mark.parametrize(("body", "field"), [
    ({}, "job"),
    ({"job": {"model": "llama-3.2-1b"}}, "job.training.train_tokens"),
    ({"job": JOB, "candidate": {"server": "nope"}}, "candidate.server"),
    ({"job": JOB, "current": {"server": "nope"}}, "current.server"),
    ({"job": JOB, "current": {"server": "dell-xe9680-a100", "num_nodes": 0}}, "current.num_nodes"),
    ({"job": JOB, "candidate": {"server": "dell-r760xa-h100-nvl"}}, "candidate.server_price_usd"),
    ({"job": JOB, "assumptions": {"horizon_years": "Infinity"}}, "assumptions.horizon_years"),
])
def test_bad_upgrade_requests_are_422(client: TestClient, body: dict[str, Any], field: str) -> None:
    assert_problem(client.post(UPGRADE, json=body), 422, field)


def test_upgrade_has_a_stable_operation_id(client: TestClient) -> None:
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert paths["/api/v1/tco/upgrade"]["post"]["operationId"] == "tco-create_upgrade"
    assert paths["/api/v1/tco"]["post"]["operationId"] == "tco-create_tco"


# --------------------------------------------------------------- runs longer than the TCO costs (fuzzing, 500s)


JOB_70B = {**JOB, "model": "llama-3.1-70b"}


def _seconds_per_token(client: TestClient, server: str) -> float:
    body = client.post(URL, json={"server": server, "job": JOB_70B})
    assert body.status_code == 200, body.text
    return float(body.json()["job"]["time_to_train_s"]) / JOB_70B["training"]["train_tokens"]  # type: ignore[index]


@pytest.mark.parametrize("url", [URL, UPGRADE])
def test_a_run_longer_than_the_tco_costs_is_a_422_naming_train_tokens(client: TestClient, url: str) -> None:
    """Schemathesis found a 500 on /tco/upgrade: 1e16 tokens of Llama 3.1 405B on one server is an estimate of
    ~5e5 years, past ``JobCost``'s bound (``MAX_TIME_TO_TRAIN_S``, 1e11 s). /tco costs the same job the same way."""
    job = {"model": "llama-3.1-405b", "training": {"method": "full", "train_tokens": 1e16},
           "parallelism": {"sharding": "zero3"}}
    body = {"server": "nvidia-dgx-h100", "job": job} if url == URL else {"job": job}
    problem = assert_problem(client.post(url, json=body), 422, "job.training.train_tokens")
    assert "years" in problem["errors"][0]["detail"]


def test_the_longest_run_costed_is_max_time_to_train_s(client: TestClient) -> None:
    """Time to train is linear in tokens here (same layout, same step): half the bound is costed, twice it is a
    422 from the bound, not from ``MAX_TRAIN_TOKENS`` (70B on one DGX H100: ~1.3e-4 s a token, so 2e11 s is
    ~1.5e15 tokens, under 1e16)."""
    from estimator.request import MAX_TRAIN_TOKENS
    from estimator.tco import MAX_TIME_TO_TRAIN_S

    per_token = _seconds_per_token(client, "nvidia-dgx-h100")
    for factor, status in ((0.5, 200), (2.0, 422)):
        tokens = factor * MAX_TIME_TO_TRAIN_S / per_token
        assert tokens < MAX_TRAIN_TOKENS
        job = {**JOB_70B, "training": {"method": "full", "train_tokens": tokens}}
        r = client.post(URL, json={"server": "nvidia-dgx-h100", "job": job})
        if status == 200:
            assert r.status_code == 200, r.text
            assert r.json()["job"]["time_to_train_s"] == pytest.approx(factor * MAX_TIME_TO_TRAIN_S, rel=1e-6)
        else:
            assert "years" in assert_problem(r, 422, "job.training.train_tokens")["errors"][0]["detail"]
