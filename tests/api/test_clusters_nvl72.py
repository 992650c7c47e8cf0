"""The rack-scale systems through the API (issue 32 part 4): a fabric of GB200 NVL72 racks, the catalog listing the
trays with their NVLink domain, and bad combinations as 422s naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem


@pytest.fixture
def catalog() -> Any:  # the trays, fabric parts and TCO defaults are in the shipped catalog
    from hardware_catalog import load_catalog

    return load_catalog()


def test_a_fabric_of_nvl72_racks(client: TestClient) -> None:
    job = {"model": "llama-3.1-405b", "training": {"seq_len": 8192, "gradient_accumulation_steps": 16,
                                                    "activation_checkpointing": "full"},
           "parallelism": {"tp": 16, "pp": 4, "framework": "megatron", "sharding": "zero1"}}
    r = client.post("/api/v1/clusters", json={"server": "gb200-nvl72-tray", "num_nodes": 36, "job": job})
    assert r.status_code == 200, r.text
    body = r.json()
    d = body["design"]
    assert (d["gpus"], d["rails"], d["nvlink_domain_gpus"], d["nvlink_domain_nodes"], d["nvlink_domains"]) == \
        (144, 4, 72, 18, 2)
    assert body["rack"]["nodes_per_rack"] == 18 and body["rack"]["compute_racks"] == 2
    assert all("tensor" in p["nvlink_traffic"] and "tensor" not in p["fabric_traffic"] for p in body["scaling"])
    assert any("NCCL_MNNVL_ENABLE=1" in c for c in body["nccl_commands"])


def test_the_catalog_lists_the_trays_with_their_domain(client: TestClient) -> None:
    r = client.get("/api/v1/catalog/servers/gb300-nvl72-tray")
    assert r.status_code == 200, r.text
    effective = r.json()["effective"]
    assert (effective["gpu_count"], effective["nvlink_domain_gpus"], effective["rack_nodes"]) == (4, 72, 18)


@pytest.mark.parametrize(("url", "body", "field"), [
    ("/api/v1/clusters", {"server": "gb300-nvl72-tray", "num_nodes": 18, "fabric": "ib-ndr"}, "fabric"),
    ("/api/v1/clusters", {"server": "gb200-nvl72-tray", "num_nodes": 18, "fabric": "ib-xdr"}, "fabric"),
    ("/api/v1/estimates", {"hardware": {"gpus_per_node": 73}}, "hardware.gpus_per_node"),
    ("/api/v1/estimates", {"hardware": {"server": "gb200-nvl72-tray", "gpus_per_node": 8}},
     "hardware.gpus_per_node"),
    ("/api/v1/plans", {"hardware": {"server": "gb200-nvl72-tray", "gpus_per_node": 8}}, "hardware.gpus_per_node"),
])
def test_bad_values_are_422s_naming_the_field(client: TestClient, url: str, body: dict[str, Any],
                                              field: str) -> None:
    assert_problem(client.post(url, json=body), 422, field)


@pytest.mark.parametrize("server", ["gb200-nvl72-tray", "gb300-nvl72-tray", "nvidia-dgx-b300"])
def test_an_estimate_on_the_new_systems_sizes_the_whole_node(client: TestClient, server: str) -> None:
    body = {"model": "llama-3.1-70b", "parallelism": {"tp": 8, "framework": "megatron", "sharding": "zero1"},
            "training": {"train_tokens": 1e10},
            "hardware": {"server": server, "num_nodes": 4, "gpus_per_node": 8 if server == "nvidia-dgx-b300" else 4}}
    r = client.post("/api/v1/estimates", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["time"]["step_time_s"] > 0 and out["cost"]["total_usd"] > 0
    if server != "nvidia-dgx-b300":  # TP 8 over two trays: inside the NVLink domain, no "spans nodes" warning
        assert not any("Tensor parallelism spans nodes" in w for w in out["warnings"])
    page = client.get("/estimate", params={"model": "llama-3.1-70b", "server": server, "num_nodes": 4})
    assert page.status_code == 200


@pytest.mark.parametrize("path", ["/catalog/servers/gb200-nvl72-tray", "/catalog/gpus/gb300-288gb",
                                  "/catalog/servers/nvidia-dgx-b300"])
def test_the_catalog_pages_show_the_new_entries_with_sources(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 200, r.text[:500]
    assert "NVIDIA" in r.text and ("nvidia.com" in r.text or "verda.com" in r.text)
