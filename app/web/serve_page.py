"""``GET /serve``: the "Serve it" page — serving the trained model on the node: memory per GPU as the engine
allocates it, speed, throughput-latency curve, $ per million tokens. Every field is a query parameter, so
the URL reproduces the result (a training estimate links here with its model and server filled in).
"""

from __future__ import annotations

import json
from typing import Any, get_args
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError
from starlette.datastructures import QueryParams

from app.charts.serving import serving_curve_figure
from app.charts.style import figure_json
from app.deps import CatalogDep
from app.web.forms import plain_message
from app.web.templating import render
from estimator.errors import EstimatorError
from estimator.inference import InferenceRequest, estimate_inference
from estimator.inference.request import Engine, KvCacheDtype, WeightsFormat
from estimator.model.spec import list_presets

__all__ = ["router", "serve_query", "serving_request", "smallest_tp_that_starts"]

router = APIRouter()

#: query parameter -> (section, field) of InferenceRequest
FIELDS: dict[str, tuple[str | None, str]] = {
    "engine": (None, "engine"),
    "gpu": ("hardware", "gpu"),
    "server": ("hardware", "server"),
    "gpus_per_node": ("hardware", "gpus_per_node"),
    "tp": ("serving", "tensor_parallel_size"),
    "pp": ("serving", "pipeline_parallel_size"),
    "weights": ("serving", "weights"),
    "kv_cache_dtype": ("serving", "kv_cache_dtype"),
    "max_model_len": ("serving", "max_model_len"),
    "gpu_memory_utilization": ("serving", "gpu_memory_utilization"),
    "input_tokens": ("workload", "input_tokens"),
    "output_tokens": ("workload", "output_tokens"),
    "concurrency": ("workload", "concurrency"),
    "request_rate_per_s": ("workload", "request_rate_per_s"),
    "ttft_target_s": ("workload", "ttft_target_s"),
    "tpot_target_s": ("workload", "tpot_target_s"),
    "basis": ("cost", "basis"),
}
_PATH_TO_PARAM = {(sec or "", f): p for p, (sec, f) in FIELDS.items()}


def serve_query(model: Any, gpu: str | None, server: str | None, train: str | None = None,
                catalog: Any = None) -> str:
    """The ``/serve`` query string for a model (preset id, or its shape as JSON) on a GPU / server; ``train`` is
    the training estimate's own query, carried so that the Serve page can save both as one quote. With the
    ``catalog``, it opens on the smallest tensor-parallel size that starts (not on one that runs out of memory)."""
    params: dict[str, str] = {}
    tp = smallest_tp_that_starts(model, gpu, server, catalog) if catalog is not None else None
    if isinstance(model, str):
        params["model"] = model
    else:
        params["model_json"] = json.dumps(model.model_dump(mode="json"))
    if gpu:
        params["gpu"] = gpu
    if server:
        params["server"] = server
    if tp is not None and tp > 1:
        params["tp"] = str(tp)
    if train:
        params["train"] = train
    return urlencode(params)


def smallest_tp_that_starts(model: Any, gpu: str | None, server: str | None, catalog: Any) -> int | None:
    """The smallest tensor-parallel size (1, 2, 4, 8, ... up to the node's GPUs) at which the engine starts with
    this model on this GPU / server, by the serving estimator itself; ``None`` when none does (or it errs)."""
    hardware: dict[str, Any] = {k: v for k, v in (("gpu", gpu), ("server", server)) if v}
    if not hardware:
        return None
    spec: Any = model if isinstance(model, str) else model.model_dump(mode="json")
    gpus = 8
    if server and server in getattr(catalog, "servers", {}):
        gpus = int(catalog.servers[server].gpu_count)
    tp = 1
    while tp <= gpus:
        try:
            req = InferenceRequest.model_validate({"model": spec, "hardware": hardware,
                                                   "serving": {"tensor_parallel_size": tp}})
            if estimate_inference(req, catalog).starts:
                return tp
        except (EstimatorError, ValidationError):
            return None
        tp *= 2
    return None


def serving_request(query: str) -> InferenceRequest:
    """The inference request a ``/serve`` query string stands for (the Serve page's own reading of it); raises
    ``ValueError`` with the first problem, named by its form field."""
    errors: dict[str, str] = {}
    body = _payload(QueryParams(query), errors)
    if errors:
        raise ValueError("; ".join(f"{k}: {v}" for k, v in errors.items()))
    try:
        return InferenceRequest.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"{_param_of(tuple(err.get('loc', ())))}: {plain_message(err)}") from None


def _payload(params: Any, errors: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    raw_json = (params.get("model_json") or "").strip()
    if raw_json:
        try:
            body["model"] = json.loads(raw_json)
        except json.JSONDecodeError as exc:
            errors["model_json"] = f"not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
    else:
        body["model"] = params.get("model") or "llama-3.1-8b"
    for name, (section, field) in FIELDS.items():
        value = (params.get(name) or "").strip()
        if value == "":
            continue
        if section is None:
            body[field] = value
        else:
            body.setdefault(section, {})[field] = value
    return body


def _param_of(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] == "model":
        return "model_json" if len(parts) > 1 else "model"
    if len(parts) >= 2 and (parts[0], parts[1]) in _PATH_TO_PARAM:
        return _PATH_TO_PARAM[(parts[0], parts[1])]
    if len(parts) == 1 and ("", parts[0]) in _PATH_TO_PARAM:
        return _PATH_TO_PARAM[("", parts[0])]
    return ".".join(parts) or "form"


@router.get("/serve", response_class=HTMLResponse)
def serve_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    params = request.query_params
    errors: dict[str, str] = {}
    body = _payload(params, errors)
    result = req = None
    if not errors:
        try:
            req = InferenceRequest.model_validate(body)
        except ValidationError as exc:
            for err in exc.errors():
                errors.setdefault(_param_of(tuple(err.get("loc", ()))), plain_message(err))
    if req is not None:
        try:
            result = estimate_inference(req, catalog)
        except EstimatorError as exc:
            field = (exc.field or "form").split(".")
            errors[_param_of(tuple(field))] = exc.message
    values = {k: params.get(k, "") for k in (*FIELDS, "model", "model_json", "train")}
    if not values["model"] and not values["model_json"]:
        values["model"] = "llama-3.1-8b"
    fig = (figure_json(serving_curve_figure(result.speed, req.workload.tpot_target_s))
           if result is not None and result.speed is not None and req is not None else None)
    context = {
        "active": "serve", "charts": fig is not None, "values": values, "errors": errors, "result": result,
        "req": req, "fig": fig,
        "presets": list_presets(),
        "gpus": sorted(catalog.gpus.values(), key=lambda g: g.id),
        "servers": sorted(catalog.servers.values(), key=lambda s: s.id),
        "engines": get_args(Engine), "weights_formats": get_args(WeightsFormat),
        "kv_dtypes": get_args(KvCacheDtype),
        # the training estimate this page was opened from: with it, "Save as quote" saves both lines
        "train_query": values["train"],
        "serve_query": urlencode([(k, v) for k, v in params.multi_items() if k != "train"]),
    }
    return render(request, "serve.html", context, status_code=422 if errors else 200)
