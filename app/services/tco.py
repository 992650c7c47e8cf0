"""Total cost of ownership for the API and the TCO page: the estimator's TCO model on the effective catalog, the
cost per run of an optional training job, rack planning, and the upgrade answer ("A100 -> H100?")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.catalog_kinds import source_items
from app.schemas.tco import (
    TcoRack,
    TcoRequest,
    TcoResponse,
    UpgradeHorizon,
    UpgradeRequest,
    UpgradeResponse,
    UpgradeSide,
    UpgradeSideResult,
)
from app.services.estimates import prefix_error
from estimator import (
    EstimateRequest,
    EstimateResponse,
    EstimatorError,
    InvalidRequestError,
    UnknownHardwareError,
    estimate,
)
from estimator.facility.rack import btu_per_hour, node_power_at_load_w, plan_rack_for_server, racks_needed
from estimator.messages import Num, Text
from estimator.tco import (
    MAX_TIME_TO_TRAIN_S,
    JobCost,
    TcoAssumptions,
    UpgradeAnswer,
    assumption_table,
    compare_job,
    compare_upgrade,
    own_vs_cloud_or_note,
    ownership_tco,
    resolve_server,
    tco_options,
)

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["compute_tco", "compute_upgrade", "job_cost", "job_on_server", "rack_for"]

#: estimator.tco field names -> request fields
_FIELDS = {"server_id": "server", "offer_id": "offer_id", "gpus_per_node": "job.hardware.gpus_per_node"}


def _on_server(job: EstimateRequest, server_id: str, num_nodes: int, catalog: Catalog, whole: bool = False
               ) -> EstimateRequest:
    server = source_items(catalog, "server").get(server_id)
    gpu = str(server.gpu_id) if server is not None else job.hardware.gpu
    update: dict[str, Any] = {"server": server_id, "gpu": gpu, "num_nodes": num_nodes}
    if whole and server is not None:
        update["gpus_per_node"] = int(server.gpu_count)
    hardware = job.hardware.model_copy(update=update)
    return job.model_copy(update={"hardware": hardware})


def _tokens_per_step(result: EstimateResponse) -> float:
    t = result.time
    return t.tokens_per_s * t.step_time_s if t is not None else 0.0


def job_on_server(
    job: EstimateRequest, server_id: str, num_nodes: int, price: float | None, catalog: Catalog, prefix: str = "job",
    whole: bool = False,
) -> tuple[JobCost, EstimateResponse]:
    """``job`` estimated on ``num_nodes`` of ``server_id``, as a :class:`JobCost`. Errors name ``prefix.<field>``.
    ``whole``: on every GPU of each server (the upgrade and the cross-server chart compare whole servers).

    A run trains on at least one optimizer step's tokens (fewer would price a full step as a few tokens), and
    at most :data:`~estimator.tco.MAX_TIME_TO_TRAIN_S` long (past it the run is no cost a TCO can answer): both
    are a 422 naming ``<prefix>.training.train_tokens``, never a :class:`JobCost` that fails its own bounds.
    """
    request = _on_server(job, server_id, num_nodes, catalog, whole)
    try:
        result = estimate(request, catalog)
    except EstimatorError as exc:
        raise prefix_error(exc, prefix) from exc
    tokens = request.training.train_tokens
    if not tokens:
        raise InvalidRequestError("set training.train_tokens to cost a run", f"{prefix}.training.train_tokens")
    if result.train is None or result.train.time_to_train_s <= 0:
        raise InvalidRequestError("the estimate has no time to train for this job", prefix)
    step = _tokens_per_step(result)
    if tokens < max(step, 1.0):
        raise InvalidRequestError(f"train_tokens ({tokens:g}) is less than one optimizer step ({step:,.0f} tokens)",
                                  f"{prefix}.training.train_tokens")
    seconds = result.train.time_to_train_s
    if seconds > MAX_TIME_TO_TRAIN_S:
        raise InvalidRequestError(
            f"{tokens:g} tokens would take {seconds / 3.15576e7:,.0f} years on {num_nodes} x {server_id}; the TCO "
            f"costs runs of at most {MAX_TIME_TO_TRAIN_S / 3.15576e7:,.0f} years: train fewer tokens or use more nodes",
            f"{prefix}.training.train_tokens")
    return JobCost(gpu_id=result.layout.gpu, server_id=server_id, num_nodes=num_nodes,
                   gpus_per_node=request.hardware.gpus_per_node, time_to_train_s=result.train.time_to_train_s,
                   train_tokens=tokens, energy_kwh=result.train.energy_kwh or None, server_price_usd=price), result


def job_cost(body: TcoRequest, catalog: Catalog) -> tuple[JobCost, EstimateResponse] | None:
    """The job of ``body`` estimated on its server and node count, as a :class:`JobCost`."""
    if body.job is None:
        return None
    return job_on_server(body.job, body.server, body.num_nodes, body.server_price_usd, catalog)


def _check_offer(body: TcoRequest, catalog: Catalog) -> None:
    if body.offer_id is not None and body.offer_id not in source_items(catalog, "cloud_offer"):
        raise UnknownHardwareError(f"unknown cloud offer {body.offer_id!r}; GET /api/v1/catalog/cloud-offers "
                                   "lists them", "offer_id")


def rack_for(server_id: str, num_nodes: int, a: TcoAssumptions, catalog: Catalog) -> TcoRack:
    """Rack planning of ``num_nodes`` servers in racks of ``a.rack_kw`` (estimator.facility.rack, as the estimate's host
    sizing): the plan on the peak power of a node, and its power at load."""
    server, gpu = resolve_server(catalog, server_id)
    plan = plan_rack_for_server(server_id, a.rack_kw, assumptions=a, catalog=catalog)
    load_w = node_power_at_load_w(gpu, server.gpu_count, a.server_non_gpu_power_w, server)
    return TcoRack(plan=plan, kw_per_node_at_load=load_w / 1000, btu_per_hour_per_node_at_load=btu_per_hour(load_w),
                   racks_needed=racks_needed(num_nodes, plan) if plan.nodes_per_rack else None)


def _refield(exc: EstimatorError) -> EstimatorError:
    field = exc.field if exc.field and exc.field.startswith("job") else _FIELDS.get(exc.field or "", exc.field)
    return type(exc)(exc.message, field)


def compute_tco(body: TcoRequest, catalog: Catalog) -> TcoResponse:
    a, price = body.assumptions, body.server_price_usd
    _check_offer(body, catalog)
    notes: list[str] = []
    try:
        own = ownership_tco(body.server, body.num_nodes, a, catalog, server_price_usd=price)
        options = tco_options(own, a, catalog)
        versus, note = own_vs_cloud_or_note(own, body.offer_id, a, catalog)
        rack = rack_for(body.server, body.num_nodes, a, catalog)
        costed = job_cost(body, catalog)
        runs = compare_job(costed[0], a, catalog) if costed else []
    except EstimatorError as exc:
        raise _refield(exc) from exc
    notes += [note] if note else []
    if rack.plan.nodes_per_rack == 0:
        notes.append(Text("One node (%(kw)s kW) does not fit a %(rack)s kW rack.",
                          kw=Num(rack.plan.kw_per_node, ",.1f"), rack=Num(a.rack_kw, "g")))
    return TcoResponse(server=body.server, num_nodes=body.num_nodes, catalog_version=str(catalog.version),
                       options=options, own_vs_cloud=versus, rack=rack, assumptions=assumption_table(a, catalog),
                       job=costed[0] if costed else None, runs=runs, estimate=costed[1] if costed else None,
                       notes=notes)


# ------------------------------------------------------------------------------------------------ upgrade


def _side_field(exc: EstimatorError, name: str) -> str:
    """Errors of one side name that side's field (``current.server``); job errors keep their ``job.`` path."""
    field = exc.field or ""
    if field.startswith("job"):
        return field
    side = {"server_id": "server", "server_price_usd": "server_price_usd", "num_nodes": "num_nodes"}.get(field)
    return f"{name}.{side}" if side else f"{name}.server"


