"""The estimator's entry point: one request in, one typed response out."""

from __future__ import annotations

from typing import Final

from estimator.construct import trusted
from estimator.errors import InvalidRequestError, UnknownHardwareError
from estimator.host.bom import bill_of_materials, choose_server
from estimator.host.cluster_fabric import estimate_fabric, with_cost_note, with_fabric_lines
from estimator.host.sizing import host_result
from estimator.job import Job, job_of
from estimator.memo import BoundedMemo
from estimator.messages import N_, Num, Text, join
from estimator.model.spec import ModelShape, shape_for
from estimator.request import DEFAULT_GPU, EstimateRequest
from estimator.response import (
    ESTIMATOR_VERSION,
    EstimateResponse,
    HostResult,
    LayoutSummary,
    MemoryBreakdown,
    MemoryResult,
    ModelSummary,
    TimeResult,
    TrainResult,
)
from estimator.rules.stacks import (
    MECHANISM_OPTIMIZERS,
    liger_warnings,
    mechanism_notes,
    memory_mechanism_keys,
    stack_assumptions,
    unmeasured_mechanisms,
)
from estimator.tco.run_cost import CostResult, choose_basis, cost_of_run
from estimator.training.accuracy import UNMEASURED_MEMORY_ERROR_PCT, mechanism_memory_bar_pct, memory_error_bar_pct
from estimator.training.allocator import (
    allocator_assumptions,
    fit_verdict,
    reserved_error_bar_pct,
    verdict_suggestions,
)
from estimator.training.comm import network_warnings
from estimator.training.explain import assumptions_for, warnings_for
from estimator.training.layout import Layout, build_layout
from estimator.training.memory import MemoryPeak, Phase, max_micro_batch, peak_memory
from estimator.training.optimizers import OPTIMIZERS
from estimator.training.params import lora_params_per_layer
from estimator.training.suggest import apply_changes, measure_request, suggestions
from estimator.training.timing import step_time_model, time_assumptions
from estimator.training.train import TrainFigures, train_figures, train_warnings
from hardware_catalog import Catalog, Gpu, Server

__all__ = ["ResolvedHardware", "estimate", "estimate_memory", "resolve_hardware"]

MAX_MICRO_BATCH_SEARCH: Final = 4096


def _default_catalog() -> Catalog:
    from hardware_catalog import load_catalog

    return load_catalog()


class ResolvedHardware:
    """The GPU and (optional) server of a request's ``hardware`` (:class:`estimator.request.Hardware`), looked up
    in the catalog."""

    gpu: Final[Gpu]
    server: Final[Server | None]

    def __init__(self, gpu: Gpu, server: Server | None) -> None:
        self.gpu = gpu
        self.server = server


def resolve_hardware(job: Job, catalog: Catalog) -> ResolvedHardware:
    rv = job
    hw = rv.hardware
    server = None
    if hw.server is not None:
        server = catalog.servers.get(hw.server)
        if server is None:
            raise UnknownHardwareError(f"unknown server {hw.server!r}; GET /api/v1/catalog/servers lists them",
                                       "hardware.server")
        if hw.gpus_per_node > server.gpu_count:
            raise InvalidRequestError(f"{server.name} holds {server.gpu_count} GPUs, not {hw.gpus_per_node}",
                                      "hardware.gpus_per_node")
    gpu_id = server.gpu_id if server is not None and hw.gpu == DEFAULT_GPU and server.gpu_id != hw.gpu else hw.gpu
    gpu = catalog.gpus.get(gpu_id)
    if gpu is None:
        raise UnknownHardwareError(f"unknown GPU {gpu_id!r}; GET /api/v1/catalog/gpus lists them", "hardware.gpu")
    if server is not None and server.gpu_id != gpu.id:
        raise InvalidRequestError(f"{server.name} carries {server.gpu_id}, not {gpu.id}", "hardware.gpu")
    if rv.training.precision == "fp8-mixed" and not gpu.fp8_tflops_dense:
        raise InvalidRequestError(f"{gpu.name} has no fp8 tensor cores; use bf16-mixed", "training.precision")
    return ResolvedHardware(gpu, server)


