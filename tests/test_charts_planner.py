"""Planner chart, checked on its data: every priced plan is one point, the front line joins exactly the Pareto
plans fastest first, the star is the winner, and the axes follow whether the run has a token budget."""

from __future__ import annotations

import json

import pytest

from app.charts.planner import axes_for, plan_points, time_cost_figure
from app.charts.style import figure_json
from estimator.planner.plan import PlanRequest, PlanResponse, plan
from hardware_catalog import load_catalog

GPUS = ["h100-sxm5-80gb", "h200-sxm-141gb"]


@pytest.fixture(scope="module")
def catalog() -> object:
    return load_catalog()


def _plan(catalog: object, **training: object) -> PlanResponse:
    return plan(PlanRequest.model_validate({
        "model": "llama-3.1-70b", "training": {"method": "lora", **training},
        "constraints": {"gpus": GPUS, "max_nodes": 2}, "top_k": 8,
    }), catalog)


@pytest.fixture(scope="module")
def per_run(catalog: object) -> PlanResponse:
    return _plan(catalog, train_tokens=1e9)


@pytest.fixture(scope="module")
def per_step(catalog: object) -> PlanResponse:
    return _plan(catalog)


def _markers(fig) -> list:  # type: ignore[no-untyped-def]
    return [t for t in fig.data if t.name not in ("Pareto front",) and not t.name.startswith("Best")]


def test_every_priced_plan_is_one_point_in_its_gpu_trace(per_run: PlanResponse) -> None:
    assert len(per_run.plans) >= 3
    names = {"h100-sxm5-80gb": "H100", "h200-sxm-141gb": "H200"}
    fig = time_cost_figure(per_run.plans, names)
    assert fig is not None
    markers = _markers(fig)
    assert {t.name for t in markers} <= {"H100", "H200"}
    shown = sorted((int(rank), x, y) for t in markers for rank, x, y in zip(t.customdata, t.x, t.y, strict=True))
    expected = sorted((p.rank, p.time_to_train_s / 3600, p.cost.cost_usd) for p in per_run.plans if p.cost)
    assert shown == expected
    for t in markers:  # each trace holds one GPU type
        gpus = {p.layout.gpu for p in per_run.plans if p.rank in set(t.customdata)}
        assert len(gpus) == 1 and names[gpus.pop()] == t.name


def test_the_front_line_joins_the_pareto_plans_fastest_first(per_run: PlanResponse) -> None:
    fig = time_cost_figure(per_run.plans)
    assert fig is not None
    (front,) = [t for t in fig.data if t.name == "Pareto front"]
    assert front.mode == "lines+markers"
    by_id = {p.id: p for p in per_run.plans}
    assert [by_id[i].rank for i in per_run.pareto_front] == list(front.customdata)
    assert list(front.x) == sorted(front.x)
    assert list(front.y) == sorted(front.y, reverse=True)  # faster costs more along the front
    points = plan_points(per_run.plans)
    for fx, fy in zip(front.x, front.y, strict=True):  # nothing beats a front point on both axes
        assert not any(pt.x < fx and pt.y < fy for pt in points)


def test_the_star_is_the_winner(per_run: PlanResponse) -> None:
    fig = time_cost_figure(per_run.plans, objective="time")
    assert fig is not None
    (star,) = [t for t in fig.data if t.name.startswith("Best")]
    winner = per_run.plans[0]
    assert star.name == "Best (fastest)" and list(star.customdata) == [1]
    assert star.x[0] == pytest.approx(winner.time_to_train_s / 3600)
    assert star.y[0] == pytest.approx(winner.cost.cost_usd)


def test_axes_are_per_run_with_tokens_and_per_step_without(per_run: PlanResponse, per_step: PlanResponse) -> None:
    assert axes_for(per_run.plans).per_run
    fig = time_cost_figure(per_run.plans)
    assert fig is not None
    assert fig.layout.xaxis.title.text == "time to train (hours)"
    assert fig.layout.yaxis.title.text == "cost of the run (USD)"

    assert not axes_for(per_step.plans).per_run
    fig = time_cost_figure(per_step.plans)
    assert fig is not None
    assert fig.layout.xaxis.title.text == "step time (s)"
    assert fig.layout.yaxis.title.text == "USD per million tokens"
    shown = sorted((int(r), x, y) for t in _markers(fig) for r, x, y in zip(t.customdata, t.x, t.y, strict=True))
    assert shown == sorted((p.rank, p.step_time_s, p.cost.usd_per_million_tokens)
                           for p in per_step.plans if p.cost)


def test_plans_without_a_price_are_left_out(per_run: PlanResponse) -> None:
    unpriced = [p.model_copy(update={"cost": None}) for p in per_run.plans]
    assert time_cost_figure(unpriced) is None
    some = [unpriced[0], *per_run.plans[1:]]
    assert [pt.rank for pt in plan_points(some)] == [p.rank for p in per_run.plans[1:]]
    fig = time_cost_figure(some)
    assert fig is not None and not any(t.name.startswith("Best") for t in fig.data)  # the winner has no cost


def test_figure_json_is_plotly_json(per_run: PlanResponse) -> None:
    fig = time_cost_figure(per_run.plans)
    assert fig is not None
    data = json.loads(figure_json(fig))
    assert {t["type"] for t in data["data"]} == {"scatter"}
    assert "</" not in figure_json(fig)  # safe inside <script>
