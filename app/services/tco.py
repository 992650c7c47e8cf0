"""Total cost of ownership for the API (and any page that wants the same answer): the estimator's TCO model on
the effective catalog, plus the cost per run of an optional training job."""

from __future__ import annotations

from typing import Any

from app.catalog_kinds import source_items
from app.schemas.tco import TcoRequest, TcoResponse
from app.services.estimates import prefix_error
from estimator import (
    EstimateRequest,
    EstimateResponse,
    EstimatorError,
    InvalidRequestError,
    UnknownHardwareError,
    estimate,
)
from estimator.tco import JobCost, assumption_table, compare_job, own_vs_cloud, tco_options

__all__ = ["compute_tco", "job_cost"]

#: estimator.tco field names -> request fields
_FIELDS = {"server_id": "server", "offer_id": "offer_id", "gpus_per_node": "job.hardware.gpus_per_node"}


def _on_server(job: EstimateRequest, body: TcoRequest, catalog: Any) -> EstimateRequest:
    server = source_items(catalog, "server").get(body.server)
    gpu = str(server.gpu_id) if server is not None else job.hardware.gpu
    hardware = job.hardware.model_copy(update={"server": body.server, "gpu": gpu, "num_nodes": body.num_nodes})
    return job.model_copy(update={"hardware": hardware})


def job_cost(body: TcoRequest, catalog: Any) -> tuple[JobCost, EstimateResponse] | None:
    """The job of ``body`` estimated on its server and node count, as a :class:`JobCost`."""
    if body.job is None:
        return None
    request = _on_server(body.job, body, catalog)
    try:
        result = estimate(request, catalog)
    except EstimatorError as exc:
        raise prefix_error(exc, "job") from exc
    tokens = request.training.train_tokens
    if not tokens:
        raise InvalidRequestError("set training.train_tokens to cost a run", "job.training.train_tokens")
    if result.train is None:
        raise InvalidRequestError("the estimate has no time to train for this job", "job")
    job = JobCost(gpu_id=result.layout.gpu, server_id=body.server, num_nodes=body.num_nodes,
                  gpus_per_node=request.hardware.gpus_per_node, time_to_train_s=result.train.time_to_train_s,
                  train_tokens=tokens, energy_kwh=result.train.energy_kwh or None,
                  server_price_usd=body.server_price_usd)
    return job, result


def _check_offer(body: TcoRequest, catalog: Any) -> None:
    if body.offer_id is not None and body.offer_id not in source_items(catalog, "cloud_offer"):
        raise UnknownHardwareError(f"unknown cloud offer {body.offer_id!r}; GET /api/v1/catalog/cloud-offers "
                                   "lists them", "offer_id")


def compute_tco(body: TcoRequest, catalog: Any) -> TcoResponse:
    a, price = body.assumptions, body.server_price_usd
    _check_offer(body, catalog)
    try:
        options = tco_options(body.server, body.num_nodes, a, catalog, price)
        versus = own_vs_cloud(body.server, body.num_nodes, body.offer_id, a, catalog, price)
        costed = job_cost(body, catalog)
        runs = compare_job(costed[0], a, catalog) if costed else []
    except EstimatorError as exc:
        field = exc.field if exc.field and exc.field.startswith("job") else _FIELDS.get(exc.field or "", exc.field)
        raise type(exc)(exc.message, field) from exc
    return TcoResponse(server=body.server, num_nodes=body.num_nodes, options=options, own_vs_cloud=versus,
                       assumptions=assumption_table(a, catalog), job=costed[0] if costed else None, runs=runs,
                       estimate=costed[1] if costed else None)
