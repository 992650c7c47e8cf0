"""The upgrade answer of :mod:`estimator.tco`: "when should I move from A (e.g. 8x A100) to B (8x H100)?" for
one job, in numbers and in plain words."""

from __future__ import annotations

import math

from pydantic import Field

from estimator.messages import Money, Num, Text, join
from estimator.tco.assumptions import HOURS_PER_YEAR, TcoAssumptions, Verdict, _Frozen, resolve_inputs
from estimator.tco.costs import _cheapest_cloud_run, job_cost_owned, ownership_tco
from estimator.tco.offers import ProviderClass
from estimator.tco.results import JobCost, RunCost
from hardware_catalog import Catalog

__all__ = ["UpgradeAnswer", "compare_upgrade"]


class UpgradeAnswer(_Frozen):
    """Answer to "when should I move from A to B?" for one job: numbers plus a plain-words summary."""

    own_a: RunCost
    own_b: RunCost
    cloud_a: RunCost | None
    cloud_b: RunCost | None
    time_saved_s: float
    speedup: float
    cost_difference_usd_per_run: float
    energy_saved_kwh: float
    capex_a_usd: float
    capex_b_usd: float
    opex_per_run_a_usd: float
    opex_per_run_b_usd: float
    break_even_runs: float | None
    break_even_runs_if_a_owned: float | None
    break_even_months: float | None
    break_even_months_if_a_owned: float | None
    runs_per_year: float = Field(description="runs of this job a year on B at the fleet's utilisation")
    life_years: float = Field(description="the depreciation life the payback is set against")
    pays_back_within_life: bool
    pays_back_within_life_if_a_owned: bool
    usd_per_hour_saved: float | None
    verdict: Verdict
    summary: str
    cloud_provider_class: ProviderClass | None = Field(
        default=None, description="the one provider class both cloud runs are priced from (like for like); null "
        "when no class rents both GPUs on demand, and then the cloud runs are the cheapest of any class")


# ---------------------------------------------------------------------------------------------- upgrade


def _cloud_pair(
    job_a: JobCost, job_b: JobCost, a: TcoAssumptions, cat: Catalog
) -> tuple[RunCost | None, RunCost | None, ProviderClass | None]:
    """The cheapest on-demand cloud run of each side from one provider class (hyperscalers first), so that the
    two are like for like; the cheapest of any class when no class rents both GPUs."""
    klass: ProviderClass
    for klass in ("hyperscaler", "neocloud"):
        run_a, run_b = _cheapest_cloud_run(job_a, a, cat, klass), _cheapest_cloud_run(job_b, a, cat, klass)
        if run_a is not None and run_b is not None:
            return run_a, run_b, klass
    return _cheapest_cloud_run(job_a, a, cat), _cheapest_cloud_run(job_b, a, cat), None


def _payback_runs(capex_a: float, capex_b: float, opex_run_a: float, opex_run_b: float) -> float | None:
    """Runs after which B's extra capex is repaid by its lower running cost per run: (capex_B - capex_A) /
    (opex per run A - opex per run B); 0 when B costs no more to buy, ``None`` when it never pays back."""
    extra, saving = capex_b - capex_a, opex_run_a - opex_run_b
    if extra <= 0:
        return 0.0
    if saving <= 0:
        return None
    return extra / saving


def _verdict(faster: bool, cheaper: bool) -> Verdict:
    """``cheaper``: cheaper per run (amortised) and, when it costs more to buy, paying back within the life."""
    if faster and cheaper:
        return "upgrade"
    if faster:
        return "upgrade-if-time-matters"
    return "upgrade-if-cost-matters" if cheaper else "stay"


