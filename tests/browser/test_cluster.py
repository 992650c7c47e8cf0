"""The /cluster page in a real browser (issue 32): 16-, 64- and 256-node fabrics for a DGX H100 and an HGX B200 box
set through the form, each with its drawing, parts list, cost and TCO lines and the scaling chart drawn by the
vendored plotly; then a real published nccl-tests log uploaded and judged degraded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

NCCL = Path(__file__).parents[1] / "data" / "nccl"


@pytest.mark.parametrize("server", ["nvidia-dgx-h100", "hgx-b200-8gpu-cx7"])
def test_fabrics_of_16_64_and_256_nodes(page, traffic, server: str) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    page.locator('nav a[href="/cluster"]').click()
    page.wait_for_url(re.compile(r"/cluster$"))
    for nodes, tiers in ((16, "2"), (64, "2"), (256, "3")):
        page.select_option("#c-server", server)
        page.fill("#c-nodes", str(nodes))
        page.select_option("#c-model", "llama-3.1-70b")
        page.locator("#cluster-form button[type=submit]").click()
        page.wait_for_url(re.compile(rf"nodes={nodes}"))
        assert page.locator("#sum-tiers").inner_text() == tiers
        assert page.locator("#sum-nodes").inner_text().startswith(f"{nodes} / {nodes * 8:,}")
        assert page.locator("#topology svg.topology").is_visible()
        assert page.locator("#topology svg .leaf").count() >= 1
        switches = page.locator('#parts tr[data-kind="switch"]')
        assert switches.count() >= 2  # leaf and spine (and core at 256)
        assert page.locator('#parts tr[data-kind="optic"]').count() >= 2
        assert page.locator("#sum-fabric-cost").inner_text().startswith("$")
        assert (page.locator("#sum-tco").count() == 1) == (server == "nvidia-dgx-h100")  # the OEM box has no price
        page.wait_for_selector("#chart-scaling .main-svg")
        assert page.locator("#scaling tbody tr").count() >= 5


def test_a_degraded_nccl_log_is_flagged(page, traffic) -> None:  # type: ignore[no-untyped-def]
    page.goto("/cluster?server=nvidia-dgx-h100&nodes=16&model=")
    page.set_input_files("#n-file", str(NCCL / "h100-3node-nccl-1453-all-reduce-degraded.txt"))
    page.fill("#n-nodes", "3")
    page.locator("#nccl-check button[type=submit]").click()
    page.wait_for_selector("#nccl-result")
    verdict = page.locator("#nccl-result .verdict-degraded .verdict").inner_text()
    assert verdict.startswith("degraded:") and "below" in verdict
    assert "ibstat" in page.locator("#nccl-result").inner_text()
