"""Issue 32, one truth: a multi-node estimate and every quote saved from it carry the compute fabric that
``POST /api/v1/clusters`` designs for the same server, node count and fabric (one function,
``estimator.cluster.design_cluster``): its parts are the bill of materials' fabric lines, its power, rack plan,
cost and TCO the response's ``fabric``; the saved quote stores it, re-computes it unchanged, and its page, printable
quote (English and pt-BR), PDF and CSV show it. A quote saved before quotes carried the fabric still loads.

The shipped catalog (DGX H100 and the HGX B200 with PCIe ConnectX-7 cards, the fabric parts of ``fabric.yaml``)."""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.models import SavedRevision
from estimator.cluster import FABRIC_CHOICES
from estimator.request import FabricKind
from tests.api.conftest import BOTH_BACKENDS
from tests.api.problems import assert_problem

SHIPPED = pytest.mark.parametrize("catalog", ["shipped"], indirect=True)
#: DGX H100 (twin-port node cages), the HGX B200 box with single-port PCIe cards (no catalog price: no TCO, as on
#: /cluster) and the DGX B200 (priced: a TCO with the fabric)
SERVERS = {"nvidia-dgx-h100": "h100-sxm5-80gb", "hgx-b200-8gpu-cx7": "b200-sxm-180gb",
           "nvidia-dgx-b200": "b200-sxm-180gb"}


