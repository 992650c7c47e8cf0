"""Issue 32 with issue 28's rule (one number, one function, one label): an owned multi-node cluster's network is
priced once, by ``estimator.tco.network.owned_network`` inside ``estimator.tco.ownership_tco``: the fabric
``POST /api/v1/clusters`` designs for that server and node count. The estimate's cost basis, the planner's owned
price, ``POST /api/v1/tco``, the ``/tco`` page and ``/cluster``'s TCO all carry that fabric's cost per node and its
switches' power; an explicit networking figure of the user's still wins; a server no fabric can be designed for keeps
the flat assumption and says why.

The shipped catalog: the DGX H100 (priced, twin-port node cages) and the HGX B200 box with PCIe ConnectX-7 cards (no
catalog price: owned at a price estimated from its GPUs)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hardware_catalog import load_catalog

SHIPPED = pytest.mark.parametrize("catalog", ["shipped"], indirect=True)
SERVERS = {"nvidia-dgx-h100": "h100-sxm5-80gb", "hgx-b200-8gpu-cx7": "b200-sxm-180gb"}
NODES = [16, 64, 256]


def _estimate(client: TestClient, server: str, nodes: int, **extra: Any) -> dict[str, Any]:
    body = {"model": "llama-3.1-8b", "training": {"train_tokens": 1e9}, "parallelism": {"sharding": "zero3"},
            "hardware": {"server": server, "gpu": SERVERS[server], "num_nodes": nodes}, "cost": {"basis": "own"},
            **extra}
    r = client.post("/api/v1/estimates", json=body)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def _cluster(client: TestClient, server: str, nodes: int) -> dict[str, Any]:
    r = client.post("/api/v1/clusters", json={"server": server, "num_nodes": nodes})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _tco(client: TestClient, server: str, nodes: int, **assumptions: Any) -> dict[str, Any]:
    r = client.post("/api/v1/tco", json={"server": server, "num_nodes": nodes, "assumptions": assumptions})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _own_option(tco: dict[str, Any]) -> dict[str, Any]:
    own: dict[str, Any] = next(o for o in tco["options"] if o["kind"] == "own")
    return own


def _tco_page_network(client: TestClient, query: str) -> float:
    page = client.get(f"/tco?{query}")
    assert page.status_code == 200
    found = re.search(r'id="tco-network" data-usd-per-node="([\d.]+)"', page.text)
    assert found, "the /tco page says which network it priced"
    return float(found.group(1))


def _price(server: str) -> float:
    catalog = load_catalog()
    s = catalog.servers[server]
    if s.price_usd is not None:
        return float(s.price_usd)
    gpu = catalog.gpus[s.gpu_id]
    return float(gpu.price_usd_mid) * s.gpu_count * float(catalog.tco_defaults.value("server_cost_vs_gpu_price"))


@SHIPPED
@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("nodes", NODES)
def test_every_owned_price_carries_the_designed_fabric(client: TestClient, server: str, nodes: int) -> None:
    cluster = _cluster(client, server, nodes)
    per_node = cluster["cost"]["fabric_usd_per_node"]
    fabric_w = cluster["power"]["fabric_w"]
    flat = float(load_catalog().tco_defaults.value("networking_usd_per_node_ib_ndr"))
    assert per_node > 0 and fabric_w > 0 and abs(per_node - flat) > 1000, "the designed figure is not the flat one"

    # the estimate's cost basis
    result = _estimate(client, server, nodes)
    cost = result["cost"]
    assert cost["basis"] == "own"
    assert cost["networking_usd_per_node"] == pytest.approx(per_node, rel=1e-12)
    assert any(f"${per_node:,.0f} per node" in a and "designed" in a for a in cost["assumptions"])
    assert "prices the cluster network at this fabric" in result["fabric"]["notes"][-1]

    # POST /api/v1/tco: capex = servers + the fabric's parts + storage; the fabric's power is in the power bill
    tco = _tco(client, server, nodes)
    own = _own_option(tco)
    storage = load_catalog().tco_defaults
    storage_usd = float(storage.value("storage_tb")) * float(storage.value("storage_usd_per_tb"))
    assert own["capex_usd"] == pytest.approx(_price(server) * nodes + cluster["cost"]["fabric_usd"] + storage_usd)
    if tco["own_vs_cloud"] is not None:
        ownership = tco["own_vs_cloud"]["ownership"]
        assert ownership["networking_usd_per_node"] == pytest.approx(per_node, rel=1e-12)
        assert ownership["opex_per_year"]["network_power_kw"] * 1000 == pytest.approx(fabric_w)
        # the run's cost basis is the TCO's owned rate, fabric power included
        assert cost["usd_per_gpu_hour"] == pytest.approx(ownership["usd_per_gpu_hour"], rel=1e-12)
    if cluster["tco"] is not None:  # /cluster's own TCO: the same capex and fabric power
        assert cluster["tco"]["capex_usd"] == pytest.approx(own["capex_usd"])
        assert cluster["tco"]["total_usd"] == pytest.approx(own["total_usd"], rel=1e-9)

    # the planner, owned, on the same hardware: its ranking price and its plan's estimate
    r = client.post("/api/v1/plans", json={"model": "llama-3.1-8b", "training": {"train_tokens": 1e9},
                                           "hardware": {"server": server, "gpu": SERVERS[server], "num_nodes": nodes,
                                                        "gpus_per_node": 8},
                                           "pricing": "owned", "top_k": 1})
    assert r.status_code == 200, r.text
    plans = r.json()["plans"]
    assert plans, r.json().get("notes")
    plan = plans[0]
    assert plan["cost"]["usd_per_gpu_hour"] == pytest.approx(cost["usd_per_gpu_hour"], rel=1e-12)
    assert plan["estimate"]["cost"]["networking_usd_per_node"] == pytest.approx(per_node, rel=1e-12)

    # the /tco page, for the same choice (its default: the server's fabric by NIC speed, InfiniBand)
    assert _tco_page_network(client, f"server={server}&nodes={nodes}") == pytest.approx(per_node, abs=0.01)


@SHIPPED
def test_an_explicit_networking_figure_still_wins(client: TestClient) -> None:
    cluster = _cluster(client, "nvidia-dgx-h100", 64)
    designed = _estimate(client, "nvidia-dgx-h100", 64)["cost"]
    # the estimate (and the planner) take the user's figure through the cost choice
    mine = _estimate(client, "nvidia-dgx-h100", 64, cost={"basis": "own", "networking_usd_per_node_ib_ndr": 50000})
    assert mine["cost"]["networking_usd_per_node"] == 50000
    assert mine["cost"]["usd_per_gpu_hour"] > designed["usd_per_gpu_hour"]  # $50,000 > the designed ~$25,500
    assert "your own figure, $50,000 a node" in mine["fabric"]["notes"][-1]
    assert mine["fabric"]["cost"] == cluster["cost"], "the fabric shown is still the designed one"
    # the TCO API and page: the figure given wins, and no fabric power is added to it
    tco = _tco(client, "nvidia-dgx-h100", 64, networking_usd_per_node_ib_ndr=50000)
    ownership = tco["own_vs_cloud"]["ownership"]
    assert ownership["networking_usd_per_node"] == 50000 and ownership["networking_fabric"] is None
    assert ownership["opex_per_year"]["network_power_kw"] == 0
    assert ownership["usd_per_gpu_hour"] == pytest.approx(mine["cost"]["usd_per_gpu_hour"], rel=1e-12)
    assert _tco_page_network(client, "server=nvidia-dgx-h100&nodes=64&a.networking_usd_per_node_ib_ndr=50000") == 50000
    # the default value typed in explicitly is still the user's figure (model_fields_set, not a value compare)
    flat = float(load_catalog().tco_defaults.value("networking_usd_per_node_ib_ndr"))
    same = _tco(client, "nvidia-dgx-h100", 64, networking_usd_per_node_ib_ndr=flat)
    assert same["own_vs_cloud"]["ownership"]["networking_usd_per_node"] == flat
    # the RoCE figure does not touch an InfiniBand fabric
    roce = _tco(client, "nvidia-dgx-h100", 64, networking_usd_per_node_roce=1)
    assert roce["own_vs_cloud"]["ownership"]["networking_usd_per_node"] == pytest.approx(
        cluster["cost"]["fabric_usd_per_node"])


@SHIPPED
def test_a_server_without_a_designable_fabric_keeps_the_flat_figure_and_says_why(client: TestClient) -> None:
    flat = float(load_catalog().tco_defaults.value("networking_usd_per_node_ib_ndr"))
    # the DGX A100's 200G HDR NICs: no fabric choice without one named
    tco = _tco(client, "nvidia-dgx-a100-320gb", 16)
    ownership = tco["own_vs_cloud"]["ownership"]
    assert ownership["networking_usd_per_node"] == flat and ownership["networking_fabric"] is None
    assert "no fabric designed" in ownership["networking_note"] and "200 Gb/s" in ownership["networking_note"]
    # one node: no network at all
    one = _tco(client, "nvidia-dgx-h100", 1)
    assert _own_option(one)["capex_usd"] == pytest.approx(
        _price("nvidia-dgx-h100") + float(load_catalog().tco_defaults.value("storage_tb"))
        * float(load_catalog().tco_defaults.value("storage_usd_per_tb")))
    assert one["own_vs_cloud"]["ownership"]["networking_note"] is None