def _trainable(job: Job, shape: ModelShape) -> int:
    t = job.training
    if t.method == "full":
        return shape.total_params()
    return lora_params_per_layer(shape, t.lora_rank, t.lora_targets) * shape.dims.num_layers


def estimate_memory(job: Job, shape: ModelShape, layout: Layout, capacity: int) -> MemoryPeak:
    return peak_memory(job, shape, layout, capacity)


def _max_micro_batch(job: Job, shape: ModelShape, layout: Layout, capacity: int) -> int:
    """Largest micro-batch whose total fits (:func:`estimator.training.memory.max_micro_batch`); 0 if even 1 does
    not."""
    return max_micro_batch(job, shape, layout, capacity, MAX_MICRO_BATCH_SEARCH)


def _memory_result(job: Job, shape: ModelShape, layout: Layout, capacity: int,
                   peak: MemoryPeak) -> MemoryResult:
    ph = peak.peak
    breakdown = trusted(MemoryBreakdown, parameters=ph.parameters, gradients=ph.gradients,
                                optimizer_states=ph.optimizer_states, activations=ph.activations,
                                logits=ph.logits, temporary=ph.temporary, overhead=peak.overhead)
    bar = job_memory_error_bar_pct(job, layout)
    reserved_bar = reserved_error_bar_pct(job.training.allocator, bar, layout.tp > 1)
    managed = _managed_bytes(job, ph)
    return trusted(MemoryResult, breakdown_bytes=breakdown, peak_allocated_bytes=peak.peak_allocated,
                        total_bytes=peak.total, capacity_bytes=capacity, fits=peak.fits,
                        headroom_bytes=capacity - peak.total,
                        max_micro_batch_size=_max_micro_batch(job, shape, layout, capacity),
                        error_bar_pct=bar,
                        peak_phase=ph.name, busiest_rank=peak.busiest_rank,
                        reserved_peak_bytes=peak.reserved_peak - managed, reserved_error_bar_pct=reserved_bar,
                        fit_verdict=_verdict(peak, bar, reserved_bar), managed_bytes=managed)


def _verdict(peak: MemoryPeak, bar: float, reserved_bar: float) -> str:
    """:func:`estimator.training.allocator.fit_verdict` of a peak."""
    return fit_verdict(peak.fits, peak.capacity, peak.peak_allocated + peak.hard_overhead, bar,
                       peak.reserved_peak + peak.fixed_overhead, reserved_bar)


def _managed_bytes(job: Job, ph: Phase) -> int:
    """The optimizer states a bitsandbytes paged optimizer keeps in CUDA managed memory (``cudaMallocManaged``,
    ``bitsandbytes/functional.py`` ``get_paged``; :mod:`estimator.training.optimizers`): resident on the GPU while
    it is not oversubscribed, so NVML counts them and the allocator's counters do not. Its states under 1e5
    elements stay in the allocator's memory: negligible, counted here too."""
    if not OPTIMIZERS[job.training.optimizer].paged or job.parallelism.offload != "none":
        return 0
    return ph.optimizer_states


def _verdict_of(req: EstimateRequest, shape: ModelShape, capacity: int) -> tuple[int, str]:
    """(reserved peak plus the memory outside the allocator, verdict) of a suggestion's request."""
    job = job_of(req)
    layout = build_layout(job, shape)
    peak = peak_memory(job, shape, layout, capacity)
    bar = job_memory_error_bar_pct(job, layout)
    return (peak.reserved_peak + peak.fixed_overhead,
            _verdict(peak, bar, reserved_error_bar_pct(job.training.allocator, bar, layout.tp > 1)))


_MEASURED_OPTIMIZERS: Final = frozenset(o.id for o in OPTIMIZERS.values() if o.memory_measured)


