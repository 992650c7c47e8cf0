"""``POST /api/v1/clusters`` and ``/clusters/nccl-checks`` on the shipped catalog (issue 32): the design, parts,
power, cost, TCO and drawing; the scaling curve with a job; the nccl-tests check; bad input as 422s naming the
field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem

URL = "/api/v1/clusters"
NCCL = Path(__file__).parents[1] / "data" / "nccl"
JOB = {"model": "llama-3.1-70b",
       "training": {"train_tokens": 1e11, "gradient_accumulation_steps": 8, "activation_checkpointing": "full"},
       "parallelism": {"tp": 8, "sharding": "zero1", "framework": "megatron"}}


@pytest.fixture
def catalog() -> Any:  # the fabric parts and TCO defaults are in the real catalog
    from hardware_catalog import load_catalog

    return load_catalog()


@pytest.mark.parametrize("server", ["nvidia-dgx-h100", "hgx-b200-8gpu-cx7"])
@pytest.mark.parametrize("nodes", [16, 64, 256])
def test_a_cluster_is_designed_priced_and_drawn(client: TestClient, server: str, nodes: int) -> None:
    r = client.post(URL, json={"server": server, "num_nodes": nodes})
    assert r.status_code == 200, r.text
    body = r.json()
    d = body["design"]
    assert d["gpus"] == nodes * 8 and d["tiers"] == (3 if nodes == 256 else 2)
    kinds = {p["kind"] for p in body["parts"]}
    assert kinds >= {"server", "switch", "optic", "cable"}
    assert sum(p["quantity"] for p in body["parts"] if p["kind"] == "switch") == d["switches"]
    assert body["power"]["fabric_w"] > 0 and body["rack"]["switch_rack_units"] == d["switches"]
    assert body["cost"]["fabric_usd"] > 0
    assert body["svg"].startswith("<svg") and "leaf" in body["svg"] and "<script" not in body["svg"]
    assert body["nccl_commands"] and any("NCCL_ALGO=Ring" in c for c in body["nccl_commands"])
    assert [f["sized"] for f in body["other_fabrics"]] == [False, False, False]
    if server == "nvidia-dgx-h100":
        assert body["tco"]["capex_usd"] > body["cost"]["fabric_usd"]
    else:  # no catalog price for the OEM box: no TCO, said by null
        assert body["tco"] is None and body["cost"]["servers_usd"] is None


def test_the_superpod_unit_through_the_api(client: TestClient) -> None:
    d = client.post(URL, json={"server": "nvidia-dgx-h100", "num_nodes": 127}).json()["design"]
    assert (d["leaves"], d["spines"], d["node_and_ufm_cables"], d["leaf_spine_links"]) == (32, 16, 1020, 1024)


def test_a_job_adds_the_scaling_curve(client: TestClient) -> None:
    r = client.post(URL, json={"server": "nvidia-dgx-h100", "num_nodes": 16, "job": JOB, "scaling_threshold": 0.97})
    assert r.status_code == 200, r.text
    points = r.json()["scaling"]
    assert [p["nodes"] for p in points] == [1, 2, 4, 8, 16]
    assert points[0]["scaling_efficiency"] == 1.0
    assert all(p["reasons"] for p in points if p["scaling_efficiency"] < 0.97)


@pytest.mark.parametrize(("body", "field"), [
    ({"server": "nvidia-dgx-h100", "num_nodes": 0}, "num_nodes"),
    ({"server": "nvidia-dgx-h100", "num_nodes": 16, "switch_ports": 80}, "switch_ports"),
    ({"server": "nvidia-dgx-h100", "num_nodes": 9000}, "num_nodes"),
    ({"server": "nvidia-dgx-h100", "num_nodes": 16, "fabric": "ib-xdr"}, "fabric"),
    ({"server": "nvidia-dgx-h100", "num_nodes": 16, "fabric": "token-ring"}, "fabric"),
    ({"server": "nvidia-dgx-h100", "num_nodes": 16, "oversubscription": 0.5}, "oversubscription"),
    ({"server": "no-such-box", "num_nodes": 16}, "server"),
])
def test_bad_sizes_are_422s_naming_the_field(client: TestClient, body: dict[str, Any], field: str) -> None:
    assert_problem(client.post(URL, json=body), 422, field)


def test_nccl_check_judges_real_output(client: TestClient) -> None:
    text = (NCCL / "h200-8gpu-all-reduce-8g.txt").read_text()
    r = client.post(f"{URL}/nccl-checks", json={"server": "nvidia-dgx-h200", "text": text})
    assert r.status_code == 200, r.text
    assert r.json()["healthy"] and r.json()["tests"][0]["verdict"] == "healthy"
    text = (NCCL / "h100-3node-nccl-1453-all-reduce-degraded.txt").read_text()
    body = client.post(f"{URL}/nccl-checks", json={"text": text, "nodes": 3}).json()
    assert body["tests"][0]["verdict"] == "degraded" and body["tests"][0]["causes"]


def test_nccl_check_refuses_text_without_rows_naming_text(client: TestClient) -> None:
    assert_problem(client.post(f"{URL}/nccl-checks", json={"text": "hello"}), 422, "text")
    assert_problem(client.post(f"{URL}/nccl-checks", json={"text": "x", "server": "nope"}), 422, "server")


def test_operation_ids_follow_the_tag_function_rule(client: TestClient) -> None:
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert paths["/api/v1/clusters"]["post"]["operationId"] == "clusters-create_cluster"
    assert paths["/api/v1/clusters/nccl-checks"]["post"]["operationId"] == "clusters-create_nccl_check"
