"""Home ("Size a fine-tune") and ``GET /estimate``: the form, and its result in place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.charts.memory import MEMORY_LABELS, memory_figure, memory_parts
from app.charts.step_time import step_time_figure
from app.charts.style import MEMORY_COLORS, figure_json
from app.core.i18n import N_
from app.core.i18n import gettext as _
from app.deps import CatalogDep, SessionDep
from app.web import backend
from app.web.costing import cost_to_train
from app.web.form_start import model_field, server_gpu
from app.web.forms import BASIC_FIELDS, FormErrors, field_specs, parse_form, request_to_query
from app.web.measurements_page import KIND_LABELS, measured_beside
from app.web.node_panel import node_panel
from app.web.serve_page import serve_query
from app.web.templating import gib, is_htmx, render
from estimator import EstimateRequest, EstimateResponse, EstimatorError
from estimator.tco.network import tco_query
from estimator.training.suggest import apply_changes

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["Verdict", "estimate_context", "form_context", "router", "run_form", "verdict_of"]

router = APIRouter()


@dataclass(frozen=True)
class Verdict:
    tone: str  # ok | tight | bad
    label: str
    sentence: str


def verdict_of(result: EstimateResponse) -> Verdict:
    """Fits / tight (fits, but within the error bar) / does not fit, in words (the label is translated where it
    is shown, the sentence here)."""
    mem = result.memory
    margin = mem.total_bytes * mem.error_bar_pct / 100
    used = _("%(used)s of %(capacity)s per GPU (± %(err)s%%)") % {
        "used": gib(mem.total_bytes), "capacity": gib(mem.capacity_bytes), "err": f"{mem.error_bar_pct:.0f}"}
    if not mem.fits:
        return Verdict("bad", N_("Does not fit"), _("Needs %(used)s: %(over)s over.") % {
            "used": used, "over": gib(-mem.headroom_bytes)})
    if mem.fit_verdict == "at_risk":
        return Verdict("tight", N_("At risk"), _("Uses %(used)s; the caching allocator's reserved peak, %(reserved)s "
                                                 "(± %(err)s%%), leaves no headroom outside the error bar: it may run "
                                                 "out of memory in a later step.") % {
            "used": used, "reserved": gib(mem.reserved_peak_bytes), "err": f"{mem.reserved_error_bar_pct:.1f}"})
    if mem.headroom_bytes < margin:
        return Verdict("tight", N_("Fits, tight"), _("Uses %(used)s; the %(headroom)s headroom is inside the error "
                                                      "bar.") % {"used": used, "headroom": gib(mem.headroom_bytes)})
    return Verdict("ok", N_("Fits"), _("Uses %(used)s, leaving %(headroom)s headroom.") % {
        "used": used, "headroom": gib(mem.headroom_bytes)})


def _dom_id(name: str) -> str:
    return "f-" + name.replace(".", "-").replace("_", "-")


def form_context(catalog: Catalog, values: dict[str, Any], errors: FormErrors) -> dict[str, Any]:
    specs = field_specs()
    advanced = [s for s in specs if s.name not in BASIC_FIELDS]
    models, values = model_field(backend.model_options(), server_gpu(catalog, values))
    return {
        "values": values,
        "errors": errors.messages,
        "models": models,
        "gpus": backend.gpu_options(catalog),
        "servers": backend.server_options(catalog),
        "specs_by_name": {s.name: s for s in specs},
        "advanced_specs": advanced,
        "advanced_open": any(s.name in errors.messages for s in advanced)
        or any(values.get(s.name) not in (s.default, None) for s in advanced),
        "labels": {"model": N_("Model"), "model_json": "config.json", **{s.name: s.label for s in specs}},
        "dom_ids": {"model": "f-model", "model_json": "f-model-json", **{s.name: s.dom_id for s in specs}},
        "all_fields": [("model", "f-model"), ("model_json", "f-model-json"), ("form", "form")]
        + [(s.name, s.dom_id) for s in specs],
    }


def _field_of(exc: EstimatorError, values: dict[str, Any]) -> str:
    name = exc.field or "form"
    if name.startswith("model"):
        return "model_json" if values.get("model_json") else "model"
    parts = name.split(".")
    known = {s.name for s in field_specs()}
    return ".".join(parts[:2]) if ".".join(parts[:2]) in known else "form"


def cluster_url(request: EstimateRequest, result: EstimateResponse) -> str | None:
    """``/cluster`` for this estimate's server and node count (and its preset, TP, PP and tokens for the scaling
    curve); ``None`` without a catalog server."""
    if not result.layout.server:
        return None
    params = {"server": result.layout.server, "nodes": str(request.hardware.num_nodes),
              "model": request.model if isinstance(request.model, str) else "", "tp": str(result.layout.tp),
              "pp": str(result.layout.pp)}
    if request.training.train_tokens:
        params["train_tokens"] = f"{request.training.train_tokens:g}"
    return "/cluster?" + urlencode(params)


def fabric_links(request: EstimateRequest, result: EstimateResponse) -> dict[str, str]:
    """The estimate's fabric on ``/cluster`` (same server, nodes, fabric and oversubscription: the same figures, with
    the topology drawn and the scaling curve) and on ``/tco`` (this fabric's cost per node as the networking
    assumption, as ``/cluster``'s own TCO link does); empty without a designed fabric."""
    fabric = result.fabric
    if fabric is None:
        return {}
    c = fabric.request
    cluster = {"server": c.server, "nodes": str(c.num_nodes), "fabric": c.fabric,
               "oversubscription": f"{c.oversubscription:g}"}
    if isinstance(request.model, str):
        cluster |= {"model": request.model, "tp": str(result.layout.tp), "pp": str(result.layout.pp)}
        if request.training.train_tokens:
            cluster["train_tokens"] = f"{request.training.train_tokens:g}"
    else:
        cluster["model"] = ""
    tco = tco_query(c.server, c.num_nodes, c.fabric, c.oversubscription, c.ufm, fabric.cost.fabric_usd_per_node,
                    fabric.design.link_gbit)
    return {"cluster": "/cluster?" + urlencode(cluster), "tco": "/tco?" + urlencode(tco)}


def estimate_context(catalog: Catalog, request: EstimateRequest, result: EstimateResponse) -> dict[str, Any]:
    """Everything ``_result.html`` shows for one result (also used for saved quotes)."""
    query = request_to_query(request)
    gpu_label = backend.gpu_name(catalog, result.layout.gpu)
    figs = {"memory": figure_json(memory_figure([(gpu_label, result.memory)]))}
    if result.time is not None:
        figs["step_time"] = figure_json(step_time_figure(result.time))
    return {
        "result": result,
        "query": query,
        "share_url": f"/estimate?{query}",
        "compare_url": f"/compare?{query}",
        "serve_url": f"/serve?{serve_query(request.model, result.layout.gpu, result.layout.server, query, catalog)}",
        "cluster_url": cluster_url(request, result),
        "fabric_links": fabric_links(request, result),
        "verdict": verdict_of(result),
        "gpu_label": gpu_label,
        "server_label": backend.server_name(catalog, result.layout.server),
        "figs": figs,
        "colors": MEMORY_COLORS,
        "memory_rows": [(k, MEMORY_LABELS[k], v) for k, v in memory_parts(result.memory)],
        "cost": cost_to_train(catalog, result),
        "cost_result": result.cost,
        "ways_out": _ways_out(request, result),
        "fit_ways": _fit_ways(request, result),
        "global_batch": _global_batch(request),
        "batch_parts": f"{request.training.micro_batch_size} × {request.training.gradient_accumulation_steps} × "
                       f"dp {result.layout.dp}",
        "ways_cost": _ways_cost(catalog, request, result),
        "node": node_panel(catalog, request, result),
        "can_save": True,
    }


def _global_batch(request: EstimateRequest) -> int:
    from app.web.layout_suggestion import global_batch

    return global_batch(request)


def _ways_out(request: EstimateRequest, result: EstimateResponse) -> list[tuple[Any, str, str]]:
    """Each suggestion of a result that does not fit, with the link to its estimate and its whole recipe in the
    words of the suggested-layout card (framework included), so one recipe reads the same in both places."""
    from app.web.layout_suggestion import layout_words

    out = []
    for s in result.suggestions:
        changed = apply_changes(request, s.changes)
        out.append((s, f"/estimate?{request_to_query(changed)}", layout_words(changed)))
    return out


def _fit_ways(request: EstimateRequest, result: EstimateResponse) -> list[tuple[Any, str]]:
    """Each allocator / loss suggestion of a result at risk or not fitting, with the link to its estimate."""
    return [(s, f"/estimate?{request_to_query(apply_changes(request, s.changes))}") for s in result.fit_suggestions]


#: suggestions re-estimated for their cost (the page shows no cost for a setup that does not fit, but theirs)
MAX_PRICED_WAYS = 4


def _ways_cost(catalog: Catalog, request: EstimateRequest, result: EstimateResponse) -> dict[int, Any]:
    """The cost to train of each suggestion that fits (index -> Cost), on the request's cost basis."""
    out: dict[int, Any] = {}
    for i, s in enumerate(result.suggestions):
        if not s.fits or len(out) >= MAX_PRICED_WAYS:
            continue
        try:
            out[i] = cost_to_train(catalog, backend.run_estimate(apply_changes(request, s.changes), catalog))
        except EstimatorError:
            continue
    return out


def run_form(catalog: Catalog, params: Any) -> tuple[dict[str, Any], FormErrors]:
    """Parse the form and run the estimate: the page's context, and the errors per field."""
    form = parse_form(params)
    context: dict[str, Any] = {"result": None, "inputs": form.request}
    if form.request is not None:
        from app.web.layout_suggestion import global_batch

        context["global_batch"] = global_batch(form.request)
        try:
            result = backend.run_estimate(form.request, catalog)
        except EstimatorError as exc:
            form.errors.add(_field_of(exc, form.values), exc.message)
        else:
            context = {**estimate_context(catalog, form.request, result), "inputs": form.request,
                       "global_batch": context["global_batch"]}
    return {**form_context(catalog, form.values, form.errors), **context}, form.errors


@router.get("/", response_class=HTMLResponse, name="home")
def home(request: Request, catalog: CatalogDep) -> HTMLResponse:
    form = parse_form({})
    context = {**form_context(catalog, form.values, FormErrors()), "result": None, "charts": True, "active": "home"}
    return render(request, "estimate.html", context)


@router.get("/estimate", response_class=HTMLResponse, name="estimate_page")
def estimate_page(request: Request, catalog: CatalogDep, session: SessionDep) -> HTMLResponse:
    """The whole page, or (for htmx) the result fragment plus out-of-band field errors; a stored measurement of
    the same request is shown beside the prediction ("measured on your hardware", issue 31)."""
    context, errors = run_form(catalog, request.query_params)
    if context.get("result") is not None and context.get("inputs") is not None:
        gpu = catalog.gpus.get(context["result"].layout.gpu)
        context.update(measured=measured_beside(session, context["inputs"], context["result"],
                                                gpu.name if gpu is not None else None),
                       measured_kinds=KIND_LABELS)
    context.update(charts=True, active="home")
    headers = {"HX-Push-Url": context["share_url"]} if "share_url" in context else {}
    if is_htmx(request):
        return render(request, "_result.html", {**context, "oob": True}, **headers)
    return render(request, "estimate.html", context, status_code=422 if errors else 200)
