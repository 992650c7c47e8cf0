"""The /tco page through TestClient (no browser), on the shipped catalog: the upgrade section, GPUs without cloud
offers, the cost-vs-time chart across servers, rack planning and bad numbers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app

JOB = "model=llama-3.1-8b&training.method=full&parallelism.sharding=zero3&training.train_tokens=1e9"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("tco-pages") / "pages.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute")
    with TestClient(create_app(settings)) as client:
        yield client


def _figure(html: str, name: str) -> dict:  # type: ignore[type-arg]
    match = re.search(rf'<script type="application/json" id="fig-{name}">(.*?)</script>', html, re.S)
    assert match, f"no figure {name}"
    return json.loads(match.group(1))  # type: ignore[no-any-return]


def _text(html: str, dom_id: str) -> str:
    match = re.search(rf'id="{dom_id}">(.*?)</(?:dd|p)>', html, re.S)
    assert match, f"no {dom_id}"
    return re.sub(r"<[^>]+>|\s+", " ", match.group(1)).strip()


def _error(html: str, dom_id: str) -> str:
    match = re.search(rf'<span class="field-error" id="err-{re.escape(dom_id)}"[^>]*>([^<]*)</span>', html)
    assert match, f"no error slot for {dom_id}"
    return match.group(1)


def test_upgrade_section_answers_for_the_job(client: TestClient) -> None:
    html = client.get(f"/tco?server=dell-xe9680-h100&{JOB}").text
    assert "Upgrade A100 → H100?" in html
    verdict = _text(html, "upgrade-verdict")
    assert "On 8x NVIDIA H100 SXM5 80GB this job trains in" in verdict and "Verdict:" in verdict
    assert "Reference job" not in html.split('id="upgrade"')[1].split("</section>")[0]  # the page's own job
    assert re.fullmatch(r"[\d.]+ (h|days|min|s).*faster", _text(html, "kpi-up-time"))
    assert _text(html, "kpi-up-cost").startswith(("$", "-$", "−$"))
    fig = _figure(html, "upgrade")
    names = [t["name"] for t in fig["data"]]
    assert names[:2] == ["buy Dell PowerEdge XE9680 (8x A100 SXM4 80GB, 500 W)",
                         "buy Dell PowerEdge XE9680 (8x H100 SXM5)"]
    assert any("life" in (a.get("text") or "") for a in fig["layout"]["annotations"])


def test_upgrade_section_uses_a_stated_reference_job_and_chosen_servers(client: TestClient) -> None:
    html = client.get("/tco?up.current=nvidia-dgx-a100-640gb&up.candidate=nvidia-dgx-h100").text
    section = html.split('id="upgrade"')[1].split("</section>")[0]
    assert "Reference job: Llama 3.1 8B, full fine-tune" in section
    assert "NVIDIA DGX A100 640GB" in section and _text(html, "kpi-up-payback") == "costs no more"
    share = re.search(r'id="tco-share" class="share" readonly value="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    assert "up.current=nvidia-dgx-a100-640gb" in share.replace("&amp;", "&")


def test_upgrade_with_an_unknown_server_is_shown_next_to_the_field(client: TestClient) -> None:
    page = client.get("/tco?up.candidate=nope")
    assert page.status_code == 422 and "unknown server" in _error(page.text, "f-up-candidate")


def test_a_gpu_without_cloud_offers_shows_its_ownership(client: TestClient) -> None:
    page = client.get("/tco?server=dell-xe9680-mi300x&server_price_usd=100000")
    assert page.status_code == 200
    assert "No cloud offer in the catalog rents the AMD Instinct MI300X" in _text(page.text, "tco-verdict")
    assert _text(page.text, "kpi-capex") == "$100,000"  # no storage by default; the price as given
    assert 'id="fig-cumulative"' not in page.text and _figure(page.text, "tco")["data"]


def test_cost_vs_time_chart_compares_the_job_across_gpus(client: TestClient) -> None:
    html = client.get(f"/tco?server=dell-xe9680-h100&{JOB}").text
    owned = [t for t in _figure(html, "runs")["data"] if t["name"].startswith("own ")]
    names = " ".join(t["name"] for t in owned)
    for model in ("A100", "H100", "H200", "B200"):
        assert model in names, names
    times = [t["x"][0] for t in owned]
    assert len(set(times)) == len(times) == 4  # the same job, a different time on each GPU
    assert min(times) == next(t["x"][0] for t in owned if "B200" in t["name"])  # B200 fastest
    assert 'id="runs-table"' in html


def test_rack_planning_is_shown_and_its_kw_per_rack_editable(client: TestClient) -> None:
    base = client.get("/tco?server=nvidia-dgx-h100&nodes=9").text
    assert _text(base, "kpi-rack-peak-kw").startswith("10.2 kW") and _text(base, "kpi-rack-ru") == "8 U"
    assert _text(base, "kpi-rack-nodes").startswith("4") and _text(base, "kpi-rack-racks") == "3"
    assert _text(base, "kpi-rack-btu") == "34,802 BTU/h"
    small = client.get("/tco?server=nvidia-dgx-h100&nodes=9&a.rack_kw=20").text
    assert _text(small, "kpi-rack-nodes").startswith("1") and _text(small, "kpi-rack-racks") == "9"
    assert re.search(r'id="f-a-rack-kw"[^>]*placeholder="40.8"', base)


@pytest.mark.parametrize(("query", "dom_id", "message"), [
    ("server_price_usd=inf", "f-server-price", "finite"), ("nodes=1e300", "f-nodes", "at most"),
    ("a.staff_usd_per_year=Infinity", "f-a-staff-usd-per-year", "finite"),
    ("a.staff_usd_per_year=1e308", "f-a-staff-usd-per-year", "at most"),
])
def test_non_finite_numbers_are_refused_next_to_the_field(client: TestClient, query: str, dom_id: str,
                                                         message: str) -> None:
    page = client.get(f"/tco?{query}")
    assert page.status_code == 422 and message in _error(page.text, dom_id).lower()
