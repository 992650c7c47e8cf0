"""Issue 32 in a real browser: a quote for 64 DGX H100 nodes made through the form shows the compute fabric (its
switches, optics, cables and UFM as bill-of-materials lines, its cost and its TCO) with the figures /cluster shows
for the same server, nodes and fabric; the saved quote, reopened from the list and printed, shows the same. An HGX
B200 box (single-port PCIe NICs, no catalog price) and a DGX B200 (priced) quote the same way."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page

MONEY = re.compile(r"\$[\d,]+")


def _fabric(page: Page) -> dict[str, object]:
    """What the fabric panel shows: its facts and its parts (sku, where, quantity)."""
    rows = page.locator("#fabric-parts tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.sku, r.dataset.role, Number(r.dataset.qty)])")
    return {
        "title": page.locator("#fabric-h").inner_text(),
        "switches": page.locator("#fabric-switches").inner_text(),
        "cables": page.locator("#fabric-cables").inner_text(),
        "power": page.locator("#fabric-power").inner_text(),
        "racks": page.locator("#fabric-racks").inner_text(),
        "cost": page.locator("#fabric-cost").inner_text(),
        "tco": page.locator("#fabric-tco").inner_text(),
        "parts": [tuple(r) for r in rows],
    }


def _bom(page: Page) -> list[tuple[str, int]]:
    """The bill of materials' fabric lines (item text, quantity), from the node panel's table."""
    page.locator("#node-panel details.node-more > summary").click()
    rows = page.locator("#node-bom tbody tr").evaluate_all(
        "rows => rows.map(r => [r.cells[0].innerText, Number(r.cells[1].innerText)])")
    return [(str(item), int(qty)) for item, qty in rows if str(item).startswith("Fabric, ")]


def _first_money(text: str) -> str:
    found = MONEY.search(text)
    assert found, text
    return found.group(0)


def _save(page: Page, name: str) -> str:
    page.fill("#quote-name", name)
    page.fill("#quote-customer", "ACME Research")
    page.fill("#quote-price", "25000000")
    page.get_by_role("button", name="Save as quote").click()
    page.wait_for_url(re.compile(r"/quotes/\d+\?saved=1"))
    page.wait_for_selector("#fabric-panel")
    return page.url.split("?")[0]


def test_a_64_node_dgx_h100_quote_carries_the_fabric_of_the_cluster_page(page, traffic) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    page.select_option("#f-hardware-server", "nvidia-dgx-h100")
    page.fill("#f-hardware-num-nodes", "64")
    page.locator("details.advanced > summary").click()
    page.select_option("#f-parallelism-sharding", "zero3")
    page.select_option("#f-training-activation-checkpointing", "full")
    page.get_by_role("button", name="Estimate").click()
    page.wait_for_selector("#result #fabric-panel")
    page.wait_for_url(re.compile(r"/estimate\?.*hardware\.num_nodes=64"))
    shown = _fabric(page)
    assert "InfiniBand NDR" in str(shown["title"])
    assert str(shown["switches"]).startswith("24 / 16 / 0")  # 3 scalable units of 8 leaves, 16 spines
    parts = list(shown["parts"])  # type: ignore[call-overload]
    roles = {role for _sku, role, _qty in parts}
    assert {"leaf", "spine", "node side (twin-port cages)", "node-leaf and UFM", "leaf-spine"} <= roles
    assert ("nvidia-ufm-appliance", "fabric management (one node slot)", 1) in parts
    assert str(shown["tco"]).startswith("$")
    bom = _bom(page)
    # every fabric part is a bill-of-materials line with its quantity, and no other switch line is left
    assert [qty for _item, qty in bom] == [qty for _sku, _role, qty in parts]
    assert any(item.startswith("Fabric, leaf: NVIDIA Quantum-2 QM9700") for item, _qty in bom)
    assert "Leaf switch: 64-port" not in page.locator("#node-bom").inner_text()

    # /cluster for the same server, nodes and fabric shows the same figures
    page.locator("#fabric-cluster-link").click()
    page.wait_for_url(re.compile(r"/cluster\?.*nodes=64"))
    assert page.locator("#sum-switches").inner_text() == "24 / 16 / 0"
    assert _first_money(page.locator("#sum-fabric-cost").inner_text()) == _first_money(str(shown["cost"]))
    assert _first_money(page.locator("#sum-tco").inner_text()) == _first_money(str(shown["tco"]))
    cluster_parts = page.locator('#parts tbody tr:not([data-kind="server"])').evaluate_all(
        "rows => rows.map(r => [r.cells[1].innerText, Number(r.cells[2].innerText.replace(/,/g, ''))])")
    assert [(role, qty) for role, qty in cluster_parts] == [(role, qty) for _sku, role, qty in parts]
    page.go_back()
    page.wait_for_selector("#result #fabric-panel")

    quote_url = _save(page, "64 DGX H100 with their fabric")
    assert _fabric(page) == shown
    assert _bom(page) == bom
    page.goto("/quotes")
    page.locator("#saved-table tbody tr", has_text="64 DGX H100 with their fabric").get_by_role(
        "link", name="64 DGX H100 with their fabric").click()
    page.wait_for_url(quote_url)
    page.wait_for_selector("#fabric-panel")
    assert _fabric(page) == shown
    assert _bom(page) == bom

    page.goto(page.locator("#print-link").get_attribute("href") or "")
    printed = page.locator("body").inner_text()
    assert "Compute fabric" in printed and "24 leaf, 16 spine and 0 core switches for 64 nodes" in printed
    assert _first_money(str(shown["cost"])) in printed and _first_money(str(shown["tco"])) in printed
    assert "Fabric, leaf: NVIDIA Quantum-2 QM9700" in printed


@pytest.mark.parametrize(("server", "priced"), [("hgx-b200-8gpu-cx7", False), ("nvidia-dgx-b200", True)])
def test_a_b200_quote_carries_its_fabric(page, traffic, server: str, priced: bool) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"/estimate?model=llama-3.1-70b&hardware.server={server}&hardware.num_nodes=64"
              "&parallelism.sharding=zero3&training.activation_checkpointing=full")
    page.wait_for_selector("#result #fabric-panel")
    shown = _fabric(page)
    node_side = "node side (twin-port cages)" if priced else "node side (one per NIC)"
    assert any(role == node_side for _sku, role, _qty in shown["parts"])  # type: ignore[attr-defined]
    assert str(shown["cost"]).startswith("$")
    assert str(shown["tco"]).startswith("$") == priced
    bom = _bom(page)
    assert len(bom) == len(shown["parts"])  # type: ignore[arg-type]
    _save(page, f"64 x {server}")
    assert _fabric(page) == shown
    assert _bom(page) == bom
