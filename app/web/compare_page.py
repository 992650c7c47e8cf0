"""``GET /compare``: the job of the form on several GPUs or servers: memory, speed and cost side by side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.charts.compare import metric_bar_figure
from app.charts.memory import memory_figure
from app.charts.style import figure_json
from app.core.i18n import gettext as _
from app.core.i18n import translate
from app.deps import CatalogDep
from app.schemas.compare import CompareOption
from app.services.compare import common_basis, option_request
from app.web import backend
from app.web.costing import Cost, cost_to_train
from app.web.estimate_page import Verdict, verdict_of
from app.web.forms import COST_SECTION, field_specs, parse_form, request_to_query
from app.web.layout_suggestion import adopt_layout, best_plan, layout_words
from app.web.node_panel import node_row
from app.web.templating import is_htmx, render
from estimator import EstimateRequest, EstimateResponse, EstimatorError
from estimator.tco.run_cost import CostChoice

if TYPE_CHECKING:
    from hardware_catalog import Catalog, Gpu

__all__ = ["DEFAULT_FAMILIES", "default_gpus", "router"]

router = APIRouter()

#: GPU families compared when the URL names none: the first catalog GPU of each (by id) is picked.
DEFAULT_FAMILIES = ("a100", "h100", "h200")
MAX_OPTIONS = 16


@dataclass(frozen=True)
class Row:
    """One option of the comparison: its result, or the reason it has none."""

    label: str
    option: CompareOption
    result: EstimateResponse | None
    verdict: Verdict | None
    cost: Cost | None
    error: str | None
    #: "yours" (the layout of the form) or "planner" (the planner's fastest layout for this option, on the
    #: option's own hardware and the comparison's cost basis)
    kind: str = "yours"
    words: str = ""
    url: str = ""


def _flagship(gpu: Gpu) -> tuple[bool, int]:
    return "sxm" in str(getattr(gpu, "form_factor", gpu.id)).lower(), int(gpu.memory_bytes)


def default_gpus(catalog: Catalog) -> list[str]:
    """Per family in :data:`DEFAULT_FAMILIES`, its SXM part with the most memory (else the most memory)."""
    picks = []
    for family in DEFAULT_FAMILIES:
        members = [g for g in catalog.gpus.values() if g.id.startswith(family)]
        if members:
            picks.append(max(members, key=_flagship).id)
    return picks


def _options(catalog: Catalog, params: Any, job: EstimateRequest | None) -> list[CompareOption]:
    gpus = [g for g in params.getlist("gpus") if g]
    servers = [s for s in params.getlist("servers") if s]
    if not gpus and not servers:
        gpus = default_gpus(catalog)
        if job is not None and job.hardware.gpu not in gpus:
            gpus.append(job.hardware.gpu)
    options = [CompareOption(gpu=g) for g in dict.fromkeys(gpus)]
    options += [CompareOption(server=s) for s in dict.fromkeys(servers)]
    return options[:MAX_OPTIONS]


def _label(catalog: Catalog, option: CompareOption) -> str:
    if option.server is not None:
        return backend.server_name(catalog, option.server) or option.server
    return backend.gpu_name(catalog, option.gpu or "")


def _row(catalog: Catalog, job: EstimateRequest, option: CompareOption, basis: CostChoice | None = None) -> Row:
    label = _label(catalog, option)
    req = option_request(job, option, catalog, basis)
    try:
        result = backend.run_estimate(req, catalog)
    except EstimatorError as exc:
        return Row(label, option, None, None, None, exc.message)
    return Row(label, option, result, verdict_of(result), cost_to_train(catalog, result), None,
               words=layout_words(req), url=f"/estimate?{request_to_query(req)}")


def _planner_row(catalog: Catalog, job: EstimateRequest, option: CompareOption, basis: CostChoice | None) -> Row:
    """The planner's fastest layout for this option (same job, same global batch, the option's hardware and node
    count, the comparison's cost basis), estimated as the estimate page would."""
    label = _label(catalog, option)
    req = option_request(job, option, catalog, basis)
    try:
        best = best_plan(req, catalog) if req.hardware.world_size > 1 else None
        adopted = adopt_layout(req, best.request) if best is not None else req
        result = backend.run_estimate(adopted, catalog)
    except EstimatorError as exc:
        return Row(label, option, None, None, None, exc.message, kind="planner")
    if best is None and req.hardware.world_size > 1:
        return Row(label, option, None, None, None, _("the planner found no layout that fits"), kind="planner")
    return Row(label, option, result, verdict_of(result), cost_to_train(catalog, result), None, kind="planner",
               words=layout_words(adopted), url=f"/estimate?{request_to_query(adopted)}")


