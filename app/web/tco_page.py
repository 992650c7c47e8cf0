"""``GET /tco``: owning servers versus renting cloud GPUs, with every assumption editable on the page.

Query parameters: ``server``, ``nodes``, ``server_price_usd``, ``offer``, one ``a.<name>`` per field of
:class:`estimator.tco.TcoAssumptions` (empty means the catalog default; ``a.rack_kw`` is the kW per rack of the
rack plan), and ``up.current`` / ``up.candidate`` (the servers of the "Upgrade A100 -> H100?" section, default
the Dell XE9680 with 8x A100 and with 8x H100). Job fields of the estimate form (``model``, ``training.*`` ...)
set the job; without them the upgrade section and the cost-vs-time chart use a stated reference job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from app.charts.style import figure_json
from app.charts.tco import (
    cost_vs_time_figure,
    cumulative_cost_figure,
    tco_stacked_bar_figure,
    upgrade_payback_figure,
)
from app.core.i18n import N_, localize_number, translate
from app.core.i18n import gettext as _
from app.deps import CatalogDep
from app.schemas.tco import DEFAULT_CANDIDATE, DEFAULT_CURRENT, UpgradeRequest, UpgradeResponse, UpgradeSide
from app.services.tco import compute_upgrade, job_on_server, rack_for
from app.web import backend
from app.web.forms import SECTIONS, parse_form, plain_message, request_to_query
from app.web.templating import is_htmx, money, render
from estimator import EstimateRequest, EstimatorError
from estimator.host_options import options_for
from estimator.messages import Text
from estimator.tco import (
    JobCost,
    RunCost,
    TcoAssumptions,
    assumption_table,
    compare_job,
    job_cost_cloud,
    job_cost_owned,
    offer_name,
    own_vs_cloud_headline,
    own_vs_cloud_or_note,
    ownership_tco,
    tco_options,
)
from estimator.tco.run_cost import CostChoice, choose_basis, offer_confidence

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["router"]

router = APIRouter()

_PREFIX = "a."
_JOB_KEYS = ("model", "model_json")
_UP = ("up.current", "up.candidate")
_MAX_NODES = 100_000
_MAX_PRICE = 1e10

#: the job of the upgrade section and the cost-vs-time chart when the page has none (said so on the page)
REFERENCE_JOB = EstimateRequest.model_validate({
    "model": "llama-3.1-8b", "training": {"method": "full", "train_tokens": 1e9}, "parallelism": {"sharding": "zero3"},
})
REFERENCE_JOB_WORDS = N_("Llama 3.1 8B, full fine-tune, ZeRO-3, 1B tokens")

#: one server per GPU generation for the cost-vs-time chart (the chosen server is added when it is not one)
CHART_SERVERS = ("dell-xe9680-a100", "dell-xe9680-h100", "dell-xe9680-h200", "nvidia-dgx-b200")


@dataclass
class TcoForm:
    server: str
    nodes: str
    server_price_usd: str
    offer: str
    assumptions: dict[str, str]
    up_current: str = DEFAULT_CURRENT
    up_candidate: str = DEFAULT_CANDIDATE
    errors: dict[str, str] = field(default_factory=dict)


def _choices(name: str) -> tuple[str, ...]:
    return tuple(get_args(TcoAssumptions.model_fields[name].annotation))


def _read(params: Any, catalog: Catalog, job: EstimateRequest | None) -> TcoForm:
    default_server = (job.hardware.server if job is not None else None) or _default_server(catalog)
    return TcoForm(
        server=params.get("server") or default_server,
        nodes=params.get("nodes") or (str(job.hardware.num_nodes) if job is not None else "1"),
        server_price_usd=(params.get("server_price_usd") or "").strip(),
        offer=params.get("offer") or "",
        assumptions={n: (params.get(_PREFIX + n) or "").strip() or _job_cost_setting(job, n)
                     for n in TcoAssumptions.model_fields},
        up_current=params.get("up.current") or DEFAULT_CURRENT,
        up_candidate=params.get("up.candidate") or DEFAULT_CANDIDATE,
    )


def _job_cost_setting(job: EstimateRequest | None, name: str) -> str:
    """The job's own cost setting for an assumption the form leaves empty (``cost.utilisation``, ``cost.pue``,
    ``cost.electricity_usd_per_kwh`` of the estimate), so that the owned run here is priced as on /estimate."""
    value = getattr(job.cost, name, None) if job is not None and job.cost is not None else None
    return "" if value is None else f"{value:g}"


def _default_server(catalog: Catalog) -> str:
    """An 8x H100 SXM server if the catalog has one (the common reference), else the first server."""
    servers = sorted(catalog.servers.values(), key=lambda s: s.id)
    preferred = [s for s in servers if s.gpu_id.startswith("h100-sxm") and s.price_usd] or servers
    return str(preferred[0].id) if preferred else ""


def _assumptions(form: TcoForm) -> TcoAssumptions | None:
    given = {k: v for k, v in form.assumptions.items() if v != ""}
    try:
        return TcoAssumptions(**given)
    except ValidationError as exc:
        for err in exc.errors():
            name = _PREFIX + str(err["loc"][0]) if err.get("loc") else "form"
            form.errors.setdefault(name, plain_message(err))
        return None


def _number(form: TcoForm, name: str, raw: str, minimum: float, maximum: float) -> float | None:
    if raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        form.errors[name] = _("Enter a number")
        return None
    if not math.isfinite(value):
        form.errors[name] = _("Enter a finite number")
        return None
    if value < minimum:
        form.errors[name] = _("Must be at least %(n)s") % {"n": localize_number(f"{minimum:g}")}
        return None
    if value > maximum:
        form.errors[name] = _("Must be at most %(n)s") % {"n": localize_number(f"{maximum:g}")}
        return None
    return value


_TCO_FIELDS = {"server_id": "server", "offer_id": "offer", "gpus_per_node": "server"}


def _error_field(exc: EstimatorError) -> str:
    return _TCO_FIELDS.get(exc.field or "", exc.field or "form")


def _job_cost(
    catalog: Catalog, job: EstimateRequest | None, form: TcoForm, nodes: int, price: float | None
) -> tuple[JobCost | None, str | None]:
    """The job on the chosen server, when the estimate gives a time to train; else why not."""
    if job is None:
        return None, None
    try:
        return job_on_server(job, form.server, nodes, price, catalog)[0], None
    except EstimatorError as exc:
        return None, exc.message


def _server_runs(catalog: Catalog, job: EstimateRequest, form: TcoForm, nodes: int, a: TcoAssumptions
                 ) -> tuple[list[RunCost], list[str]]:
    """The same job owned on one server per GPU generation (A100, H100, H200, B200 and the chosen server), and
    the cheapest on-demand cloud run of each GPU: the points of the cost-vs-time chart."""
    ids = [form.server, *(s for s in CHART_SERVERS if s != form.server and s in catalog.servers)]
    runs: list[RunCost] = []
    skipped: list[str] = []
    for server_id in ids:
        name = catalog.servers[server_id].name
        try:
            job_cost = job_on_server(job, server_id, nodes, None, catalog, whole=True)[0]
            label = Text("own %(nodes)sx %(server)s", nodes=nodes, server=name)
            runs.append(job_cost_owned(job_cost.model_copy(update={"label": label}), a, catalog))
            rented, _notes = choose_basis(catalog, job_cost.gpu_id, None, choice=CostChoice(basis="rent"))
            offer = next((o for o in catalog.cloud_offers if rented and o.id == rented.offer_id), None)
            if offer is not None and all(r.offer_id != offer.id for r in runs):
                runs.append(job_cost_cloud(job_cost, offer, "on-demand", a, catalog))
        except EstimatorError as exc:
            skipped.append(f"{name}: {exc.message}")
    return runs, skipped


def _upgrade(catalog: Catalog, form: TcoForm, job: EstimateRequest | None, nodes: int, a: TcoAssumptions
             ) -> tuple[UpgradeResponse | None, str | None, str | None]:
    """The upgrade answer for the page's job (or the reference job): (answer, chart JSON, error)."""
    for name, value in (("up.current", form.up_current), ("up.candidate", form.up_candidate)):
        if value not in catalog.servers:
            form.errors[name] = _("unknown server %(id)r") % {"id": value}
            return None, None, None
    body = UpgradeRequest(job=job or REFERENCE_JOB, current=UpgradeSide(server=form.up_current, num_nodes=nodes),
                          candidate=UpgradeSide(server=form.up_candidate, num_nodes=nodes), assumptions=a)
    try:
        answer = compute_upgrade(body, catalog)
    except EstimatorError as exc:
        return None, None, exc.message
    fig = upgrade_payback_figure(answer.answer, _("buy %(server)s") % {"server": answer.current.server_name},
                                 _("buy %(server)s") % {"server": answer.candidate.server_name})
    return answer, figure_json(fig), None


