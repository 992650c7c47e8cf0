"""``GET /tco``: owning servers versus renting cloud GPUs, with every assumption editable on the page.

Query parameters: ``server``, ``nodes``, ``server_price_usd``, ``offer`` and one ``a.<name>`` per field of
:class:`estimator.tco.TcoAssumptions` (empty means the catalog default). Job fields of the estimate form
(``model``, ``training.*`` ...) add the job's cost per run on each option when the estimate has a time to train.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from app.charts.style import figure_json
from app.charts.tco import cost_vs_time_figure, cumulative_cost_figure, tco_stacked_bar_figure
from app.deps import CatalogDep
from app.web import backend
from app.web.forms import SECTIONS, parse_form, plain_message, request_to_query
from app.web.templating import is_htmx, render
from estimator import EstimateRequest, EstimatorError
from estimator.tco import JobCost, TcoAssumptions, assumption_table, compare_job, own_vs_cloud, tco_options

__all__ = ["router"]

router = APIRouter()

_PREFIX = "a."
_JOB_KEYS = ("model", "model_json")


@dataclass
class TcoForm:
    server: str
    nodes: str
    server_price_usd: str
    offer: str
    assumptions: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)


def _choices(name: str) -> tuple[str, ...]:
    return tuple(get_args(TcoAssumptions.model_fields[name].annotation))


def _read(params: Any, catalog: Any, job: EstimateRequest | None) -> TcoForm:
    default_server = (job.hardware.server if job is not None else None) or _default_server(catalog)
    return TcoForm(
        server=params.get("server") or default_server,
        nodes=params.get("nodes") or (str(job.hardware.num_nodes) if job is not None else "1"),
        server_price_usd=(params.get("server_price_usd") or "").strip(),
        offer=params.get("offer") or "",
        assumptions={n: (params.get(_PREFIX + n) or "").strip() for n in TcoAssumptions.model_fields},
    )


def _default_server(catalog: Any) -> str:
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


def _number(form: TcoForm, name: str, raw: str, minimum: float) -> float | None:
    if raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        form.errors[name] = "Enter a number"
        return None
    if value < minimum:
        form.errors[name] = f"Must be at least {minimum:g}"
        return None
    return value


_TCO_FIELDS = {"server_id": "server", "offer_id": "offer", "gpus_per_node": "server"}


def _error_field(exc: EstimatorError) -> str:
    return _TCO_FIELDS.get(exc.field or "", exc.field or "form")


def _job_cost(
    catalog: Any, job: EstimateRequest | None, form: TcoForm, nodes: int, price: float | None
) -> tuple[JobCost | None, str | None]:
    """The job on the chosen server, when the estimate gives a time to train; else why not."""
    if job is None:
        return None, None
    request = job.model_copy(update={"hardware": job.hardware.model_copy(
        update={"server": form.server, "num_nodes": nodes, "gpu": catalog.servers[form.server].gpu_id})})
    try:
        result = backend.run_estimate(request, catalog)
    except EstimatorError as exc:
        return None, exc.message
    if result.train is None or not job.training.train_tokens:
        return None, "the estimate has no time to train (set Tokens to train on, and a time model is needed)"
    return JobCost(gpu_id=result.layout.gpu, server_id=form.server, num_nodes=nodes,
                   gpus_per_node=job.hardware.gpus_per_node, time_to_train_s=result.train.time_to_train_s,
                   train_tokens=job.training.train_tokens, energy_kwh=result.train.energy_kwh or None,
                   server_price_usd=price), None


def _compute(catalog: Any, form: TcoForm, job: EstimateRequest | None) -> dict[str, Any]:
    assumptions = _assumptions(form)
    nodes = _number(form, "nodes", form.nodes, 1)
    price = _number(form, "server_price_usd", form.server_price_usd, 0.01)
    if form.server not in catalog.servers:
        form.errors["server"] = f"unknown server {form.server!r}"
    elif form.offer and form.offer not in {o.value for o in _offers(catalog, form.server)}:
        form.errors["offer"] = f"no cloud offer {form.offer!r} for this server's GPU"
    if form.errors or assumptions is None:
        return {}
    n = int(nodes or 1)
    try:
        options = tco_options(form.server, n, assumptions, catalog, price)
        versus = own_vs_cloud(form.server, n, form.offer or None, assumptions, catalog, price)
        job_cost, job_note = _job_cost(catalog, job, form, n, price)
        runs = compare_job(job_cost, assumptions, catalog) if job_cost is not None else []
    except EstimatorError as exc:
        form.errors[_error_field(exc)] = exc.message
        return {}
    figs = {
        "tco": figure_json(tco_stacked_bar_figure(options)),
        "cumulative": figure_json(cumulative_cost_figure(versus.cumulative, "Own", f"Cloud ({versus.offer_id})")),
    }
    if runs:
        figs["runs"] = figure_json(cost_vs_time_figure(runs, "This job: cost per run vs time to train"))
    return {"options": options, "versus": versus, "runs": runs, "job_note": job_note, "figs": figs,
            "rows": assumption_table(assumptions, catalog), "nodes_int": n}


def _share_url(form: TcoForm, job: EstimateRequest | None) -> str:
    pairs = [("server", form.server), ("nodes", form.nodes)]
    pairs += [(k, v) for k, v in (("server_price_usd", form.server_price_usd), ("offer", form.offer)) if v]
    pairs += [(_PREFIX + k, v) for k, v in form.assumptions.items() if v]
    query = urlencode(pairs)
    return f"/tco?{query}&{request_to_query(job)}" if job is not None else f"/tco?{query}"


def _job_of(params: Any) -> tuple[EstimateRequest | None, dict[str, str]]:
    has_job = any(k in params for k in _JOB_KEYS) or any(k.split(".")[0] in SECTIONS for k in params)
    if not has_job:
        return None, {}
    parsed = parse_form(params)
    return parsed.request, parsed.errors.messages


def _offers(catalog: Any, server_id: str) -> list[backend.Option]:
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
        "server": "Server", "nodes": "Servers (nodes)", "server_price_usd": "Server price", "offer": "Cloud offer",
        **{_PREFIX + r.name: r.description for r in context["defaults"].values()},
    }
    ok = not context["errors"]
    if is_htmx(request):
        return render(request, "_tco_results.html", {**context, "oob": True},
                      **({"HX-Push-Url": context["share_url"]} if ok else {}))
    return render(request, "tco.html", context, status_code=200 if ok else 422)
