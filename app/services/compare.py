"""One job on several hardware options: build each option's request, estimate, summarise."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.catalog_kinds import source_items
from app.schemas.compare import CompareOption, CompareRequest, CompareResponse, CompareResult, CompareRow
from estimator import EstimateRequest, EstimateResponse, EstimatorError, estimate
from estimator.tco.run_cost import CostChoice

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["common_basis", "compare", "option_request"]


def common_basis(job: EstimateRequest, options: list[CompareOption]) -> CostChoice:
    """Like for like: the job's own ``cost`` choice if it has one, else own when every option is a server and
    rent (one provider class, on-demand) otherwise."""
    if job.cost is not None and job.cost.basis != "auto":
        return job.cost
    base = job.cost or CostChoice()
    basis = "own" if all(o.server is not None for o in options) else "rent"
    return base.model_copy(update={"basis": basis})


def option_request(job: EstimateRequest, option: CompareOption, catalog: Catalog,
                   basis: CostChoice | None = None) -> EstimateRequest:
    """``job`` with its hardware replaced by ``option`` (a server alone brings its GPU), priced on ``basis``."""
    gpu = option.gpu
    if gpu is None and option.server is not None:
        server = source_items(catalog, "server").get(option.server)
        gpu = str(server.gpu_id) if server is not None else job.hardware.gpu
    hardware = job.hardware.model_copy(update={
        "gpu": gpu,
        "server": option.server,
        "num_nodes": option.num_nodes or job.hardware.num_nodes,
        "gpus_per_node": option.gpus_per_node or job.hardware.gpus_per_node,
    })
    update: dict[str, Any] = {"hardware": hardware}
    if basis is not None:
        update["cost"] = basis
    return job.model_copy(update=update)


def _field(exc: EstimatorError, index: int, option: CompareOption) -> str:
    """Point hardware errors at the option that set the field, everything else at the job."""
    field = exc.field or ""
    name = field.removeprefix("hardware.")
    if field.startswith("hardware.") and getattr(option, name, None) is not None:
        return f"options.{index}.{name}"
    return f"request.{field}" if field else f"options.{index}"


def _row(option: CompareOption, request: EstimateRequest, result: EstimateResponse) -> CompareRow:
    m, t, tr = result.memory, result.time, result.train
    return CompareRow(
        label=option.label or request.hardware.server or request.hardware.gpu, gpu=result.layout.gpu,
        server=request.hardware.server, gpus=result.layout.world_size, fits=m.fits, total_bytes=m.total_bytes,
        capacity_bytes=m.capacity_bytes, headroom_bytes=m.headroom_bytes,
        max_micro_batch_size=m.max_micro_batch_size, step_time_s=t.step_time_s if t else None,
        tokens_per_s=t.tokens_per_s if t else None, mfu=t.mfu if t else None,
        time_to_train_s=tr.time_to_train_s if tr else None, gpu_hours=tr.gpu_hours if tr else None,
        cost=result.cost,
    )


def compare(body: CompareRequest, catalog: Catalog) -> CompareResponse:
    results = []
    basis = common_basis(body.request, body.options)
    for i, option in enumerate(body.options):
        request = option_request(body.request, option, catalog, basis)
        try:
            result = estimate(request, catalog)
        except EstimatorError as exc:
            raise type(exc)(exc.message, _field(exc, i, option)) from exc
        results.append(CompareResult(option=option, summary=_row(option, request, result), result=result))
    flags = [f"{r.summary.label}: {r.summary.cost.flags[0]}" for r in results
             if r.summary.cost is not None and r.summary.cost.priced_another_way]
    flags += [f"{r.summary.label}: no price in the catalog, not priced." for r in results if r.summary.cost is None]
    return CompareResponse(results=results, cost_basis=basis, cost_flags=flags)