def _compute(catalog: Catalog, form: TcoForm, job: EstimateRequest | None) -> dict[str, Any]:
    assumptions = _assumptions(form)
    if assumptions is not None and job is not None and form.assumptions.get("rack_kw", "") == "":
        # the job's own rack budget (host.rack_kw_budget), so that /tco and the estimate's node panel plan the
        # same rack: one stated budget, one function (app.services.power.rack_fit)
        budget = options_for(job).resolved().rack_kw_budget
        if budget:
            assumptions = assumptions.model_copy(update={"rack_kw": float(budget)})
    nodes = _number(form, "nodes", form.nodes, 1, _MAX_NODES)
    price = _number(form, "server_price_usd", form.server_price_usd, 0.01, _MAX_PRICE)
    if form.server not in catalog.servers:
        form.errors["server"] = _("unknown server %(id)r") % {"id": form.server}
    elif form.offer and form.offer not in {o.value for o in _offers(catalog, form.server)}:
        form.errors["offer"] = _("no cloud offer %(id)r for this server's GPU") % {"id": form.offer}
    if form.errors or assumptions is None:
        return {}
    n = int(nodes or 1)
    try:
        own = ownership_tco(form.server, n, assumptions, catalog, server_price_usd=price)
        options = tco_options(own, assumptions, catalog)
        versus, versus_note = own_vs_cloud_or_note(own, form.offer or None, assumptions, catalog)
        rack = rack_for(form.server, n, assumptions, catalog)
        job_cost, job_note = _job_cost(catalog, job, form, n, price)
        runs = compare_job(job_cost, assumptions, catalog) if job_cost is not None else []
    except EstimatorError as exc:
        form.errors[_error_field(exc)] = exc.message
        return {}
    upgrade, upgrade_fig, upgrade_error = _upgrade(catalog, form, job, n, assumptions)
    if form.errors:
        return {}
    chart_runs, skipped = _server_runs(catalog, job or REFERENCE_JOB, form, n, assumptions)
    figs = {"tco": figure_json(tco_stacked_bar_figure(options))}
    if versus is not None:
        figs["cumulative"] = figure_json(
            cumulative_cost_figure(versus.cumulative, _("Own"),
                                   _("Rent (%(offer)s)") % {"offer": _offer_label(catalog, versus)}))
    if chart_runs:
        figs["runs"] = figure_json(cost_vs_time_figure(
            chart_runs, _("The same job on each GPU: cost per run vs time to train"), by="label"))
    if upgrade_fig:
        figs["upgrade"] = upgrade_fig
    headline = _headline(catalog, versus, assumptions)
    per_run = _per_run_note(versus, runs, assumptions, _offer_label(catalog, versus))
    return {"per_run_note": per_run, "own": own, "options": options, "versus": versus, "versus_note": versus_note,
            "rack": rack, "headline": headline, "offer_label": _offer_label(catalog, versus),
            "runs": runs, "job_note": job_note, "figs": figs, "chart_runs": chart_runs, "chart_skipped": skipped,
            "upgrade": upgrade, "upgrade_error": upgrade_error, "reference_job": REFERENCE_JOB_WORDS,
            "rows": assumption_table(assumptions, catalog), "nodes_int": n}


