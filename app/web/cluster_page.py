"""``GET /cluster``: from one node to a cluster. The compute fabric for N nodes of a server (drawn as SVG, with its
parts list, power, racks, cost and TCO), the scaling curve of a job over it, and ``POST /cluster/nccl``: pasted or
uploaded nccl-tests output judged against the published bus bandwidth.

Query parameters: ``server``, ``nodes``, ``fabric``, ``oversubscription``, ``switch_ports``, and the job's ``model``
(a preset), ``tp``, ``pp``, ``train_tokens`` (empty ``model``: no curve). The URL reproduces the page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from pydantic import ValidationError

from app.charts.cluster import scaling_figure
from app.charts.style import figure_json
from app.deps import CatalogDep
from app.schemas.clusters import NCCL_TEXT_MAX, NcclCheckRequest
from app.services.clusters import compute_cluster, run_nccl_check
from app.web.forms import plain_message
from app.web.templating import render
from estimator import list_presets
from estimator.cluster import FABRIC_CHOICES, ClusterRequest
from estimator.cluster.design import PROFILES
from estimator.errors import EstimatorError
from estimator.tco.network import tco_query

__all__ = ["router"]

router = APIRouter()

DEFAULTS = {"server": "nvidia-dgx-h100", "nodes": "16", "fabric": "ib-ndr", "oversubscription": "1",
            "switch_ports": "", "model": "llama-3.1-70b", "tp": "8", "pp": "1", "train_tokens": "1e11"}
_REQUEST_FIELDS = {"server": "server", "num_nodes": "nodes", "fabric": "fabric", "oversubscription": "oversubscription",
                   "switch_ports": "switch_ports"}


def _number(values: dict[str, str], name: str, errors: dict[str, str], cast: type = int) -> Any:
    raw = values[name].strip().replace(",", "")
    if not raw:
        return None
    try:
        return cast(float(raw)) if cast is int and "e" in raw.lower() else cast(raw)
    except ValueError:
        errors[name] = "a number, please"
        return None


def _job(values: dict[str, str], errors: dict[str, str]) -> dict[str, Any] | None:
    if not values["model"]:
        return None
    tokens = _number(values, "train_tokens", errors, float)
    return {"model": values["model"],
            "training": {"train_tokens": tokens, "gradient_accumulation_steps": 8,
                         "activation_checkpointing": "full"},
            "parallelism": {"tp": _number(values, "tp", errors) or 1, "pp": _number(values, "pp", errors) or 1,
                            "sharding": "zero1", "framework": "megatron"}}


def _field(loc: tuple[Any, ...]) -> str:
    head = str(loc[0]) if loc else "nodes"
    if head == "job":
        return "model"
    return _REQUEST_FIELDS.get(head, head)


def _design(values: dict[str, str], catalog: Any) -> tuple[Any, dict[str, str]]:
    errors: dict[str, str] = {}
    body = {"server": values["server"], "num_nodes": _number(values, "nodes", errors),
            "fabric": values["fabric"], "oversubscription": _number(values, "oversubscription", errors, float) or 1.0,
            "switch_ports": _number(values, "switch_ports", errors), "job": _job(values, errors)}
    if errors:
        return None, errors
    try:
        req = ClusterRequest.model_validate(body)
    except ValidationError as exc:
        for err in exc.errors():
            errors.setdefault(_field(tuple(err.get("loc", ()))), plain_message(err))
        return None, errors
    try:
        return compute_cluster(req, catalog), errors
    except EstimatorError as exc:
        errors[_field(tuple((exc.field or "nodes").split(".")))] = exc.message
        return None, errors


def _context(request: Request, catalog: Any, values: dict[str, str]) -> tuple[dict[str, Any], bool]:
    result, errors = _design(values, catalog)
    fig = None
    if result is not None and result.scaling:
        fig = figure_json(scaling_figure(result.scaling, result.request.scaling_threshold))
    servers = sorted((s for s in catalog.servers.values() if any(n.purpose == "gpu-fabric" for n in s.nics)),
                     key=lambda s: s.id)
    tco_link = None
    if result is not None:  # the TCO page designing this fabric (or with its cost per node when /tco would not)
        r = result.request
        tco_link = urlencode(tco_query(r.server, r.num_nodes, r.fabric, r.oversubscription, r.ufm,
                                       result.cost.fabric_usd_per_node, result.design.link_gbit))
    # the drawing is built by app.charts.topology, every text in it escaped
    svg = Markup(result.svg) if result is not None else None
    context = {
        "active": "cluster", "values": values, "errors": errors, "result": result, "fig": fig,
        "charts": fig is not None, "svg": svg, "tco_query": tco_link,
        "servers": servers, "fabrics": [(f, PROFILES[f].name) for f in FABRIC_CHOICES],
        "presets": list_presets(), "nccl": None, "nccl_errors": {}, "nccl_values": {"text": "", "nodes": "",
                                                                                    "collective": ""},
        "nccl_max": NCCL_TEXT_MAX,
    }
    return context, bool(errors)


@router.get("/cluster", response_class=HTMLResponse, name="cluster_page")
def cluster_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    params = request.query_params
    values = {k: params.get(k, v) if k in params else v for k, v in DEFAULTS.items()}
    context, bad = _context(request, catalog, values)
    return render(request, "cluster.html", context, status_code=422 if bad else 200)


@router.post("/cluster/nccl", response_class=HTMLResponse, name="cluster_nccl")
async def cluster_nccl(request: Request, catalog: CatalogDep) -> HTMLResponse:
    form = await request.form()
    values = {k: str(form.get(k) or v) for k, v in DEFAULTS.items()}
    text = str(form.get("text") or "")
    upload = form.get("file")
    if upload is not None and hasattr(upload, "read"):
        raw = await upload.read(NCCL_TEXT_MAX + 1)
        if raw:
            text = raw.decode("utf-8", errors="replace")
    nccl_values = {"text": text[:NCCL_TEXT_MAX], "nodes": str(form.get("nccl_nodes") or ""),
                   "collective": str(form.get("collective") or "")}
    context, bad = _context(request, catalog, values)
    nccl_errors: dict[str, str] = {}
    nodes = _number({"n": nccl_values["nodes"]}, "n", nccl_errors)
    try:
        check = NcclCheckRequest(server=values["server"], text=text or " ", nodes=nodes,
                                 collective=nccl_values["collective"] or None)
        context["nccl"] = run_nccl_check(check, catalog)
    except ValidationError as exc:
        nccl_errors["text"] = plain_message(exc.errors()[0])
    except EstimatorError as exc:
        nccl_errors["nodes" if exc.field == "nodes" else "text"] = exc.message
    context["nccl_errors"] = nccl_errors
    context["nccl_values"] = nccl_values
    status = 422 if (bad or nccl_errors) else 200
    return render(request, "cluster.html", context, status_code=status)