def _inputs(server: str, nodes: int, cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    inputs: dict[str, Any] = {"model": "llama-3.1-8b", "training": {"train_tokens": 1e9},
                              "parallelism": {"sharding": "zero3"},
                              "hardware": {"server": server, "gpu": SERVERS[server], "num_nodes": nodes}}
    if cluster is not None:
        inputs["cluster"] = cluster
    return inputs


def _cluster(client: TestClient, server: str, nodes: int, **choice: Any) -> dict[str, Any]:
    r = client.post("/api/v1/clusters", json={"server": server, "num_nodes": nodes, **choice})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _same_fabric(fabric: dict[str, Any], cluster: dict[str, Any]) -> None:
    """Every figure of the estimate's fabric is the cluster response's."""
    assert fabric["design"] == cluster["design"]
    assert fabric["parts"] == [p for p in cluster["parts"] if p["kind"] != "server"]
    for key in ("power", "rack", "cost", "tco"):
        assert fabric[key] == cluster[key], key


def _fabric_bom(result: dict[str, Any]) -> list[tuple[str, str, int, float | None]]:
    return [(b["sku"], b["fabric_role"], b["quantity"], b["unit_price_usd"])
            for b in result["bill_of_materials"] if "fabric_role" in b]


def test_the_request_names_the_fabric_kinds_of_the_cluster_contract() -> None:
    assert FabricKind.__args__ == FABRIC_CHOICES  # type: ignore[attr-defined]


@SHIPPED
@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("nodes", [16, 64, 256])
def test_the_estimate_carries_the_fabric_of_post_clusters(client: TestClient, server: str, nodes: int) -> None:
    r = client.post("/api/v1/estimates", json=_inputs(server, nodes))
    assert r.status_code == 200, r.text
    result = r.json()
    cluster = _cluster(client, server, nodes)
    fabric = result["fabric"]
    assert fabric["request"] == {**cluster["request"], "rack_kw": None}
    _same_fabric(fabric, cluster)
    # the bill of materials: the fabric's parts, one line each, and no line of the old simple switch count
    assert _fabric_bom(result) == [(p["sku"], p["role"], p["quantity"], p["unit_price_usd"])
                                   for p in cluster["parts"] if p["kind"] != "server"]
    assert not [b for b in result["bill_of_materials"] if b["sku"] == "cable-400g" or b["sku"].startswith("switch-")]
    switches = sum(q for _s, role, q, _p in _fabric_bom(result) if role in ("leaf", "spine", "core"))
    assert switches == cluster["design"]["switches"] > 0
    # the TCO and the rack plan hold the fabric: capex is servers + fabric parts, the fabric's power is in it
    assert fabric["cost"]["fabric_usd"] > 0 and fabric["power"]["fabric_w"] > 0
    if server == "hgx-b200-8gpu-cx7":  # no server price in the catalog: no TCO here nor on /cluster
        assert fabric["tco"] is None and fabric["cost"]["total_usd"] is None
        assert {p["role"] for p in fabric["parts"] if p["kind"] == "optic"} >= {"node side (one per NIC)"}
    else:
        assert fabric["tco"]["capex_usd"] == pytest.approx(fabric["cost"]["total_usd"])
        assert fabric["tco"]["fabric_power_usd_per_year"] > 0
        # owned: the run's cost basis prices the network at this fabric, and the fabric says so
        assert result["cost"]["basis"] == "own"
        assert (f"prices the cluster network at this fabric: ${fabric['cost']['fabric_usd_per_node']:,.0f} per node"
                in fabric["notes"][0])
    assert fabric["rack"]["switch_rack_units"] == sum(p["rack_units"] for p in fabric["parts"]) > 0
    assert fabric["design"]["tiers"] == (3 if nodes == 256 else 2)


@SHIPPED
def test_one_node_has_no_fabric(client: TestClient) -> None:
    result = client.post("/api/v1/estimates", json=_inputs("nvidia-dgx-h100", 1)).json()
    assert result["fabric"] is None
    assert not [b for b in result["bill_of_materials"] if "fabric_role" in b]


@SHIPPED
@pytest.mark.parametrize("choice", [{"fabric": "roce-400"}, {"fabric": "ib-ndr", "oversubscription": 3},
                                    {"fabric": "ib-ndr", "ufm": False}])
def test_the_fabric_choice_is_the_clusters_choice(client: TestClient, choice: dict[str, Any]) -> None:
    result = client.post("/api/v1/estimates", json=_inputs("nvidia-dgx-h100", 64, choice)).json()
    _same_fabric(result["fabric"], _cluster(client, "nvidia-dgx-h100", 64, **choice))
    default = client.post("/api/v1/estimates", json=_inputs("nvidia-dgx-h100", 64)).json()["fabric"]
    assert result["fabric"]["cost"]["fabric_usd"] != default["cost"]["fabric_usd"]


@SHIPPED
@pytest.mark.parametrize(("change", "field"), [
    ({"cluster": {"fabric": "ib-xdr"}}, "cluster.fabric"),  # 400G NICs on an 800G fabric
    ({"cluster": {"fabric": "ib-ndr"}, "hardware": {"num_nodes": 9000}}, "hardware.num_nodes"),
    ({"cluster": {"oversubscription": 0.5}}, "cluster.oversubscription"),
    ({"cluster": {"fabric": "ethernet"}}, "cluster.fabric"),
])
def test_a_fabric_the_server_cannot_take_is_422_naming_the_field(client: TestClient, change: dict[str, Any],
                                                                 field: str) -> None:
    inputs = _inputs("nvidia-dgx-h100", 64)
    inputs["cluster"] = change["cluster"]
    inputs["hardware"] = {**inputs["hardware"], **change.get("hardware", {})}
    assert_problem(client.post("/api/v1/estimates", json=inputs), 422, field)


@SHIPPED
def test_without_a_choice_too_many_nodes_go_on_with_the_simple_count_and_say_so(client: TestClient) -> None:
    r = client.post("/api/v1/estimates", json=_inputs("nvidia-dgx-h100", 9000))
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["fabric"] is None
    assert any(a.startswith("No compute fabric designed") for a in result["assumptions"])
    assert any(b["sku"].startswith("switch-") for b in result["bill_of_materials"])


@SHIPPED
def test_hdr_nics_get_no_fabric_unless_named_and_a_named_one_is_422(client: TestClient) -> None:
    """The DGX A100's 200G HDR NICs: no fabric choice takes them; without a choice the estimate keeps the simple
    switch count and says why, a named fabric is refused naming it (as POST /api/v1/clusters refuses it)."""
    inputs = {**_inputs("nvidia-dgx-h100", 16), "hardware": {"server": "nvidia-dgx-a100-640gb",
                                                              "gpu": "a100-sxm4-80gb", "num_nodes": 16}}
    result = client.post("/api/v1/estimates", json=inputs).json()
    assert result["fabric"] is None
    assert any("200 Gb/s GPU-fabric NICs" in a for a in result["assumptions"])
    assert any(b["sku"].startswith("switch-") for b in result["bill_of_materials"])
    assert_problem(client.post("/api/v1/estimates", json={**inputs, "cluster": {"fabric": "ib-ndr"}}), 422,
                   "cluster.fabric")
    assert_problem(client.post("/api/v1/clusters", json={"server": "nvidia-dgx-a100-640gb", "num_nodes": 16}), 422,
                   "fabric")


def _print(client: TestClient, item: int, lang: str = "en") -> str:
    r = client.get(f"/api/v1/quotes/{item}/print", params={"lang": lang} if lang != "en" else {})
    assert r.status_code == 200, r.text
    return r.text


def _money(usd: float) -> str:
    return f"${usd:,.0f}"


@BOTH_BACKENDS
@SHIPPED
@pytest.mark.parametrize(("server", "nodes"), [("nvidia-dgx-h100", 64), ("nvidia-dgx-b200", 16)])
def test_a_saved_quote_stores_the_fabric_recomputes_it_and_shows_it(client: TestClient, auth: dict[str, str],
                                                                     server: str, nodes: int) -> None:
    body = {"name": f"{nodes} nodes", "customer": "Acme", "inputs": _inputs(server, nodes), "server_count": nodes,
            "price": "1000000.00"}
    r = client.post("/api/v1/quotes", json=body, headers=auth)
    assert r.status_code == 201, r.text
    saved = r.json()
    cluster = _cluster(client, server, nodes)
    _same_fabric(saved["revision"]["result"]["fabric"], cluster)
    # read back as stored, and re-computed without a change
    assert client.get(f"/api/v1/quotes/{saved['id']}").json()["revision"]["result"]["fabric"] == \
        saved["revision"]["result"]["fabric"]
    again = client.post(f"/api/v1/quotes/{saved['id']}/recompute", params={"dry_run": "true"}, headers=auth).json()
    assert [c for c in again["diff"] if c["path"].startswith(("fabric", "bill_of_materials"))] == []
    # the printable quote in English and Portuguese: the fabric's section and its lines in the bill of materials
    fabric = saved["revision"]["result"]["fabric"]
    en = _print(client, saved["id"])
    assert 'id="quote-fabric"' in en
    assert f"{fabric['design']['leaves']} leaf, {fabric['design']['spines']} spine" in en
    assert _money(fabric["cost"]["fabric_usd"]) in en and _money(fabric["tco"]["total_usd"]) in en
    leaf = next(p for p in fabric["parts"] if p["role"] == "leaf")
    assert f"Fabric, leaf: {leaf['name']}" in en and f"{leaf['quantity']} x {_money(leaf['unit_price_usd'])}" in en
    pt = _print(client, saved["id"], "pt_BR")
    assert "Rede de computação" in pt and "switches leaf" in pt and "TCO com esta rede" in pt
    # the CSV export has the stored fabric, figure by figure
    rows = dict(csv.reader(io.StringIO(client.get(f"/api/v1/quotes/{saved['id']}.csv").text)))
    assert rows["result.fabric.design.leaves"] == str(fabric["design"]["leaves"])
    assert rows["result.fabric.cost.fabric_usd"] == str(fabric["cost"]["fabric_usd"])


@SHIPPED
def test_the_pdf_has_the_fabric(client: TestClient, auth: dict[str, str]) -> None:
    body = {"name": "64 DGX", "customer": "Acme", "inputs": _inputs("nvidia-dgx-h100", 64), "price": "1.00"}
    saved = client.post("/api/v1/quotes", json=body, headers=auth).json()
    r = client.get(f"/api/v1/quotes/{saved['id']}.pdf")
    assert r.status_code == 200 and r.content.startswith(b"%PDF")
    if shutil.which("pdftotext") is None:
        pytest.skip("poppler-utils (pdftotext) is not installed")
    text = subprocess.run(["pdftotext", "-layout", "-", "-"], input=r.content, capture_output=True,
                          check=True).stdout.decode()
    fabric = saved["revision"]["result"]["fabric"]
    assert "Compute fabric" in text and _money(fabric["cost"]["fabric_usd"]) in text


@BOTH_BACKENDS
@SHIPPED
def test_a_quote_saved_before_the_fabric_still_loads_and_renders(client: TestClient, auth: dict[str, str],
                                                                 sessions: sessionmaker[Session]) -> None:
    """Revision 1 as an older capplan stored it: no ``fabric`` in the result, no ``cluster`` in the inputs, the
    simple switch count in the bill of materials. It is shown as stored, never rewritten."""
    body = {"name": "old", "customer": "Acme", "inputs": _inputs("nvidia-dgx-h100", 64), "price": "1.00"}
    saved = client.post("/api/v1/quotes", json=body, headers=auth).json()
    with sessions() as session:
        rev = session.scalars(select(SavedRevision).where(SavedRevision.item_id == saved["id"])).one()
        result = {k: v for k, v in rev.result.items() if k != "fabric"}
        result["bill_of_materials"] = [b for b in result["bill_of_materials"] if "fabric_role" not in b] + [
            {"item": "Leaf switch: 64-port 400 Gb/s", "sku": "switch-64x400g", "quantity": 16,
             "unit_price_usd": None, "source": "old"}]
        rev.result = result
        rev.inputs = {k: v for k, v in rev.inputs.items() if k != "cluster"}
        session.commit()
    stored = client.get(f"/api/v1/quotes/{saved['id']}").json()["revision"]
    assert "fabric" not in stored["result"] and "cluster" not in stored["inputs"]
    page = client.get(f"/quotes/{saved['id']}")
    assert page.status_code == 200, page.text[:2000]
    assert 'id="fabric-panel"' not in page.text and "Leaf switch: 64-port 400 Gb/s" in page.text
    en = _print(client, saved["id"])
    assert 'id="quote-fabric"' not in en and "Leaf switch: 64-port 400 Gb/s" in en
    assert client.get(f"/api/v1/quotes/{saved['id']}").json()["revision"]["result"] == result  # unchanged
    # a recompute is a new revision with the fabric, the old one kept as it was
    done = client.post(f"/api/v1/quotes/{saved['id']}/recompute", headers=auth).json()
    assert any(c["path"].startswith("fabric") for c in done["diff"])
    assert client.get(f"/api/v1/quotes/{saved['id']}", params={"revision": 1}).json()["revision"]["result"] == result
    new = client.get(f"/quotes/{saved['id']}").text
    assert re.search(r'id="fabric-panel"[^>]*data-nodes="64"', new)