def _offer_label(catalog: Catalog, versus: Any) -> str | None:
    """The compared offer's display name ("AWS p5.48xlarge, on-demand"), never its id."""
    if versus is None:
        return None
    offer = next((o for o in catalog.cloud_offers if o.id == versus.offer_id), None)
    if offer is None:
        return str(versus.offer_id)
    low = offer_confidence(offer, versus.cloud_pricing, catalog) == "low"
    return offer_name(offer, versus.cloud_pricing) + (", a low-confidence price," if low else "")


def _per_run_note(versus: Any, runs: list[Any], a: TcoAssumptions, label: str | None) -> str | None:
    """The headline's offer against owning, per run of the page's job (the per-run table's own two rows), said
    next to the headline so the two never read as a contradiction: the headline counts cash over the horizon
    (the whole purchase paid inside it), the per-run cost amortises the purchase over the server's life."""
    if versus is None or not runs:
        return None
    owned = next((r for r in runs if r.kind == "own"), None)
    kind = f"cloud-{versus.cloud_pricing}"
    rented = next((r for r in runs if r.offer_id == versus.offer_id and r.kind == kind), None)
    if owned is None or rented is None:
        return None
    words = {"own": money(owned.cost_usd), "offer": (label or versus.offer_id).rstrip(", "),
             "rent": money(rented.cost_usd), "years": f"{a.horizon_years:g}"}
    if owned.cost_usd <= rented.cost_usd:
        return _("Per run of this job, owning is cheaper (%(own)s against %(rent)s on %(offer)s): the run cost "
                 "amortises the purchase over the server's life, while the %(years)s-year comparison pays all of "
                 "it in cash inside the horizon.") % words
    return _("Per run of this job, renting %(offer)s is cheaper too (%(rent)s against %(own)s owned).") % words


