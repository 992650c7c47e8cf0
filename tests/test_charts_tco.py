"""TCO charts, checked on their data: trace names, stacked sums equal to the totals, the break-even month."""

from __future__ import annotations

import json

import pytest

from app.charts.style import figure_json
from app.charts.tco import (
    COMPONENTS,
    cost_vs_time_figure,
    cumulative_cost_figure,
    tco_stacked_bar_figure,
    upgrade_payback_figure,
)
from estimator.tco import (
    JobCost,
    TcoAssumptions,
    compare_job,
    compare_upgrade,
    cumulative_costs,
    job_cost_owned,
    own_vs_cloud,
    ownership_tco,
    tco_options,
)

A = TcoAssumptions(staff_usd_per_year=50_000, storage_tb=100)  # every component non-zero
JOB = JobCost(gpu_id="h100-sxm5-80gb", server_id="nvidia-dgx-h100", num_nodes=2, gpus_per_node=8,
              time_to_train_s=3 * 86400, train_tokens=50e9)  # fmt: skip


def test_stacked_bars_sum_to_each_option_total() -> None:
    options = tco_options(ownership_tco("nvidia-dgx-h100", 2, A), A)
    fig = tco_stacked_bar_figure(options)
    assert fig.layout.barmode == "stack"
    assert [t.name for t in fig.data] == [name for _, name, _ in COMPONENTS]
    for i, option in enumerate(options):
        stacked = sum(trace.y[i] for trace in fig.data)
        assert stacked == pytest.approx(option.total_usd)
        assert all(trace.x[i] == option.label for trace in fig.data)
    assert "3 years" in fig.layout.title.text


def test_stacked_bars_leave_out_empty_components() -> None:
    no_staff = TcoAssumptions(staff_usd_per_year=0)
    fig = tco_stacked_bar_figure(tco_options(ownership_tco("nvidia-dgx-h100", 1, no_staff), no_staff))
    assert "Staff" not in [t.name for t in fig.data]


def test_cumulative_chart_marks_the_break_even_month() -> None:
    ov = own_vs_cloud(ownership_tco("nvidia-dgx-h100", 2, A), "aws-p5-48xlarge", A)
    c = ov.cumulative
    fig = cumulative_cost_figure(c, own_label="Own 2x DGX H100", cloud_label="AWS p5")
    own, cloud, marker = fig.data
    assert (own.name, cloud.name) == ("Own 2x DGX H100", "AWS p5")
    m = c.break_even_month
    assert m is not None and marker.name == f"Break-even (month {m})" and list(marker.x) == [m]
    assert cloud.y[m] >= own.y[m] and cloud.y[m - 1] < own.y[m - 1]  # the curves cross at month m
    assert own.y[0] == pytest.approx(ov.ownership.capex.total_usd) and cloud.y[0] == 0
    assert fig.layout.shapes[0].x0 == m  # the dotted vertical line


def test_cumulative_chart_without_break_even_has_no_marker() -> None:
    fig = cumulative_cost_figure(cumulative_costs(100_000, 5_000, 4_000, 36))
    assert [t.name for t in fig.data] == ["Own", "Cloud"] and not fig.layout.shapes


def test_cost_vs_time_scatter_has_every_option() -> None:
    runs = compare_job(JOB, A)
    fig = cost_vs_time_figure(runs)
    assert {t.name for t in fig.data} == {"Own", "Cloud on-demand", "Cloud reserved", "Cloud capacity block"}
    points = {(label, x, y) for t in fig.data for label, x, y in zip(t.text, t.x, t.y, strict=True)}
    assert points == {(r.label, r.time_to_train_h, r.cost_usd) for r in runs}
    assert all(x == pytest.approx(72) for t in fig.data for x in t.x)  # the same job everywhere


def test_figures_serialise_for_the_browser() -> None:
    fig = tco_stacked_bar_figure(tco_options(ownership_tco("nvidia-dgx-a100-640gb", 1, A), A))
    assert json.loads(figure_json(fig))["data"][0]["name"] == "Capex"


def test_cost_vs_time_by_label_gives_each_server_its_own_trace() -> None:
    jobs = [JOB.model_copy(update={"server_id": s, "gpu_id": g, "time_to_train_s": t * 3600, "label": s})
            for s, g, t in (("dell-xe9680-a100", "a100-sxm4-80gb", 100), ("nvidia-dgx-h100", "h100-sxm5-80gb", 45),
                            ("nvidia-dgx-h200", "h200-sxm-141gb", 40), ("nvidia-dgx-b200", "b200-sxm-180gb", 20))]
    runs = [job_cost_owned(j, A) for j in jobs]
    fig = cost_vs_time_figure(runs, by="label")
    assert [t.name for t in fig.data] == [j.label for j in jobs]  # one trace per server, in order
    assert [(t.x[0], t.y[0]) for t in fig.data] == [(r.time_to_train_h, r.cost_usd) for r in runs]
    assert len({t.marker.color for t in fig.data}) == 4


def test_upgrade_payback_chart_lines_life_and_break_even() -> None:
    a100 = JOB.model_copy(update={"server_id": "nvidia-dgx-a100-640gb", "gpu_id": "a100-sxm4-80gb",
                                  "time_to_train_s": 10 * 86400})
    # priced so the H100 pair costs more up front (its two-node network is one designed switch, the DGX A100's
    # 200G NICs keep the flat per-node network figure: at $330,000 the H100 pair was already cheaper)
    h100 = JOB.model_copy(update={"time_to_train_s": 4 * 86400, "server_price_usd": 450_000})
    u = compare_upgrade(a100, h100, A)
    fig = upgrade_payback_figure(u, "DGX A100", "DGX H100")
    cur, cand = fig.data[0], fig.data[1]
    assert (cur.name, cand.name) == ("DGX A100", "DGX H100")
    assert cur.y[0] == pytest.approx(u.capex_a_usd) and cand.y[0] == pytest.approx(u.capex_b_usd)
    n = cur.x[-1]
    assert cand.y[-1] == pytest.approx(u.capex_b_usd + n * u.opex_per_run_b_usd)
    assert fig.layout.shapes[0].x0 == pytest.approx(u.runs_per_year * u.life_years)  # end of the life
    assert u.break_even_runs is not None and 0 < u.break_even_runs <= n
    marker = fig.data[2]
    assert list(marker.x) == [pytest.approx(u.break_even_runs)] and marker.name.startswith("Break-even")