def compare_upgrade(
    job_on_a: JobCost, job_on_b: JobCost, assumptions: TcoAssumptions | None = None, catalog: Catalog | None = None
) -> UpgradeAnswer:
    """ "When should I move from A (e.g. 8x A100) to B (8x H100)?" for one job: time saved per run, owned cost
    per run (amortised), cloud cost per run, energy, and when buying B pays back (in runs and months), set
    against the depreciation life: a payback later than the life is a payback that never comes."""
    a, cat = resolve_inputs(assumptions, catalog)
    own_a, own_b = job_cost_owned(job_on_a, a, cat), job_cost_owned(job_on_b, a, cat)
    tco_a = ownership_tco(
        job_on_a.server_id, job_on_a.num_nodes, a, cat, job_on_a.gpus_per_node, job_on_a.server_price_usd
    )
    tco_b = ownership_tco(
        job_on_b.server_id, job_on_b.num_nodes, a, cat, job_on_b.gpus_per_node, job_on_b.server_price_usd
    )
    opex_a, opex_b = tco_a.opex_usd_per_gpu_hour * job_on_a.gpu_hours, tco_b.opex_usd_per_gpu_hour * job_on_b.gpu_hours
    runs = _payback_runs(tco_a.capex.total_usd, tco_b.capex.total_usd, opex_a, opex_b)
    runs_owned = _payback_runs(0.0, tco_b.capex.total_usd, opex_a, opex_b)
    saved = job_on_a.time_to_train_s - job_on_b.time_to_train_s
    diff = own_b.cost_usd - own_a.cost_usd
    per_year = HOURS_PER_YEAR * a.utilisation / job_on_b.hours  # back-to-back runs on B at the utilisation
    months, months_owned = _months(runs, per_year), _months(runs_owned, per_year)
    life_months = a.depreciation_years * 12
    cloud_a, cloud_b, klass = _cloud_pair(job_on_a, job_on_b, a, cat)
    answer = UpgradeAnswer(
        own_a=own_a,
        own_b=own_b,
        cloud_a=cloud_a,
        cloud_b=cloud_b,
        cloud_provider_class=klass,
        time_saved_s=saved,
        speedup=job_on_a.time_to_train_s / job_on_b.time_to_train_s,
        cost_difference_usd_per_run=diff,
        energy_saved_kwh=own_a.energy_kwh - own_b.energy_kwh,
        capex_a_usd=tco_a.capex.total_usd,
        capex_b_usd=tco_b.capex.total_usd,
        opex_per_run_a_usd=opex_a,
        opex_per_run_b_usd=opex_b,
        break_even_runs=runs,
        break_even_runs_if_a_owned=runs_owned,
        break_even_months=months,
        break_even_months_if_a_owned=months_owned,
        runs_per_year=per_year,
        life_years=a.depreciation_years,
        pays_back_within_life=months is not None and months <= life_months,
        pays_back_within_life_if_a_owned=months_owned is not None and months_owned <= life_months,
        usd_per_hour_saved=diff / (saved / 3600) if saved > 0 and diff > 0 else None,
        verdict=_verdict(saved > 0, diff <= 0 and (runs == 0 or (months is not None and months <= life_months))),
        summary="",
    )
    return answer.model_copy(update={"summary": _summary(answer, a, cat)})


def _months(runs: float | None, runs_per_year: float) -> float | None:
    """Calendar months to run ``runs`` jobs back to back at the fleet's utilisation."""
    return runs / runs_per_year * 12 if runs is not None else None


# ------------------------------------------------------------------------------------------- plain words


def _duration(seconds: float) -> Text:
    hours = abs(seconds) / 3600
    return Text("%(n)s days", n=Num(hours / 24, ".1f")) if hours >= 48 else Text("%(n)s h", n=Num(hours, ".1f"))


def _usd(x: float) -> Money:
    """Whole dollars, with cents below $100 (so $0.08 is not shown as $0)."""
    return Money(abs(x), ",.2f") if abs(x) < 100 else Money(abs(x), ",.0f")


def _hardware(run: RunCost, cat: Catalog) -> str:
    return f"{run.num_gpus}x {cat.gpu(run.gpu_id).name}"


def _summary(u: UpgradeAnswer, a: TcoAssumptions, cat: Catalog) -> str:
    name_a, name_b = _hardware(u.own_a, cat), _hardware(u.own_b, cat)
    parts = [_time_sentence(u, name_a, name_b), _own_sentence(u, a), _payback_sentence(u, name_a, name_b)]
    if u.cloud_a and u.cloud_b:
        parts.append(_cloud_sentence(u.cloud_a, u.cloud_b, u.cloud_provider_class))
    parts.append(_verdict_sentence(u))
    return join(parts)


def _time_sentence(u: UpgradeAnswer, name_a: str, name_b: str) -> str:
    t_a, t_b = _duration(u.own_a.time_to_train_s), _duration(u.own_b.time_to_train_s)
    words = dict(b=name_b, tb=t_b, ta=t_a, a=name_a, saved=_duration(u.time_saved_s), speedup=Num(u.speedup, ".2f"))
    if u.time_saved_s > 0:
        return Text("On %(b)s this job trains in %(tb)s instead of %(ta)s on %(a)s: %(saved)s saved per run "
                    "(%(speedup)sx faster).", **words)
    return Text("On %(b)s this job trains in %(tb)s instead of %(ta)s on %(a)s: %(saved)s slower per run "
                "(%(speedup)sx).", **words)