def _headline(catalog: Catalog, versus: Any, a: TcoAssumptions) -> str | None:
    label = _offer_label(catalog, versus)
    if versus is None or label is None:
        return None
    return own_vs_cloud_headline(versus, label, a.utilisation, a.horizon_years)


def _share_url(form: TcoForm, job: EstimateRequest | None) -> str:
    pairs = [("server", form.server), ("nodes", form.nodes)]
    pairs += [(k, v) for k, v in (("server_price_usd", form.server_price_usd), ("offer", form.offer)) if v]
    pairs += [(_PREFIX + k, v) for k, v in form.assumptions.items() if v]
    pairs += [(k, v) for k, v, d in (("up.current", form.up_current, DEFAULT_CURRENT),
                                     ("up.candidate", form.up_candidate, DEFAULT_CANDIDATE)) if v != d]
    query = urlencode(pairs)
    return f"/tco?{query}&{request_to_query(job)}" if job is not None else f"/tco?{query}"


def _job_of(params: Any) -> tuple[EstimateRequest | None, dict[str, str]]:
    has_job = any(k in params for k in _JOB_KEYS) or any(k.split(".")[0] in SECTIONS for k in params)
    if not has_job:
        return None, {}
    parsed = parse_form(params)
    return parsed.request, parsed.errors.messages


def _offers(catalog: Catalog, server_id: str) -> list[backend.Option]:
    server = catalog.servers.get(server_id)
    if server is None:
        return []
    offers = [o for o in catalog.cloud_offers if o.gpu_id == server.gpu_id]
    return [backend.Option(o.id, f"{o.provider} {o.instance}", o.offer_kind) for o in offers]


@router.get("/tco", response_class=HTMLResponse, name="tco_page")
def tco_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    params = request.query_params
    job, job_errors = _job_of(params)
    form = _read(params, catalog, job)
    result = _compute(catalog, form, job)
    context = {
        **result, "form": form, "errors": {**form.errors, **{f"job: {k}": v for k, v in job_errors.items()}},
        "servers": backend.server_options(catalog), "offers": _offers(catalog, form.server),
        "fields": TcoAssumptions.model_fields, "choices": {n: _choices(n) for n in ("network_fabric", "cloud_pricing")},
        "defaults": {r.name: r for r in assumption_table(None, catalog)}, "job": job,
        "job_fields": [(k, v) for k, v in params.multi_items() if k in _JOB_KEYS or k.split(".")[0] in SECTIONS],
        "share_url": _share_url(form, job), "job_query": request_to_query(job) if job is not None else "",
        "active": "tco", "charts": True,
    }
    context["labels"] = {
        "server": _("Server"), "nodes": _("Servers (nodes)"), "server_price_usd": _("Server price"),
        "offer": _("Cloud offer"), "up.current": _("Upgrade from"), "up.candidate": _("Upgrade to"),
        **{_PREFIX + r.name: translate(r.description) for r in context["defaults"].values()},
    }
    ok = not context["errors"]
    if is_htmx(request):
        return render(request, "_tco_results.html", {**context, "oob": True},
                      **({"HX-Push-Url": context["share_url"]} if ok else {}))
    return render(request, "tco.html", context, status_code=200 if ok else 422)