def _figures(rows: list[Row]) -> dict[str, str]:
    ok = [r for r in rows if r.result is not None]
    # speed, time and cost only for what fits: a layout that runs out of memory has none
    fit = [r for r in ok if r.result and r.result.memory.fits]
    figs = {"memory": figure_json(memory_figure([(_bar(r), r.result.memory) for r in ok if r.result],
                                                title=_("Memory on the busiest GPU")))}
    if any(r.result.time for r in fit if r.result):
        tps = [(_bar(r), r.result.time.tokens_per_s if r.result and r.result.time else None) for r in fit]
        figs["speed"] = figure_json(metric_bar_figure(tps, _("Training throughput"), _("tokens/s")))
    if any(r.result.train for r in fit if r.result):
        hours = [(_bar(r), r.result.train.time_to_train_s / 3600 if r.result and r.result.train else None)
                 for r in fit]
        figs["time"] = figure_json(metric_bar_figure(hours, _("Time to train"), _("hours")))
    if any(r.cost for r in fit):
        owned = all(r.cost.basis == "own" for r in fit if r.cost)
        title = _("Cost to train (owned)") if owned else _("Cost to train (rented)")
        figs["cost"] = figure_json(metric_bar_figure([(_bar(r), r.cost.total if r.cost else None) for r in fit],
                                                     title, "USD", ",.0f", "$"))
    return figs


def _bar(row: Row) -> str:
    return row.label if row.kind == "yours" else _("%(option)s, planner's layout") % {"option": row.label}


def _context(catalog: Catalog, params: Any) -> tuple[dict[str, Any], bool]:
    form = parse_form(params)
    options = _options(catalog, params, form.request)
    base: dict[str, Any] = {
        "errors": form.errors.messages,
        "all_gpus": backend.gpu_options(catalog), "all_servers": backend.server_options(catalog),
        "chosen_gpus": [o.gpu for o in options if o.gpu], "chosen_servers": [o.server for o in options if o.server],
        "active": "compare", "charts": True, "job": form.request, "rows": [], "figs": {},
        "values": form.values, "cost_specs": _cost_specs(),
        "cost_open": any(s.name in form.errors.messages or form.values.get(s.name) not in (s.default, None)
                         for s in _cost_specs()),
        "labels": {s.name: s.label for s in field_specs()},
    }
    if form.request is None:
        return base, False
    job = form.request
    basis = common_basis(job, options)
    rows = [_row(catalog, job, o, basis) for o in options]
    planned = [_planner_row(catalog, job, o, basis) for o in options]
    query = request_to_query(job)
    picks = "&".join([f"gpus={g}" for g in base["chosen_gpus"]] + [f"servers={s}" for s in base["chosen_servers"]])
    return {
        **base, "rows": rows, "planned": planned, "pairs": list(zip(rows, planned, strict=True)),
        "figs": _figures([*rows, *planned]), "job_query": query, "job_words": layout_words(job),
        "job_fields": _job_fields(query), "model_name": _model_name(rows, job),
        "node_rows": [(r.label, node_row(catalog, option_request(job, r.option, catalog), r.result))
                      for r in rows if r.result is not None and r.result.host is not None],
        "share_url": f"/compare?{query}&{picks}" if query else f"/compare?{picks}",
        "cost_basis_words": _basis_words(basis), "cost_flags": _cost_flags(rows),
    }, True


def _basis_words(basis: CostChoice) -> str:
    if basis.offer_id is not None:
        return _("every option rented from the offer %(offer)s") % {"offer": basis.offer_id}
    if basis.basis == "own":
        return _("every option owned (purchase amortised over its life + power, colocation and support)")
    return _("every option rented from the cheapest %(provider)s %(pricing)s offer of its GPU") % {
        "provider": basis.provider_class, "pricing": _(basis.pricing)}


def _cost_flags(rows: list[Row]) -> list[str]:
    """Options priced another way than the comparison's basis, or not at all, and why."""
    flags = [f"{r.label}: {translate(r.cost.flags[0])}" for r in rows if r.cost is not None and r.cost.another_way]
    flags += [f"{r.label}: {translate(r.result.warnings[-1])}" for r in rows
              if r.result is not None and r.result.cost is None
              and r.result.warnings]
    return flags


def _cost_specs() -> list[Any]:
    """The form's own controls for the cost basis (``cost.*``), shown on the page rather than carried hidden."""
    return [s for s in field_specs() if s.name.startswith(COST_SECTION + ".")]


def _job_fields(query: str) -> list[tuple[str, str]]:
    """The job's fields carried as hidden inputs (the cost basis has its own controls)."""
    return [(k, v) for k, v in parse_qsl(query) if not k.startswith(COST_SECTION + ".")]


def _model_name(rows: list[Row], job: EstimateRequest) -> str:
    for row in rows:
        if row.result is not None:
            return row.result.model.name
    return job.model if isinstance(job.model, str) else "custom model"


@router.get("/compare", response_class=HTMLResponse, name="compare_page")
def compare_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    context, ok = _context(catalog, request.query_params)
    headers = {"HX-Push-Url": context["share_url"]} if ok else {}
    if is_htmx(request):
        return render(request, "_compare_results.html", context, **headers)
    return render(request, "compare.html", context, status_code=200 if ok else 422)