def job_memory_error_bar_pct(job: Job, layout: Layout) -> float:
    """The memory error bar of this job on this layout (the estimate's, the planner's margin, the verdict's):
    its class's bar (:func:`estimator.training.accuracy.memory_error_bar_pct`), at least the bar of each
    issue-29 mechanism it uses where that mechanism was measured (one GPU), the unmeasured floor otherwise."""
    mech = mechanism_memory_bar_pct(memory_mechanism_keys(job.training)) if layout.world_size == 1 else None
    return memory_error_bar_pct(layout.sharding != "none", job.training.method, _measured_kind(job, layout),
                                layout.tp > 1, mech or 0.0)


def _measured_kind(job: Job, layout: Layout) -> bool:
    """Whether this kind of set-up is among those measured on the H200 (docs/accuracy.md): PyTorch without
    pipeline/context/expert parallelism; DDP, ZeRO-1 (DDP + ``ZeroRedundancyOptimizer``), FSDP2 shard-grad-op
    (``zero2``) or full shard (with its CPU offload of parameters and optimizer); tensor parallelism (DTensor,
    with or without sequence parallelism) for full fine-tuning alone or under FSDP2, not with DDP or ZeRO-1 (the
    "replicated-embeddings" plan alone, without sequence parallelism); full, LoRA or QLoRA (on one GPU);
    AdamW, 8-bit AdamW, SGD or Adafactor; SDPA or eager attention."""
    return not _unmeasured(job, layout)[0]


_UNMEASURED: Final[BoundedMemo[tuple[object, ...], tuple[tuple[str, ...], tuple[str, ...]]]] = BoundedMemo(1024)