def _own_sentence(u: UpgradeAnswer, a: TcoAssumptions) -> str:
    words = dict(years=Num(a.depreciation_years, "g"), utilisation=Num(a.utilisation, ".0%"),
                 b=_usd(u.own_b.cost_usd), a=_usd(u.own_a.cost_usd), diff=_usd(u.cost_difference_usd_per_run),
                 kwh_b=Num(u.own_b.energy_kwh, ",.0f"), kwh_a=Num(u.own_a.energy_kwh, ",.0f"))
    if u.cost_difference_usd_per_run <= 0:
        return Text("Owned (%(years)s-year amortisation, %(utilisation)s utilisation), a run costs %(b)s instead of "
                    "%(a)s: %(diff)s less per run, and uses %(kwh_b)s kWh instead of %(kwh_a)s kWh.", **words)
    return Text("Owned (%(years)s-year amortisation, %(utilisation)s utilisation), a run costs %(b)s instead of "
                "%(a)s: %(diff)s more per run, and uses %(kwh_b)s kWh instead of %(kwh_a)s kWh.", **words)


def _whole_runs(runs: float) -> Text:
    """Runs are whole: the payback comes after the run that completes it ("32,792 runs", "1 run")."""
    n = max(1, math.ceil(runs - 1e-9))
    return Text("%(n)s run", n=Num(n, ",")) if n == 1 else Text("%(n)s runs", n=Num(n, ","))


def _payback_words(runs: float | None, months: float | None, within: bool, life: float) -> Text:
    """'pays back after N runs (M months)', or why it does not within the ``life``-year life."""
    if runs is None or months is None:
        return Text("never pays back on running costs alone (the new option does not cost less to run per run)")
    if within:
        return Text("pays back after %(runs)s (%(months)s months), within the %(life)s-year life",
                    runs=_whole_runs(runs), months=Num(months, ",.1f"), life=Num(life, "g"))
    return Text("does not pay back within the %(life)s-year life: it would take %(runs)s, %(years)s years of "
                "back-to-back runs", life=Num(life, "g"), runs=_whole_runs(runs), years=Num(months / 12, ",.1f"))


def _payback_sentence(u: UpgradeAnswer, name_a: str, name_b: str) -> str:
    if u.break_even_runs == 0:
        new = Text("Buying %(b)s instead of %(a)s costs no more up front", b=name_b, a=name_a)
    else:
        words = _payback_words(u.break_even_runs, u.break_even_months, u.pays_back_within_life, u.life_years)
        new = Text("Buying %(b)s instead of %(a)s %(words)s", b=name_b, a=name_a, words=words)
    owned = _payback_words(
        u.break_even_runs_if_a_owned, u.break_even_months_if_a_owned, u.pays_back_within_life_if_a_owned, u.life_years
    )
    return Text("%(new)s; if you already own the %(a)s, replacing them %(owned)s.", new=new, a=name_a, owned=owned)


def _cloud_sentence(cloud_a: RunCost, cloud_b: RunCost, klass: ProviderClass | None) -> str:
    offers = (Text("cheapest on-demand %(klass)s offers", klass=klass) if klass is not None
              else Text("cheapest on-demand offers, not of one provider class"))
    return Text("In the cloud (%(offers)s) a run costs %(b)s on %(label_b)s instead of %(a)s on %(label_a)s.",
                offers=offers, b=_usd(cloud_b.cost_usd), label_b=cloud_b.label, a=_usd(cloud_a.cost_usd),
                label_a=cloud_a.label)


def _verdict_sentence(u: UpgradeAnswer) -> str:
    if u.verdict == "upgrade":
        return Text("Verdict: move - the new option is faster and cheaper per run.")
    if u.verdict == "upgrade-if-time-matters" and u.usd_per_hour_saved is not None:
        return Text("Verdict: move if an hour of earlier results is worth more than %(usd)s.",
                    usd=_usd(u.usd_per_hour_saved))
    if u.verdict == "upgrade-if-time-matters":
        return Text("Verdict: move if time matters, or if you will keep the new servers busy: amortised over a fully "
                    "used %(life)s-year life it is cheaper per run, but for the same number of runs its extra cost "
                    "does not pay back within that life.", life=Num(u.life_years, "g"))
    if u.verdict == "upgrade-if-cost-matters":
        return Text("Verdict: the new option is cheaper per run but slower; move only if cost matters more than time.")
    return Text("Verdict: stay - the new option is neither faster nor cheaper for this job.")
