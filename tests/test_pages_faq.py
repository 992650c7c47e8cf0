"""/faq: the source article's questions answered with the estimator's own numbers, each with its assumptions."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app
from app.schemas.tco import UpgradeRequest, UpgradeSide
from app.services.tco import compute_upgrade
from app.web.faq_page import TOKENS_PER_PARAM, UPGRADE_CANDIDATE, UPGRADE_CURRENT, UPGRADE_JOB
from estimator import EstimateRequest, estimate
from estimator.facility.airflow import airflow_cfm
from estimator.facility.rack import default_rack_kw, plan_rack_for_server
from hardware_catalog import load_catalog


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("faq") / "faq.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_pages="100000/minute")
    with TestClient(create_app(settings)) as client:
        assert 'href="/faq"' in client.get("/").text
        r = client.get("/faq")
        assert r.status_code == 200
        yield unescape(r.text)


def _section(page: str, key: str) -> str:
    start = page.index(f'id="faq-{key}"')
    return page[start:page.index("</section>", start)]


def test_every_answer_says_its_assumptions(page: str) -> None:
    for key in ("scratch", "upgrade", "rack", "serve"):
        section = _section(page, key)
        assert "Assumptions" in section and section.count("<li>") >= 1, key


def test_from_scratch_answer_is_the_estimators(page: str) -> None:
    section = _section(page, "scratch")
    base = {"model": "llama-3.1-70b", "training": {"method": "full", "activation_checkpointing": "full"},
            "hardware": {"gpu": "a100-sxm4-80gb"}}
    params = estimate(EstimateRequest.model_validate(base)).model.total_params
    tokens = TOKENS_PER_PARAM * params
    off = estimate(EstimateRequest.model_validate({
        **base, "training": {**base["training"], "train_tokens": tokens},
        "parallelism": {"sharding": "zero3", "offload": "optimizer+params"}}))
    plain = estimate(EstimateRequest.model_validate({**base, "parallelism": {"sharding": "zero3"}}))
    assert not plain.memory.fits and off.memory.fits and off.host is not None and off.train is not None
    assert f"{plain.memory.total_bytes / 2**30:,.1f} GiB per GPU of 80.0 GiB: does not fit" in section
    assert f"{off.host.ram_bytes_per_node / 2**30:,.0f} GiB per node" in section  # 1,157 GiB
    assert f"{tokens / 1e12:,.2f} T" in section
    assert f"{off.train.time_to_train_s / 86400 / 365.25:,.1f} years" in section
    assert "fits only with CPU offload" in section


def test_upgrade_answer_is_the_tco_upgrade(page: str) -> None:
    catalog = load_catalog()
    up = compute_upgrade(UpgradeRequest(job=EstimateRequest.model_validate(UPGRADE_JOB),
                                        current=UpgradeSide(server=UPGRADE_CURRENT),
                                        candidate=UpgradeSide(server=UPGRADE_CANDIDATE)), catalog)
    section = _section(page, "upgrade")
    assert up.verdict in section
    assert f"({up.answer.speedup:,.2f}x)" in section
    assert f"${up.answer.own_a.cost_usd:,.0f} vs ${up.answer.own_b.cost_usd:,.0f}" in section


def test_rack_answer_has_power_heat_air_and_nodes_per_rack(page: str) -> None:
    section = _section(page, "rack")
    kw = default_rack_kw()  # the one default budget the estimate and /tco plan with (40.8 kW), not a FAQ figure
    plan = plan_rack_for_server("nvidia-dgx-h100", kw)
    assert f"Nodes per {kw:g} kW rack" in section
    row = re.search(r"<th scope=\"row\">NVIDIA DGX H100[^<]*</th>(.*?)</tr>", section, re.S)
    assert row, section
    cells = re.findall(r'<td class="num">([^<]+)</td>', row.group(1))
    assert cells[:4] == [f"{plan.kw_per_node:,.1f}", f"{plan.btu_per_hour_per_node:,.0f}",
                         f"{airflow_cfm(plan.kw_per_node * 1000):,.0f}", str(plan.rack_units_per_node)]
    assert cells[-1] == f"{plan.nodes_per_rack} ({plan.limited_by})"
    assert "15 K" in section and "BTU/h" in section


def test_serving_links_the_serve_page(page: str) -> None:
    """The app always has /serve (issue 28: the answer said "capplan has no serving estimator" beside it)."""
    section = _section(page, "serve")
    assert "Not estimated yet" not in section and 'href="/serve?' in section
