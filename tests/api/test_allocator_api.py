"""The allocator field and the fit verdict through the API, the estimate page, the planner's verdict and the quote
(issue 33 item 5): ``training.allocator`` is refused with a 422 naming it when unknown; an at-risk setup says
"at_risk" in the response, "At risk" on the page with its allocator-and-loss suggestions, and in the quote."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.exports.quote import quote_sections
from app.web.estimate_page import verdict_of
from app.web.forms import request_to_query
from benchmarks.calibration.compare import load_cases
from estimator import EstimateRequest, EstimateResponse
from tests.api.problems import assert_problem

URL = "/api/v1/estimates"
SHIPPED = pytest.mark.parametrize("catalog", ["shipped"], indirect=True)


def _issue_case(**training: Any) -> dict[str, Any]:
    """Llama 3.1 8B LoRA, 32k tokens, checkpointing, on one H100 80GB (issue 33 item 5)."""
    req = copy.deepcopy(next(c for c in load_cases() if c["id"] == "l8b-lora16al-fused-b1-s32768-ck")["request"])
    req["hardware"]["gpu"] = "h100-sxm5-80gb"
    req["training"].update(training)
    return req


def test_an_unknown_allocator_is_a_422_naming_the_field(client: TestClient) -> None:
    assert_problem(client.post(URL, json={"training": {"allocator": "cudaMallocAsync"}}), 422, "training.allocator")


@SHIPPED
def test_the_issue_case_is_at_risk_in_the_response(client: TestClient) -> None:
    r = client.post(URL, json=_issue_case())
    assert r.status_code == 200, r.text
    mem = r.json()["memory"]
    assert mem["fits"] is True and mem["fit_verdict"] == "at_risk"
    assert mem["reserved_peak_bytes"] > mem["peak_allocated_bytes"] and mem["reserved_error_bar_pct"] > 0
    assert any(s["fits"] for s in r.json()["fit_suggestions"])
    same = client.post(URL, json=_issue_case(allocator="expandable_segments")).json()["memory"]
    assert same["peak_allocated_bytes"] == mem["peak_allocated_bytes"]
    assert same["reserved_peak_bytes"] < mem["reserved_peak_bytes"]


@SHIPPED
def test_the_page_says_at_risk_and_lists_the_ways(client: TestClient) -> None:
    query = request_to_query(EstimateRequest.model_validate(_issue_case()))
    page = client.get(f"/estimate?{query}")
    assert page.status_code == 200
    assert 'id="verdict">At risk<' in page.text
    assert 'id="kpi-reserved" data-verdict="at_risk"' in page.text
    assert 'id="fit-ways-table"' in page.text and "GiB less reserved at the peak; fits" in page.text
    assert 'name="training.allocator"' in page.text  # the form's advanced section carries the field


def test_the_verdict_word_follows_fit_verdict() -> None:
    from estimator import estimate

    result = estimate(EstimateRequest.model_validate(_issue_case()))
    assert verdict_of(result).label == "At risk" and verdict_of(result).tone == "tight"
    fits = result.model_copy(update={"memory": result.memory.model_copy(update={
        "fit_verdict": "fits", "headroom_bytes": result.memory.capacity_bytes})})
    assert verdict_of(EstimateResponse.model_validate(fits.model_dump())).label == "Fits"


def test_the_quote_says_at_risk_with_the_reserved_peak() -> None:
    from estimator import estimate

    result = estimate(EstimateRequest.model_validate(_issue_case())).model_dump(mode="json")
    rev = SimpleNamespace(result=result, inputs=_issue_case(), price=None, currency="USD", created_at=None,
                          estimator_version="x", catalog_version="y", valid_until=None, note=None, id=1,
                          revision=1, name="q", customer=None)
    try:
        sections = quote_sections(rev, {})
    except AttributeError as e:  # a revision attribute this stand-in lacks
        pytest.fail(f"stand-in revision lacks {e}")
    lines = {line.label: line.value for line in sections["memory"]}
    assert lines["Fits"].startswith("at risk")
    assert "Reserved peak (caching allocator)" in lines
    old = {**result, "memory": {k: v for k, v in result["memory"].items()
                                if k not in ("fit_verdict", "reserved_peak_bytes", "reserved_error_bar_pct")}}
    rev.result = old  # a quote saved before the verdict existed reads as before
    lines = {line.label: line.value for line in quote_sections(rev, {})["memory"]}
    assert lines["Fits"] == "yes" and "Reserved peak (caching allocator)" not in lines


def test_a_plan_row_at_risk_says_so() -> None:
    """The planner keeps a layout that fits (its ranking is unchanged); a row whose verdict is at_risk is labelled
    "At risk" rather than "Fits"."""
    from app.web.planner_page import plan_rows
    from estimator.planner.plan import PlanRequest, plan
    from hardware_catalog import load_catalog

    catalog = load_catalog()
    response = plan(PlanRequest.model_validate({
        "constraints": {"gpus": ["h100-sxm5-80gb", "a100-sxm4-80gb"], "max_nodes": 2}, "model": "llama-3.1-8b",
        "objective": "cost", "training": {"train_tokens": 1e10}}), catalog)
    rows = plan_rows(response, catalog)
    at_risk = [r for r in rows if r.plan.estimate.memory.fit_verdict == "at_risk"]
    assert at_risk, "this search keeps some layouts at the edge"
    assert all(r.verdict.label == "At risk" for r in at_risk)
    assert all(r.verdict.label != "At risk" for r in rows if r.plan.estimate.memory.fit_verdict == "fits")
