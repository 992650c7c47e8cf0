"""TCO: hand-computed goldens (arithmetic in the comments), break-even math, invariants, the upgrade answer.

The goldens use round-number assumptions (GOLDEN) on catalog hardware: NVIDIA DGX H100 = 8x H100 SXM5 at
700 W TDP, $270,000 (SemiAnalysis 2023, catalog); Lambda gpu_8x_h100_sxm5 at $3.99/GPU-hour (catalog, lambda.ai
2026-09-20).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from estimator.errors import InvalidRequestError, UnknownHardwareError
from estimator.tco import (
    HOURS_PER_MONTH,
    HOURS_PER_YEAR,
    JobCost,
    TcoAssumptions,
    assumption_table,
    break_even_month,
    capex,
    cloud_cost_usd,
    compare_job,
    compare_upgrade,
    cumulative_costs,
    job_cost_cloud,
    job_cost_owned,
    own_vs_cloud,
    own_vs_cloud_or_note,
    ownership_tco,
    ownership_tco_option,
    server_price,
    tco_options,
)
from hardware_catalog import load_catalog

GOLDEN = TcoAssumptions(
    electricity_usd_per_kwh=0.10, pue=1.5, colocation_usd_per_kw_month=200, maintenance_pct_per_year=10,
    depreciation_years=5, horizon_years=3, utilisation=0.5, server_non_gpu_power_w=1000,
    networking_usd_per_node_ib_ndr=50_000, networking_usd_per_node_roce=30_000, network_fabric="infiniband-ndr",
    storage_tb=10, storage_usd_per_tb=300, staff_usd_per_year=0, server_cost_vs_gpu_price=1.64,
    cloud_pricing="on-demand",
)  # fmt: skip

DAY = 86400.0


def _job(server_id: str, gpu_id: str, seconds: float, **extra: object) -> JobCost:
    return JobCost(
        gpu_id=gpu_id,
        server_id=server_id,
        num_nodes=1,
        gpus_per_node=8,
        time_to_train_s=seconds,
        train_tokens=1e9,
        **extra,
    )  # type: ignore[arg-type]


H100_DAY = _job("nvidia-dgx-h100", "h100-sxm5-80gb", DAY)


# ------------------------------------------------------------------------------------------------ goldens


def test_two_node_ownership_golden() -> None:
    t = ownership_tco("nvidia-dgx-h100", num_nodes=2, assumptions=GOLDEN)
    # capex = 2 x 270,000 + 2 x 50,000 networking + 10 TB x $300 = 643,000
    assert (t.capex.servers_usd, t.capex.networking_usd, t.capex.storage_usd) == (540_000, 100_000, 3_000)
    assert t.capex.total_usd == 643_000
    o = t.opex_per_year
    # load = 2 x (8 x 700 + 1000) W = 13.2 kW; average = 2 x (8 x 700 x 0.5 + 1000) W = 7.6 kW
    assert (o.load_power_kw, o.average_power_kw) == pytest.approx((13.2, 7.6))
    assert o.power_usd == pytest.approx(7.6 * 1.5 * 8760 * 0.10)  # 9,986.40
    assert o.colocation_usd == pytest.approx(13.2 * 200 * 12)  # 31,680
    assert o.maintenance_usd == pytest.approx(0.10 * 643_000)  # 64,300
    assert o.total_usd == pytest.approx(105_966.40)
    assert t.total_usd == pytest.approx(643_000 + 3 * 105_966.40)  # 960,899.20
    assert t.amortised_total_usd == pytest.approx(643_000 * 3 / 5 + 3 * 105_966.40)  # 703,699.20
    # per useful GPU-hour: (643,000 / 5 + 105,966.40) / (16 x 8760 x 0.5) = 234,566.40 / 70,080
    assert t.usd_per_gpu_hour == pytest.approx(3.347124, rel=1e-6)


def test_single_node_has_no_cluster_network_and_staff_adds_to_opex() -> None:
    t = ownership_tco("nvidia-dgx-h100", 1, GOLDEN.model_copy(update={"staff_usd_per_year": 120_000}))
    assert t.capex.networking_usd == 0 and t.capex.total_usd == 273_000  # 270,000 + 3,000 storage
    # power 3.8 kW x 1.5 x 8760 x 0.10 = 4,993.20; colocation 6.6 x 200 x 12 = 15,840; maintenance 27,300
    assert t.opex_per_year.total_usd == pytest.approx(4_993.20 + 15_840 + 27_300 + 120_000)


def test_roce_networking_is_used_when_chosen() -> None:
    t = ownership_tco("nvidia-dgx-h100", 4, GOLDEN.model_copy(update={"network_fabric": "roce"}))
    assert t.capex.networking_usd == 4 * 30_000


def test_run_cost_golden_owned() -> None:
    run = job_cost_owned(H100_DAY, GOLDEN)
    # $/GPU-h = (273,000 / 5 + 48,133.20) / (8 x 8760 x 0.5) = 102,733.20 / 35,040 = 2.931884
    assert run.usd_per_gpu_hour == pytest.approx(102_733.20 / 35_040)
    assert run.cost_usd == pytest.approx(102_733.20 / 35_040 * 8 * 24)  # 192 GPU-hours -> $562.92
    assert run.usd_per_million_tokens == pytest.approx(run.cost_usd / 1_000)  # 1e9 tokens
    # energy at load: (8 x 700 + 1000) W x 24 h = 158.4 kWh IT; x PUE 1.5 = 237.6 kWh at the meter
    assert (run.energy_kwh, run.facility_energy_kwh) == pytest.approx((158.4, 237.6))
    assert run.kind == "own" and run.time_to_train_h == 24


def test_run_cost_golden_cloud_and_given_energy() -> None:
    offer = load_catalog().cloud_offer("lambda-gpu-8x-h100-sxm5")
    run = job_cost_cloud(H100_DAY.model_copy(update={"energy_kwh": 120.0}), offer, "on-demand", GOLDEN)
    assert run.cost_usd == pytest.approx(3.99 * 8 * 24)  # $766.08
    assert run.energy_kwh == 120.0 and run.facility_energy_kwh == pytest.approx(180.0)
    assert run.offer_id == "lambda-gpu-8x-h100-sxm5" and run.kind == "cloud-on-demand"


def test_server_price_estimate_and_override() -> None:
    cat = load_catalog()
    server, gpu = cat.server("dell-xe9680-h100"), cat.gpu("h100-sxm5-80gb")
    price, estimated, source = server_price(server, gpu, GOLDEN)
    assert estimated and price == pytest.approx(27_500 * 8 * 1.64)  # midpoint of $25-30K x 8 x 1.64 = 360,800
    assert "estimated" in source
    assert server_price(server, gpu, GOLDEN, override=250_000) == (250_000, False, "price override")
    assert ownership_tco("dell-xe9680-h100", 1, GOLDEN, server_price_usd=250_000).capex.servers_usd == 250_000


@pytest.mark.parametrize(
    ("server_id", "gpu_mid", "gpus"),
    [
        ("dell-r760xa-l40s", 8_500, 4),  # L40S $7-10K (datastorage.com), midpoint $8,500
        ("hpe-dl380a-gen11-l40s", 8_500, 4),
        ("dell-r760xa-h100-pcie", 29_999.95, 4),  # H100 PCIe $25,249.95-$34,749.95 (Amazon, gpu-price-tracker)
    ],
)
def test_pcie_servers_get_an_estimated_price_from_the_gpu_price(server_id: str, gpu_mid: float, gpus: int) -> None:
    # the server has no catalog price; its GPU now has a sourced range, so capex is GPU midpoint x count x 1.64
    cat = load_catalog()
    assert cat.server(server_id).price_usd is None
    t = ownership_tco(server_id, 1, GOLDEN)
    assert t.server_price_estimated and "estimated" in t.server_price_source
    assert t.server_price_usd == pytest.approx(gpu_mid * gpus * 1.64)  # L40S: 55,760; H100 PCIe: 196,799.67
    assert t.capex.servers_usd == pytest.approx(t.server_price_usd)
    assert ownership_tco(server_id, 1, GOLDEN, server_price_usd=50_000).server_price_estimated is False


def test_a_server_without_any_price_asks_for_one() -> None:
    with pytest.raises(InvalidRequestError, match="pass server_price_usd") as info:
        ownership_tco("dell-r760xa-h100-nvl", 1, GOLDEN)  # neither the server nor H100 NVL has a price
    assert info.value.field == "server_price_usd"


@pytest.mark.parametrize(
    ("job", "field"),
    [
        (_job("nvidia-dgx-h100", "a100-sxm4-80gb", DAY), "gpu_id"),
        (_job("dell-xe8640-h100", "h100-sxm5-80gb", DAY), "gpus_per_node"),  # the XE8640 holds 4
    ],
)
def test_a_job_that_does_not_match_its_server_is_rejected(job: JobCost, field: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        job_cost_owned(job, GOLDEN)
    assert info.value.field == field


def test_unknown_server_is_an_unknown_hardware_error() -> None:
    with pytest.raises(UnknownHardwareError, match="nvidia-dgx-h100"):
        ownership_tco("nvidia-dgx-h1000", 1, GOLDEN)


# --------------------------------------------------------------------------------------------- break-even


@pytest.mark.parametrize(
    ("capex_usd", "own", "cloud", "expected"),
    [
        (100, 10, 30, 5.0),  # 100 / (30 - 10)
        (643_000, 105_966.40 / 12, 4 * 16 * HOURS_PER_MONTH * 0.5, 643_000 / (23_360 - 8_830.5333)),  # 44.25
        (100, 30, 30, None),  # the cloud is never dearer per month
        (100, 40, 30, None),
    ],
)
def test_break_even_month(capex_usd: float, own: float, cloud: float, expected: float | None) -> None:
    got = break_even_month(capex_usd, own, cloud)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_cumulative_costs_cross_at_the_break_even_month() -> None:
    c = cumulative_costs(100, 10, 30, months=12)  # own 100 + 10 m, cloud 30 m: equal at month 5
    assert c.months == tuple(range(13)) and c.break_even_month == 5 and c.break_even_month_exact == 5.0
    assert c.cloud_usd[5] >= c.own_usd[5] and c.cloud_usd[4] < c.own_usd[4]
    assert cumulative_costs(100, 10, 30, months=2).months[-1] == 8  # extended past the break-even


def test_cumulative_costs_without_break_even() -> None:
    c = cumulative_costs(100, 40, 30, months=36)
    assert c.break_even_month is None and len(c.months) == 37


def test_own_vs_cloud_golden() -> None:
    ov = own_vs_cloud(ownership_tco("nvidia-dgx-h100", 2, GOLDEN), "lambda-gpu-8x-h100-sxm5", GOLDEN)
    # cloud on demand pays for used hours: 3.99 x 16 GPUs x 730 h x 0.5 = 23,301.60 a month
    assert ov.cloud_monthly_usd == pytest.approx(3.99 * 16 * 730 * 0.5)
    assert ov.own_monthly_opex_usd == pytest.approx(105_966.40 / 12)  # 8,830.53
    exact = 643_000 / (3.99 * 16 * 730 * 0.5 - 105_966.40 / 12)  # 44.4 months
    assert ov.cumulative.break_even_month_exact == pytest.approx(exact)
    assert ov.cumulative.break_even_month == 45


def test_reserved_cloud_is_billed_for_every_hour() -> None:
    a = GOLDEN.model_copy(update={"cloud_pricing": "reserved"})
    ov = own_vs_cloud(ownership_tco("nvidia-dgx-a100-640gb", 1, a), "aws-p4de-24xlarge", a)
    assert ov.cloud_monthly_usd == pytest.approx(3.00 * 8 * 730)  # 1-year reserved $3.00, 100% of hours


def test_own_vs_cloud_picks_the_cheapest_offer_by_default() -> None:
    ov = own_vs_cloud(ownership_tco("nvidia-dgx-a100-320gb", 1, GOLDEN), None, GOLDEN)
    prices = [o.on_demand_usd_per_gpu_hour for o in load_catalog().offers_for("a100-sxm4-40gb")
              if o.offer_kind == "on-demand"]  # a capacity block is a reservation, not an on-demand price
    assert ov.cloud_usd_per_gpu_hour == min(p for p in prices if p is not None)


# ---------------------------------------------------------------------------------------------- invariants


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("electricity_usd_per_kwh", (0.05, 0.10, 0.20)),
        ("pue", (1.1, 1.4, 1.8)),
        ("colocation_usd_per_kw_month", (100, 150, 250)),
        ("maintenance_pct_per_year", (0, 5, 20)),
        ("server_non_gpu_power_w", (300, 600, 2000)),
    ],
)
def test_cost_rises_with_each_price_assumption(field: str, values: tuple[float, ...]) -> None:
    totals = [ownership_tco("nvidia-dgx-h100", 2, GOLDEN.model_copy(update={field: v})).total_usd for v in values]
    runs = [job_cost_owned(H100_DAY, GOLDEN.model_copy(update={field: v})).cost_usd for v in values]
    assert totals == sorted(totals) and len(set(totals)) == 3
    assert runs == sorted(runs) and len(set(runs)) == 3


def test_owned_cost_per_gpu_hour_falls_as_utilisation_rises() -> None:
    rates = [ownership_tco("nvidia-dgx-h100", 1, GOLDEN.model_copy(update={"utilisation": u})).usd_per_gpu_hour
             for u in (0.3, 0.6, 0.9)]  # fmt: skip
    assert rates == sorted(rates, reverse=True)


@pytest.mark.parametrize("hours", [1, 10, 100, 8760])
def test_cloud_cost_is_linear_in_hours(hours: float) -> None:
    assert cloud_cost_usd(2.99, 8, hours) == pytest.approx(hours * cloud_cost_usd(2.99, 8, 1))
    assert cloud_cost_usd(2.99, 16, hours) == pytest.approx(2 * cloud_cost_usd(2.99, 8, hours))


def test_capex_is_linear_in_nodes_beyond_one() -> None:
    two, four = capex(100_000, 2, GOLDEN), capex(100_000, 4, GOLDEN)
    assert four.servers_usd + four.networking_usd == 2 * (two.servers_usd + two.networking_usd)


def test_tco_options_own_bar_sums_and_cloud_bars_scale_with_gpus() -> None:
    options = tco_options(ownership_tco("nvidia-dgx-h100", 2, GOLDEN), GOLDEN)
    own, clouds = options[0], options[1:]
    parts = own.capex_usd + own.power_usd + own.colocation_usd + own.maintenance_usd + own.staff_usd
    assert own.kind == "own" and parts == pytest.approx(own.total_usd) == 960_899.20
    lambda_bar = next(o for o in clouds if o.label.startswith("Lambda gpu_8x_h100_sxm5"))
    assert lambda_bar.cloud_usd == pytest.approx(3.99 * 16 * HOURS_PER_YEAR * 3 * 0.5)  # used hours only
    assert all(o.kind.startswith("cloud") and o.total_usd == o.cloud_usd for o in clouds)


def test_compare_job_is_sorted_and_covers_own_on_demand_and_reserved() -> None:
    runs = compare_job(H100_DAY, GOLDEN)
    assert [r.cost_usd for r in runs] == sorted(r.cost_usd for r in runs)
    assert {r.kind for r in runs} >= {"own", "cloud-on-demand", "cloud-reserved", "cloud-capacity-block"}


# ------------------------------------------------------------------------------------------------ upgrade

A100_10D = _job("nvidia-dgx-a100-640gb", "a100-sxm4-80gb", 10 * DAY)


def test_a_job_faster_on_h100_says_upgrade() -> None:
    h100_4d = _job("nvidia-dgx-h100", "h100-sxm5-80gb", 4 * DAY)
    u = compare_upgrade(A100_10D, h100_4d, GOLDEN)
    assert u.time_saved_s == 6 * DAY and u.speedup == pytest.approx(2.5)
    assert u.cost_difference_usd_per_run < 0  # cheaper per run on H100
    assert u.cost_difference_usd_per_run == pytest.approx(u.own_b.cost_usd - u.own_a.cost_usd)
    assert u.break_even_runs == 0  # the DGX H100 ($270K) costs less than the DGX A100 640GB ($300K)
    assert u.verdict == "upgrade" and "6.0 days saved" in u.summary and "Verdict: move" in u.summary
    assert u.cloud_a is not None and u.cloud_b is not None


def test_the_upgrade_prices_both_cloud_runs_from_one_provider_class() -> None:
    """Like for like (issue 16): both cloud runs come from the same provider class, the cheapest of that class for
    each GPU, never a neocloud A100 against a hyperscaler H100."""
    from estimator.tco.run_cost import provider_class

    catalog = load_catalog()
    u = compare_upgrade(A100_10D, _job("nvidia-dgx-h100", "h100-sxm5-80gb", 4 * DAY), GOLDEN)
    assert u.cloud_a is not None and u.cloud_b is not None and u.cloud_provider_class == "hyperscaler"
    for run, gpu in ((u.cloud_a, "a100-sxm4-80gb"), (u.cloud_b, "h100-sxm5-80gb")):
        offer = catalog.cloud_offer(str(run.offer_id))
        assert provider_class(offer.provider) == "hyperscaler"
        rivals = [o.on_demand_usd_per_gpu_hour for o in catalog.offers_for(gpu) if o.offer_kind == "on-demand"
                  and o.on_demand_usd_per_gpu_hour and provider_class(o.provider) == "hyperscaler"]
        assert run.usd_per_gpu_hour == min(rivals)
    assert "cheapest on-demand hyperscaler offers" in u.summary


def test_payback_runs_follow_the_opex_saving() -> None:
    dear_h100 = _job("nvidia-dgx-h100", "h100-sxm5-80gb", 4 * DAY, server_price_usd=400_000)
    u = compare_upgrade(A100_10D, dear_h100, GOLDEN)
    tco_a = ownership_tco("nvidia-dgx-a100-640gb", 1, GOLDEN)
    tco_b = ownership_tco("nvidia-dgx-h100", 1, GOLDEN, server_price_usd=400_000)
    saving = tco_a.opex_usd_per_gpu_hour * 8 * 240 - tco_b.opex_usd_per_gpu_hour * 8 * 96  # per run
    assert u.break_even_runs == pytest.approx((tco_b.capex.total_usd - tco_a.capex.total_usd) / saving)
    assert u.break_even_months == pytest.approx(u.break_even_runs * 96 / (HOURS_PER_MONTH * 0.5))
    assert u.break_even_runs_if_a_owned == pytest.approx(tco_b.capex.total_usd / saving)


def test_faster_but_dearer_upgrade_prices_the_time_saved() -> None:
    a100 = _job("nvidia-dgx-a100-320gb", "a100-sxm4-40gb", 10 * DAY)
    h100 = _job("nvidia-dgx-h100", "h100-sxm5-80gb", 9 * DAY, server_price_usd=2_000_000)
    u = compare_upgrade(a100, h100, GOLDEN)
    assert u.verdict == "upgrade-if-time-matters" and u.cost_difference_usd_per_run > 0
    assert u.usd_per_hour_saved == pytest.approx(u.cost_difference_usd_per_run / 24)


def test_a_slower_option_says_stay_or_cost() -> None:
    u = compare_upgrade(_job("nvidia-dgx-h100", "h100-sxm5-80gb", 4 * DAY), A100_10D, GOLDEN)
    assert u.time_saved_s < 0 and u.verdict in ("stay", "upgrade-if-cost-matters")
    assert "slower per run" in u.summary


# -------------------------------------------------------------------------------------------- assumptions


def test_defaults_come_from_the_catalog_with_sources() -> None:
    rows = assumption_table()
    defaults = load_catalog().tco_defaults.assumptions
    assert [r.name for r in rows] == list(TcoAssumptions.model_fields)
    for row in rows:
        assert row.value == defaults[row.name].value and row.is_default
        assert row.source and row.unit and row.date


def test_assumption_table_marks_overrides() -> None:
    rows = {r.name: r for r in assumption_table(TcoAssumptions(pue=1.1))}
    assert rows["pue"].value == 1.1 and not rows["pue"].is_default and rows["pue"].default == 1.25
    assert rows["electricity_usd_per_kwh"].is_default


@pytest.mark.parametrize(
    "bad",
    [{"pue": 0.9}, {"utilisation": 0}, {"utilisation": 1.5}, {"network_fabric": "omnipath"}, {"pue_ratio": 1.2}],
)
def test_assumptions_are_validated(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        TcoAssumptions(**bad)  # type: ignore[arg-type]


def test_assumptions_are_frozen() -> None:
    with pytest.raises(ValidationError):
        GOLDEN.pue = 2.0  # type: ignore[misc]


def test_ownership_option_label_and_years() -> None:
    bar = ownership_tco_option(ownership_tco("nvidia-dgx-h100", 1, GOLDEN))
    assert bar.label == "own 1x NVIDIA DGX H100 (8x H100 SXM5)" and bar.years == 3
    assert HOURS_PER_YEAR == 8760


# ------------------------------------------------------------------------ payback against the life (audit)

XE_A100_10D = _job("dell-xe9680-a100", "a100-sxm4-80gb", 10 * DAY)  # 500 W A100s, estimated price $150,880


def test_a_payback_later_than_the_life_is_said_not_to_come() -> None:
    # XE9680 8x A100 (est. $11.5K x 8 x 1.64 = $150,880) -> 8x H100 (est. $360,800), the job 10 -> 5 days
    u = compare_upgrade(XE_A100_10D, _job("dell-xe9680-h100", "h100-sxm5-80gb", 5 * DAY), GOLDEN)
    assert u.break_even_runs is not None and u.break_even_months is not None
    # runs per year on B at 50% utilisation: 8760 x 0.5 / 120 h = 36.5; months = runs / 36.5 x 12
    assert u.runs_per_year == pytest.approx(8760 * 0.5 / 120)
    assert u.break_even_months == pytest.approx(u.break_even_runs / u.runs_per_year * 12)
    assert u.break_even_months > 5 * 12 and not u.pays_back_within_life and u.life_years == 5
    assert "does not pay back within the 5-year life" in u.summary and "pays back after" not in u.summary
    assert u.capex_b_usd - u.capex_a_usd == pytest.approx(360_800 - 150_880)
    assert u.break_even_runs == pytest.approx((u.capex_b_usd - u.capex_a_usd)
                                              / (u.opex_per_run_a_usd - u.opex_per_run_b_usd))


def test_small_amounts_keep_their_cents() -> None:
    u = compare_upgrade(XE_A100_10D, _job("dell-xe9680-h100", "h100-sxm5-80gb", 5 * DAY), GOLDEN)
    assert u.verdict == "upgrade-if-time-matters" and u.usd_per_hour_saved is not None
    assert u.usd_per_hour_saved < 100
    assert f"worth more than ${u.usd_per_hour_saved:,.2f}." in u.summary  # e.g. $1.32, not $1


def test_a_payback_within_the_life_says_so() -> None:
    dear_h100 = _job("nvidia-dgx-h100", "h100-sxm5-80gb", 4 * DAY, server_price_usd=310_000)
    u = compare_upgrade(A100_10D, dear_h100, GOLDEN)  # $10K more than the DGX A100 640GB, repaid quickly
    assert u.break_even_months is not None and u.break_even_months < 60 and u.pays_back_within_life
    assert "within the 5-year life" in u.summary and "pays back after" in u.summary
    assert u.verdict == "upgrade"


def test_cheaper_per_run_but_no_payback_is_not_a_plain_move() -> None:
    u = compare_upgrade(XE_A100_10D, _job("dell-xe9680-h100", "h100-sxm5-80gb", 4 * DAY), GOLDEN)
    assert u.cost_difference_usd_per_run < 0 and not u.pays_back_within_life
    assert u.verdict == "upgrade-if-time-matters" and "keep the new servers busy" in u.summary


# ------------------------------------------------------------------------------- servers, offers, bounds


def test_the_xe9680_a100_draws_500_w_per_gpu() -> None:
    t = ownership_tco("dell-xe9680-a100", 1, GOLDEN)
    assert t.opex_per_year.load_power_kw == pytest.approx((8 * 500 + 1000) / 1000)  # Dell's 500 W SKU


def test_an_offer_for_another_gpu_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="a100-sxm4-40gb") as info:
        # an A100 price for H100 servers
        own_vs_cloud(ownership_tco("nvidia-dgx-h100", 1, GOLDEN), "aws-p4d-24xlarge", GOLDEN)
    assert info.value.field == "offer_id"
    with pytest.raises(UnknownHardwareError) as unknown:
        own_vs_cloud(ownership_tco("nvidia-dgx-h100", 1, GOLDEN), "aws-p9", GOLDEN)
    assert unknown.value.field == "offer_id"


def test_a_gpu_without_cloud_offers_still_gets_its_ownership() -> None:
    mi300x = ownership_tco("dell-xe9680-mi300x", 1, GOLDEN, server_price_usd=100_000)
    versus, note = own_vs_cloud_or_note(mi300x, None, GOLDEN)
    assert versus is None and note is not None and "MI300X" in note
    assert tco_options(mi300x, GOLDEN)[0].kind == "own"
    with pytest.raises(InvalidRequestError):
        own_vs_cloud(mi300x, None, GOLDEN)


def test_dgx_b200_is_priced_and_rented() -> None:
    # DGX B200 ~$515K (secondary, uncertain); cheapest B200 on-demand offer: Spheron $6.03/GPU-h (2026-03-17)
    ov = own_vs_cloud(ownership_tco("nvidia-dgx-b200", 1, GOLDEN), None, GOLDEN)
    assert ov.ownership.capex.servers_usd == 515_000 and ov.offer_id == "spheron-b200"
    assert ov.cloud_usd_per_gpu_hour == 6.03
    assert ov.ownership.opex_per_year.load_power_kw == pytest.approx((8 * 1000 + 1000) / 1000)


@pytest.mark.parametrize(
    "bad",
    [{"staff_usd_per_year": float("inf")}, {"staff_usd_per_year": float("nan")}, {"staff_usd_per_year": 1e308},
     {"electricity_usd_per_kwh": 1e300}, {"utilisation": 1e-300}, {"depreciation_years": 1e-300},
     {"storage_tb": 1e300}, {"rack_kw": 0}],
)
def test_assumptions_are_finite_and_bounded(bad: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        TcoAssumptions(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [{"train_tokens": 1e-300}, {"time_to_train_s": float("inf")},
                                 {"server_price_usd": float("nan")}, {"energy_kwh": float("inf")}])
def test_jobs_are_finite_and_bounded(bad: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        H100_DAY.model_validate({**H100_DAY.model_dump(), **bad})


def test_the_headline_answers_inside_the_horizon_in_display_names() -> None:
    """Issue 16: "Owning costs less than renting coreweave-h100 after 37 months" stood over a 36-month horizon
    whose table showed renting cheaper. The headline now says which is cheaper over the horizon, then when owning
    breaks even, with display names."""
    from estimator.tco import offer_name, own_vs_cloud_headline

    catalog = load_catalog()
    own = ownership_tco("nvidia-dgx-h100", 1, GOLDEN)
    for offer_id in ("coreweave-h100", "aws-p5-48xlarge"):
        ov = own_vs_cloud(own, offer_id, GOLDEN)
        offer = catalog.cloud_offer(offer_id)
        text = own_vs_cloud_headline(ov, offer_name(offer, "on-demand"), GOLDEN.utilisation, GOLDEN.horizon_years)
        month = ov.cumulative.break_even_month
        horizon = round(GOLDEN.horizon_years * 12)
        assert offer_id not in text and offer.provider in text and own.server_name in text
        if month is None:
            assert text.startswith("Renting") and "never breaks even" in text
        elif month <= horizon:
            assert text.startswith("Owning") and f"after {month} months" in text
        else:
            assert text.startswith("Renting") and f"only after {month} months" in text
    assert offer_name(catalog.cloud_offer("spheron-b200"), "on-demand").count("on-demand") == 1
    assert "capacity block" in offer_name(catalog.cloud_offer("aws-capacity-block-p5e"), "on-demand").lower()
