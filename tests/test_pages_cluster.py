"""The /cluster page through TestClient (no browser): the fabric with its drawing and parts list, the scaling
chart, the nccl-tests check posted from the page, and bad sizes shown on the form."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app

NCCL = Path(__file__).parent / "data" / "nccl"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("cluster-pages") / "pages.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_pages="100000/minute", rate_limit_web_writes="100000/minute",
                        allowed_hosts="testserver,localhost,127.0.0.1")
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.mark.parametrize("server", ["nvidia-dgx-h100", "hgx-b200-8gpu-cx7"])
@pytest.mark.parametrize("nodes", [16, 64, 256])
def test_the_fabric_is_drawn_with_its_parts_and_the_scaling_chart(client: TestClient, server: str,
                                                                  nodes: int) -> None:
    r = client.get(f"/cluster?server={server}&nodes={nodes}&model=llama-3.1-70b&tp=8")
    assert r.status_code == 200, r.text[:2000]
    html = r.text
    assert '<svg xmlns="http://www.w3.org/2000/svg"' in html and re.search(r">SU 1(:| <|<)", html)
    assert 'id="parts"' in html and "QM9700" in html and ("node side" in html)
    tiers = re.search(r'id="sum-tiers">(\d)<', html)
    assert tiers and tiers.group(1) == ("3" if nodes == 256 else "2")
    fig = json.loads(re.search(r'<script type="application/json" id="fig-scaling">(.*?)</script>', html,
                               re.S).group(1))  # type: ignore[union-attr]
    assert fig["data"][0]["x"][-1] == str(nodes)
    assert 'aria-current="page"' in html and 'href="/cluster"' in html


def test_bad_sizes_are_shown_on_the_form(client: TestClient) -> None:
    r = client.get("/cluster?server=nvidia-dgx-h100&nodes=0&model=")
    assert r.status_code == 422 and 'id="err-c-nodes"' in r.text and "Must be at least 1</span>" in r.text
    r = client.get("/cluster?server=nvidia-dgx-h100&nodes=16&switch_ports=99&model=")
    assert r.status_code == 422 and "more than the NVIDIA Quantum-2 QM9700" in r.text


def test_nccl_output_is_checked_from_the_page(client: TestClient) -> None:
    text = (NCCL / "h100-3node-nccl-1453-all-reduce-degraded.txt").read_text()
    r = client.post("/cluster/nccl", data={"server": "nvidia-dgx-h100", "nodes": "16", "model": "", "text": text,
                                           "nccl_nodes": "3"}, headers={"origin": "http://testserver"})
    assert r.status_code == 200, r.text[:1500]
    assert "verdict-degraded" in r.text and "ibstat" in r.text
    r = client.post("/cluster/nccl", data={"server": "nvidia-dgx-h100", "nodes": "16", "model": "",
                                           "text": "no rows here"}, headers={"origin": "http://testserver"})
    assert r.status_code == 422 and "no nccl-tests result rows" in r.text


def test_the_tco_page_opens_with_this_fabric_as_its_networking(client: TestClient) -> None:
    """/tco designs the same default fabric itself (estimator.tco.network.owned_network), so the link names the
    server, node count and fabric kind, not a figure; a choice /tco would not design carries its cost per node."""
    html = client.get("/cluster?server=nvidia-dgx-h100&nodes=64&model=").text
    href = re.search(r'id="cluster-tco-link" href="([^"]+)"', html).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    assert "a.networking_usd_per_node_ib_ndr=" not in href and "nodes=64" in href
    assert "a.network_fabric=infiniband-ndr" in href
    from estimator.cluster import ClusterRequest, design_cluster
    from hardware_catalog import load_catalog

    expected = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=64), load_catalog())
    tco = client.get(href)
    assert tco.status_code == 200
    per_node = float(re.search(r'id="tco-network" data-usd-per-node="([\d.]+)"', tco.text).group(1))  # type: ignore[union-attr]
    assert per_node == pytest.approx(expected.cost.fabric_usd_per_node, abs=0.01)
    # an oversubscribed fabric is not what /tco designs: its figure travels as the networking assumption
    html = client.get("/cluster?server=nvidia-dgx-h100&nodes=64&model=&oversubscription=3").text
    href = re.search(r'id="cluster-tco-link" href="([^"]+)"', html).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    over = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=64, oversubscription=3), load_catalog())
    assert f"a.networking_usd_per_node_ib_ndr={over.cost.fabric_usd_per_node:.0f}" in href


def test_an_estimate_links_to_its_cluster(client: TestClient) -> None:
    html = client.get("/estimate?model=llama-3.1-70b&hardware.server=nvidia-dgx-h100&hardware.num_nodes=4"
                      "&parallelism.tp=8&training.train_tokens=1e10").text
    href = re.search(r'href="([^"]+)" id="cluster-link"', html).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    assert href.startswith("/cluster?") and "server=nvidia-dgx-h100" in href and "nodes=4" in href
    assert "model=llama-3.1-70b" in href and "tp=8" in href
    page = client.get(href)
    assert page.status_code == 200 and re.search(r'id="sum-nodes">4 / 32<', page.text)