def _unmeasured(job: Job, layout: Layout) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(:func:`unmeasured_memory_reasons`, :func:`_unmeasured_memory_line`), memoised on what they read (of the
    layout its degrees, sharding, TP plan and sequence parallelism, and whether it has several data-parallel ranks
    or GPUs: the planner's node counts share one answer)."""
    p, t = job.parallelism, job.training
    key = (t.method, t.optimizer, p.offload, p.framework, layout.pp, layout.cp, layout.ep, layout.tp, layout.dp > 1,
           layout.world_size > 1, layout.sharding, layout.tp_plan, layout.sequence_parallel, t.stack, t.loss_kernel,
           t.fused_kernels, t.activation_offloading)
    return _UNMEASURED.get_or_compute(key, lambda: _unmeasured_uncached(job, layout))


def _unmeasured_uncached(job: Job, layout: Layout) -> tuple[tuple[str, ...], tuple[str, ...]]:
    reasons = _unmeasured_memory_reasons(job, layout)
    if not reasons:
        return (), ()
    return tuple(reasons), (Text("Memory error bar: no GPU measurement (H200, H100) covered %(what)s; the bar is "
                                 "at least %(pct)s %% (docs/accuracy.md).", what=join(reasons, ", "),
                                 pct=Num(UNMEASURED_MEMORY_ERROR_PCT, ".0f")),)


def unmeasured_memory_reasons(job: Job, layout: Layout) -> list[str]:
    """What of this set-up no H200 memory measurement covered (empty: a measured kind, see
    :func:`_measured_kind`)."""
    return list(_unmeasured(job, layout)[0])


def _unmeasured_memory_reasons(job: Job, layout: Layout) -> list[str]:
    rv = job
    p, t = rv.parallelism, rv.training
    out: list[str] = []
    for name, degree in ((N_("pipeline parallelism"), layout.pp), (N_("context parallelism"), layout.cp),
                         (N_("expert parallelism"), layout.ep)):
        if degree > 1:
            out.append(Text(name))
    if layout.tp > 1:
        if t.method != "full":
            out.append(Text("tensor parallelism with %(method)s", method=t.method.upper()))
        elif layout.dp > 1 and layout.sharding != "zero3":
            out.append(Text("tensor parallelism with data parallelism other than FSDP2"))
        elif layout.tp_plan == "replicated-embeddings" and (layout.sequence_parallel or layout.dp > 1):
            out.append(Text("the replicated-embeddings TP plan with sequence parallelism or FSDP2"))
    if not (p.offload == "none" or (p.offload == "optimizer+params" and layout.sharding == "zero3")):
        out.append(Text("CPU offload \"%(offload)s\" with sharding %(sharding)s", offload=p.offload,
                        sharding=layout.sharding))
    if p.framework != "pytorch":
        out.append(Text("the %(framework)s runtime", framework=p.framework))
    if t.method == "qlora" and layout.world_size > 1:
        out.append(Text("QLoRA on several GPUs"))
    mechanisms_measured = layout.world_size == 1 and mechanism_memory_bar_pct(memory_mechanism_keys(t)) is not None
    if t.optimizer not in _MEASURED_OPTIMIZERS and not (mechanisms_measured and t.optimizer in MECHANISM_OPTIMIZERS):
        out.append(Text("the %(optimizer)s optimizer", optimizer=t.optimizer))
    if layout.sharding not in ("none", "zero1", "zero2", "zero3"):
        out.append(Text("sharding %(sharding)s", sharding=layout.sharding))
    if not mechanisms_measured:  # measured on one H100 (stacks_report.py); elsewhere the unmeasured floor
        single = layout.world_size == 1
        out += [m if single else Text("%(mechanism)s on several GPUs (measured on one H100)", mechanism=m)
                for m in unmeasured_mechanisms(rv.training)]
    return out


def _unmeasured_memory_line(job: Job, layout: Layout) -> list[str]:
    return list(_unmeasured(job, layout)[1])


def _layout_summary(job: Job, layout: Layout, gpu_id: str) -> LayoutSummary:
    rv = job
    t = rv.training
    gbt = layout.tokens_per_step(t)
    return trusted(LayoutSummary, world_size=layout.world_size, dp=layout.dp, tp=layout.tp, pp=layout.pp, cp=layout.cp,
                         ep=layout.ep, sharding=layout.sharding, shard_group_size=layout.shard_group,
                         global_batch_tokens=gbt, gpu=gpu_id, server=rv.hardware.server,
                         virtual_stages=layout.vp if layout.pp > 1 else 1, stage_layers=list(layout.stage_layers),
                         pipeline_split=layout.pipeline_split)


_SUMMARIES: Final[BoundedMemo[tuple[object, ...], ModelSummary]] = BoundedMemo(1024)


def _model_summary(job: Job, shape: ModelShape) -> ModelSummary:
    """Memoised (a frozen model, shared) on the shape and what :func:`_trainable` reads."""
    t = job.training
    key = (shape, t.method, t.lora_rank, t.lora_targets)
    return _SUMMARIES.get_or_compute(key, lambda: _model_summary_uncached(job, shape))


def _model_summary_uncached(job: Job, shape: ModelShape) -> ModelSummary:
    a = shape.dims
    return trusted(ModelSummary, name=a.name, total_params=shape.total_params(), active_params=shape.active_params(),
                        trainable_params=_trainable(job, shape), published_params=a.published_params,
                        num_layers=a.num_layers, hidden_size=a.hidden_size, vocab_size=a.vocab_size)


def _catalog_version(catalog: Catalog) -> str:
    return str(getattr(catalog, "version", "unknown"))


def estimate(req: EstimateRequest, catalog: Catalog | None = None) -> EstimateResponse:
    """Memory, step time and time-to-train of one training layout on one hardware choice: the validated request
    becomes its :class:`~estimator.job.Job` here, once, and the model takes that."""
    catalog = catalog or _default_catalog()
    job = job_of(req)
    shape = shape_for(req.model)
    layout = build_layout(job, shape)
    hw = resolve_hardware(job, catalog)
    capacity = int(hw.gpu.memory_bytes)
    peak = estimate_memory(job, shape, layout, capacity)
    memory = _memory_result(job, shape, layout, capacity, peak)
    model_time = step_time_model(job, shape, layout, hw.gpu, hw.server)
    timing = model_time.result()
    figures = train_figures(job, shape, layout, timing, hw.gpu, hw.server)
    host, bom = _host_and_bom(job, shape, layout, hw, catalog, timing, figures)
    fabric, fabric_notes = estimate_fabric(job.request, choose_server(job, hw.server, hw.gpu, catalog),
                                           layout.num_nodes, catalog)
    if fabric is not None:
        bom = with_fabric_lines(bom, fabric)
    # one checkpoint write time per response: the host sizing's (as with_host_checkpoint gives it)
    train = figures.result(float(host.checkpoint_write_s)) if figures is not None else None
    ways_out = [] if memory.fits else suggestions(job, shape, capacity, lambda r: _measure(r, shape, hw, capacity))
    fit_ways = [] if memory.fit_verdict == "fits" else verdict_suggestions(
        job, memory.fit_verdict, peak.reserved_peak + peak.fixed_overhead,
        lambda r: _verdict_of(r, shape, capacity), apply_changes)
    cost, cost_notes = _cost(job, layout, hw, catalog, train, memory.fits)
    if fabric is not None:
        fabric = with_cost_note(fabric, job.request, cost, catalog)
    return trusted(EstimateResponse, model=_model_summary(job, shape), layout=_layout_summary(job, layout, hw.gpu.id),
                            memory=memory, time=timing, train=train, host=host, bill_of_materials=bom,
                            assumptions=assumptions_for(job, layout, hw) + _unmeasured_memory_line(job, layout)
                            + time_assumptions(job, hw.gpu, layout, model_time.host_ratio)
                            + stack_assumptions(job.request.training) + fabric_notes + allocator_assumptions(job),
                            warnings=warnings_for(job, shape, layout, hw, memory, ways_out)
                            + network_warnings(hw.gpu, hw.server, layout.num_nodes, layout.gpus_per_node)
                            + train_warnings(job, layout) + cost_notes + mechanism_notes(job.request.training)
                            + liger_warnings(job.training, shape.dims),
                            suggestions=ways_out, fit_suggestions=fit_ways,
                            estimator_version=ESTIMATOR_VERSION, catalog_version=_catalog_version(catalog),
                            cost=cost, fabric=fabric)


def _measure(req: EstimateRequest, shape: ModelShape, hw: ResolvedHardware, capacity: int) -> tuple[int, float]:
    """(peak allocated bytes, step seconds) of a suggestion's request (issue 29: what a mechanism saves and costs)."""
    return measure_request(req, shape, hw.gpu, hw.server, capacity)


def _cost(job: Job, layout: Layout, hw: ResolvedHardware, catalog: Catalog, train: TrainResult | None,
          fits: bool) -> tuple[CostResult | None, list[str]]:
    """The run on its cost basis (:mod:`estimator.tco.run_cost`): own with a server, else rent; no total when it does
    not fit."""
    server_id = hw.server.id if hw.server is not None else None
    basis, notes = choose_basis(catalog, hw.gpu.id, server_id, layout.num_nodes, layout.gpus_per_node,
                                job.request.cost, cluster=job.request.cluster)
    if basis is None:
        return None, notes
    return cost_of_run(basis, train.gpu_hours if train is not None else None, fits), notes


def _host_and_bom(job: Job, shape: ModelShape, layout: Layout, hw: ResolvedHardware, catalog: Catalog,
                  timing: TimeResult, train: TrainFigures | None) -> tuple[HostResult, list[dict[str, object]]]:
    """The rest of the node (issue 8): host RAM, NVMe, network, power, and the bill of materials. Without a
    server in the request, the catalog's cheapest server carrying this GPU stands in."""
    server = choose_server(job, hw.server, hw.gpu, catalog)
    host = host_result(job, shape, layout, hw.gpu, server, catalog, time=timing, train=train)
    return host, bill_of_materials(job, layout, server, catalog, host, gpu=hw.gpu)