def _side(body: UpgradeRequest, side: UpgradeSide, name: str, catalog: Catalog
          ) -> tuple[JobCost, UpgradeSideResult]:
    """One side's job (estimated on its servers) and its summary; errors name ``current.*`` / ``candidate.*``."""
    a = body.assumptions
    try:
        resolve_server(catalog, side.server)
        job, result = job_on_server(body.job, side.server, side.num_nodes, side.server_price_usd, catalog, whole=True)
        own = ownership_tco(job.server_id, job.num_nodes, a, catalog, job.gpus_per_node, job.server_price_usd)
    except EstimatorError as exc:
        raise type(exc)(exc.message, _side_field(exc, name)) from exc
    return job, UpgradeSideResult(
        server=job.server_id, server_name=own.server_name, gpu=job.gpu_id, num_nodes=job.num_nodes,
        num_gpus=job.num_gpus, fits=result.memory.fits, time_to_train_s=job.time_to_train_s,
        server_price_usd=own.server_price_usd, server_price_estimated=own.server_price_estimated,
        server_price_source=own.server_price_source)


def _notes(current: UpgradeSideResult, candidate: UpgradeSideResult, answer: UpgradeAnswer) -> list[str]:
    notes: list[str] = [Text("The job does not fit the GPU memory of %(server)s; its time is that of a layout that "
                             "does not run.", server=side.server_name)
                        for side in (current, candidate) if not side.fits]
    notes += [Text("%(server)s has no catalog price: %(source)s.", server=side.server_name,
                   source=side.server_price_source) for side in (current, candidate) if side.server_price_estimated]
    if answer.break_even_runs and not answer.pays_back_within_life:
        notes.append(Text("Buying the candidate does not pay back within the %(life)s-year life.",
                          life=Num(answer.life_years, "g")))
    return notes


def compute_upgrade(body: UpgradeRequest, catalog: Catalog) -> UpgradeResponse:
    """The upgrade answer for one job: the job estimated on both sides, then :func:`estimator.tco.compare_upgrade`."""
    a = body.assumptions
    job_a, current = _side(body, body.current, "current", catalog)
    job_b, candidate = _side(body, body.candidate, "candidate", catalog)
    try:
        answer = compare_upgrade(job_a, job_b, a, catalog)
    except EstimatorError as exc:
        raise type(exc)(exc.message, exc.field or "job") from exc
    runs = answer.runs_per_year * a.horizon_years
    horizon = UpgradeHorizon(years=a.horizon_years, runs=runs, time_saved_s=answer.time_saved_s * runs,
                             cost_difference_usd=answer.cost_difference_usd_per_run * runs)
    return UpgradeResponse(catalog_version=str(catalog.version), current=current, candidate=candidate, answer=answer,
                           horizon=horizon, verdict=answer.summary, assumptions=assumption_table(a, catalog),
                           notes=_notes(current, candidate, answer))
