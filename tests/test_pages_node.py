"""The whole-node panel of /estimate and /compare (issue 17): host RAM against the chosen server's RAM, NVMe,
NICs, power, heat, air per node and per rack, the bill of materials, and the fix when the host does not fit."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app
from app.web.node_panel import node_panel
from estimator import EstimateRequest, estimate
from estimator.facility.airflow import airflow_cfm
from hardware_catalog import load_catalog

#: Llama 3.1 70B full fine-tuning, ZeRO-3 with parameters and optimizer offloaded, full checkpointing: the
#: issue's case. On a DGX A100 320GB (8x A100 40GB, 1,024 GiB fixed) the GPUs fit and the host does not.
OFFLOAD = ("model=llama-3.1-70b&training.method=full&training.activation_checkpointing=full"
           "&parallelism.sharding=zero3&parallelism.offload=optimizer%2Bparams")
DGX320 = OFFLOAD + "&hardware.gpu=a100-sxm4-40gb&hardware.server=nvidia-dgx-a100-320gb"
A100_80 = OFFLOAD + "&hardware.gpu=a100-sxm4-80gb"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("node") / "node.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_writes="100000/minute", rate_limit_web_pages="100000/minute")
    with TestClient(create_app(settings)) as client:
        yield client


def _text(html: str, dom_id: str) -> str:
    match = re.search(rf'id="{dom_id}"[^>]*>(.*?)</(?:p|dd|span|ul|div)>', html, re.S)
    assert match, f"no #{dom_id}"
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", match.group(1))).split())


def _request(query_body: dict[str, object]) -> EstimateRequest:
    return EstimateRequest.model_validate(query_body)


def test_gpus_fit_but_the_host_does_not_says_so_with_both_numbers_and_a_fix(client: TestClient) -> None:
    page = client.get(f"/estimate?{DGX320}").text
    assert _text(page, "verdict") in {"Fits", "Fits, tight", "At risk"}
    assert _text(page, "node-verdict") == "Host does not fit"
    sentence = _text(page, "node-sentence")
    assert "The GPUs fit, the host does not: needs 1,157 GiB of host RAM per node; this server has 1,024 GiB" \
        in sentence
    fixes = re.findall(r'<a href="([^"]+)" class="node-fix">([^<]+)</a>', page)
    assert fixes, "a host that does not fit offers the change that fixes it"
    url, summary = fixes[0]
    fixed = client.get(unescape(url)).text
    assert _text(fixed, "node-verdict") == "Node fits", summary
    assert _text(fixed, "verdict") in {"Fits", "Fits, tight", "At risk"}


def test_no_server_sizes_the_host_on_the_stand_in_server_and_names_it(client: TestClient) -> None:
    page = client.get(f"/estimate?{A100_80}").text
    assert _text(page, "node-verdict") == "Node fits"
    assert "sized on the NVIDIA DGX A100 640GB" in _text(page, "node-sentence")
    assert "2,048 GiB" in _text(page, "node-sentence")
    assert _text(page, "node-ram").startswith("1,157 GiB")
    for dom_id in ("node-nvme", "node-nics", "node-power", "node-heat", "node-air", "node-rack"):
        assert _text(page, dom_id)
    assert 'id="node-bom"' in page and "nvidia-dgx-a100-640gb" not in _text(page, "node-sentence")


def test_panel_figures_are_the_estimators_host_block() -> None:
    catalog = load_catalog()
    req = _request({"model": "llama-3.1-70b", "training": {"method": "full", "activation_checkpointing": "full"},
                    "parallelism": {"sharding": "zero3", "offload": "optimizer+params"},
                    "hardware": {"gpu": "a100-sxm4-40gb", "server": "nvidia-dgx-a100-320gb"}})
    result = estimate(req)
    panel = node_panel(catalog, req, result)
    assert panel is not None and result.host is not None
    assert panel.ram_need_bytes == result.host.ram_bytes_per_node
    assert panel.ram_limit.bytes == 1024 * 2**30 and not panel.ram_fits
    assert sum(v for _, v in panel.ram_rows) == sum(result.host.ram_breakdown_bytes.values())
    assert panel.btu_per_h == pytest.approx(result.host.power_w_per_node * 3.412, rel=1e-3)
    assert panel.cfm == pytest.approx(airflow_cfm(result.host.power_w_per_node))
    assert panel.rack_kw == pytest.approx(panel.nodes_per_rack * panel.power_kw_peak)
    assert panel.rack_kw <= panel.rack_kw_budget


def test_airflow_matches_the_hvac_rule_of_thumb() -> None:
    """CFM = BTU/h / (1.08 x dT in F): 6.5 kW at a 20 F (11.1 K) rise is about 1,027 CFM."""
    assert airflow_cfm(6500, 20 / 1.8) == pytest.approx(6500 * 3.412 / (1.08 * 20), rel=0.01)


def test_compare_has_a_whole_node_row_per_option(client: TestClient) -> None:
    page = client.get(f"/compare?{OFFLOAD}&gpus=a100-sxm4-80gb&servers=nvidia-dgx-a100-320gb").text
    table = page[page.index('id="node-compare-table"'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr><th scope=\"row\">(.*?)</tr>", table, re.S)
    assert len(rows) == 2
    assert "Node fits" in rows[0] and "1,157 GiB" in rows[0]
    assert "Host RAM short" in rows[1] and "1,024 GiB" in rows[1]
