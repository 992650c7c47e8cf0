"""Per-GPU training memory: the peak over one step (forward, backward, optimizer) on the busiest GPU.

Instead of summing worst cases, the step is evaluated at the moments where the allocated bytes peak
(PyTorch memory snapshots, ``torch.cuda.memory._record_memory_history``, show these four):

- ``forward``: end of the forward pass, inside the loss (all saved activations, the fp32 logits being made);
- ``backward``: start of backward (activations still held, the loss gradient at its largest);
- ``backward-first-layer``: the last layer backward of the step (the first decoder layer): nearly every
  gradient already present, only that layer's activations (and, with full checkpointing, its recomputed
  ones) left; where full checkpointing peaks when one layer's backward transient is large (eager attention);
- ``backward-end``: all gradients present, activations gone, the last layers' gradient temporaries;
- ``optimizer``: gradients + optimizer states + the optimizer's own temporaries.

Model states follow ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054) per sharding stage; FSDP2's
all-gather and reduce-scatter buffers follow ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``
(unsharded bf16 parameters of the current and the prefetched group inside a layer, of the root and one layer while
the loss runs: :func:`_loss_gather_buffers`; gradients reduce-scattered in the ``reduce_dtype``). The PyTorch
foreach optimizers allocate full-size intermediates over the whole parameter list (``torch/optim/adamw.py``
``_multi_tensor_adamw``: ``torch._foreach_sqrt(exp_avg_sqs)`` and its in-place updates); the fused kernels
(``_fused_adamw``) do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from estimator.job import Job
from estimator.memo import BoundedMemo
from estimator.messages import N_
from estimator.model.spec import ModelShape
from estimator.training.activations import ActivationModel, activation_model, activation_rates
from estimator.training.layout import Layout
from estimator.training.mechanisms import loss_transient_fp32_bytes, torchao_adamw_step_bytes
from estimator.training.optimizers import optimizer_spec
from estimator.training.overhead import (
    OverheadInput,
    fixed_bytes,
    hard_overhead_bytes,
    overhead_bytes,
    reserved_minus_allocated_bytes,
)
from estimator.training.params import ParamPlacement, adapted_linears, place_params
from estimator.training.precision import optimizer_state_bytes, state_bytes

__all__ = ["MemoryFloor", "MemoryPeak", "Phase", "max_micro_batch", "memory_floor", "peak_memory", "peak_total"]


# Measured foreach AdamW intermediates relative to the optimizer's parameters (tests/data/calibration_h200.json,
# optimizer-phase peak minus parameters, gradients and states; see docs/accuracy.md).
FOREACH_TEMP_FRACTION: Final = 1.0


class Phase:
    name: Final[str]
    parameters: Final[int]
    gradients: Final[int]
    optimizer_states: Final[int]
    activations: Final[int]
    logits: Final[int]
    temporary: Final[int]

    def __init__(self, name: str, parameters: int, gradients: int, optimizer_states: int, activations: int,
                 logits: int, temporary: int) -> None:
        self.name = name
        self.parameters = parameters
        self.gradients = gradients
        self.optimizer_states = optimizer_states
        self.activations = activations
        self.logits = logits
        self.temporary = temporary

    @property
    def allocated(self) -> int:
        return (self.parameters + self.gradients + self.optimizer_states + self.activations + self.logits
                + self.temporary)


class MemoryPeak:
    peak: Final[Phase]
    phases: Final[tuple[Phase, ...]]
    soft_overhead: Final[int]
    hard_overhead: Final[int]
    capacity: Final[int]
    busiest_rank: Final[str]
    #: torch.cuda.max_memory_reserved() at the peak under the request's allocator setting (estimator.training.allocator)
    reserved_peak: Final[int]
    #: what only nvidia-smi sees beyond the allocator's reserve (CUDA context, NCCL)
    fixed_overhead: Final[int]

    def __init__(self, peak: Phase, phases: tuple[Phase, ...], soft_overhead: int, hard_overhead: int,
                 capacity: int, busiest_rank: str, reserved_peak: int = 0, fixed_overhead: int = 0) -> None:
        self.peak = peak
        self.phases = phases
        self.soft_overhead = soft_overhead
        self.hard_overhead = hard_overhead
        self.capacity = capacity
        self.busiest_rank = busiest_rank
        self.reserved_peak = reserved_peak
        self.fixed_overhead = fixed_overhead

    @property
    def peak_allocated(self) -> int:
        return self.peak.allocated

    @property
    def fits(self) -> bool:
        return _total_and_fits(self.peak.allocated, self.soft_overhead, self.hard_overhead, self.capacity)[1]

    @property
    def total(self) -> int:
        """nvidia-smi at the peak: the cached reserve fills what is free, but the card's memory caps it."""
        return _total_and_fits(self.peak.allocated, self.soft_overhead, self.hard_overhead, self.capacity)[0]

    @property
    def overhead(self) -> int:
        return self.total - self.peak.allocated


def _total_and_fits(allocated: int, soft_overhead: int, hard_overhead: int, capacity: int) -> tuple[int, bool]:
    """(:attr:`MemoryPeak.total`, :attr:`MemoryPeak.fits`) from the peak's allocated bytes and overheads."""
    fits = allocated + hard_overhead <= capacity
    if not fits:
        return allocated + hard_overhead, False
    return min(capacity, allocated + soft_overhead), True


class _States:
    """One stage's model states (a plain class: a frozen dataclass's generated ``__init__`` runs interpreted)."""

    params: Final[int]  # stored parameters (+ master copies)
    compute_cache: Final[int]  # autocast bf16 weight copies alive from forward into backward
    grads: Final[int]
    optimizer: Final[int]
    optimizer_temp: Final[int]
    gathered: Final[int]  # FSDP/ZeRO-3 unsharded parameters in flight (forward)
    gathered_loss: Final[int]  # ... while the loss runs and its backward starts (FSDP2: the root and one layer)
    # FSDP: the root group's unsharded gradients + reduce-scatter copy at the end of backward
    root_reduce: Final[int]
    gathered_backward: Final[int]  # + unsharded gradients and the reduce-scatter input (backward)
    # FSDP2 shard-grad-op: unsharded compute parameters kept from forward through backward
    persistent_gathered: Final[int]
    # gradient communication buffers allocated for the whole run (DDP buckets, ZeRO-3 IPG)
    grad_buckets: Final[int]
    backward_buckets: Final[int]  # gradient buckets living during backward only (DeepSpeed ZeRO-1/2 IPG buckets)
    grads_persistent: Final[bool]  # the gradient buffer is never freed (Megatron's contiguous main_grad buffer)
    grads_before_first_layer: Final[int]  # gradients present when the first decoder layer's backward starts

    def __init__(self, params: int, compute_cache: int, grads: int, optimizer: int, optimizer_temp: int,
                 gathered: int, root_reduce: int, gathered_backward: int, persistent_gathered: int, grad_buckets: int,
                 backward_buckets: int, grads_persistent: bool, grads_before_first_layer: int,
                 gathered_loss: int) -> None:
        self.params = params
        self.compute_cache = compute_cache
        self.grads = grads
        self.optimizer = optimizer
        self.optimizer_temp = optimizer_temp
        self.gathered = gathered
        self.gathered_loss = gathered_loss
        self.root_reduce = root_reduce
        self.gathered_backward = gathered_backward
        self.persistent_gathered = persistent_gathered
        self.grad_buckets = grad_buckets
        self.backward_buckets = backward_buckets
        self.grads_persistent = grads_persistent
        self.grads_before_first_layer = grads_before_first_layer


# DeepSpeed ``reduce_bucket_size`` (its default and what ``estimator/planner/exports/launch.py`` writes), in elements.
DEEPSPEED_REDUCE_BUCKET: Final = 500_000_000


def _fsdp2_shard_grad_op(job: Job, layout: Layout) -> bool:
    """PyTorch "zero2" is FSDP2 ``fully_shard(reshard_after_forward=False)`` (the SHARD_GRAD_OP strategy)."""
    return layout.sharding == "zero2" and job.parallelism.framework == "pytorch"


def _grads_on_gpu(job: Job, layout: Layout, place: ParamPlacement) -> int:
    """Gradients held on the GPU between backward and the optimizer step.

    With CPU offload, ZeRO-2/3 and FSDP2 move each reduced gradient shard to the CPU as soon as it exists:
    FSDP2 ``_fsdp_collectives.foreach_reduce`` copies the reduce-scatter output to the CPU when the
    ``CPUOffloadPolicy`` is set (``_fsdp_param_group.py`` ``post_backward``); DeepSpeed
    ``stage_1_and_2.py`` (``cpu_offload``: ``async_inplace_copy_grad_to_fp32_buffer_from_gpu`` then
    ``clear_grad_attribute``; other partitions' gradients are cleared in ``reduce_ipg_grads`` under
    ``partition_gradients``) and ``stage3.py`` (``grad_partitions_flat_buffer`` on the offload device).
    ZeRO-1 does not partition gradients: DeepSpeed's stage-1 branch of ``reduce_ipg_grads`` keeps every
    low-precision ``param.grad`` on the GPU (only the fp32 partition lives on the CPU), Megatron's
    ``--optimizer-cpu-offload`` keeps its contiguous fp32 ``main_grad`` buffer on the GPU, DDP keeps ``.grad``."""
    rv = job
    t, p = rv.training, rv.parallelism
    sb = state_bytes(t.precision, p.framework)
    if p.offload == "none":
        return place.sharded_bytes(layout, sb.grad + sb.low_grad, "grad")
    if layout.sharding in ("zero2", "zero3", "hsdp"):
        return 0
    if p.framework == "deepspeed":
        return place.sharded_bytes(layout, sb.low_grad, "grad")
    return place.sharded_bytes(layout, sb.grad, "grad")


def _buckets(job: Job, layout: Layout, place: ParamPlacement) -> tuple[int, int]:
    """(persistent, backward-only) gradient communication buffers.

    - PyTorch DDP (also under ``ZeroRedundancyOptimizer``) with the default ``gradient_as_bucket_view=False``
      allocates flat bucket tensors covering every gradient once, next to ``.grad``
      (``torch/csrc/distributed/c10d/reducer.cpp`` ``Reducer::initialize_buckets``: ``bucket.gradients =
      at::empty(...)``; gradients are copied in by ``mark_variable_ready_dense``), in the parameter dtype; none
      without a data-parallel peer (no DDP wrapper).
    - DeepSpeed ZeRO-1/2 (``DeepSpeedZeroOptimizer``, used for ZeRO-2 and for ZeRO-1 with offload; bf16
      ZeRO-1 without offload runs ``BF16_Optimizer``, whose fp32 gradients are in ``precision.py``)
      allocates ``reduce_bucket_size`` elements per IPG buffer in ``setup_buckets``, two with
      ``overlap_comm``, when backward starts, and frees them in ``_release_ipg_buffers``.
    - DeepSpeed ZeRO-3 allocates one ``reduce_bucket_size`` IPG buffer at start-up (``stage3.py``).
    - Megatron's DistributedDataParallel reduces in place in its contiguous ``main_grad`` buffer: no copy.
    """
    rv = job
    t, p = rv.training, rv.parallelism
    sb = state_bytes(t.precision, p.framework)
    if p.framework == "pytorch" and layout.sharding in ("none", "zero1") and layout.dp * layout.cp > 1:
        return int(place.trainable_local * sb.grad), 0
    if p.framework != "deepspeed" or layout.sharding == "none":
        return 0, 0
    elem = sb.compute_dtype_bytes
    if layout.sharding == "zero2" or (layout.sharding == "zero1" and p.offload != "none"):
        return 0, 2 * DEEPSPEED_REDUCE_BUCKET * elem
    if layout.sharding in ("zero3", "hsdp"):
        return DEEPSPEED_REDUCE_BUCKET * elem, 0
    return 0, 0


def _muon_adamw_bytes(job: Job, layout: Layout, place: ParamPlacement, matrix_per: float) -> int:
    """Muon's optimizer keeps one momentum buffer per decoder matrix; the embedding, the LM head, the norms and the
    biases go to AdamW (torch.optim.Muon's docstring; :mod:`estimator.training.mechanisms`): their second state on this
    rank. A LoRA's trainable parameters are all 2-D adapter matrices: nothing more."""
    t, p = job.training, job.parallelism
    if t.method != "full":
        return 0
    adamw_params = place.trainable_local - place.linear_trainable_local + place.head_linear_local
    extra = optimizer_state_bytes("adamw", t.precision, p.framework) - matrix_per
    return int(adamw_params * extra / layout.optimizer_shard)


def _states(job: Job, shape: ModelShape, layout: Layout, place: ParamPlacement) -> _States:
    rv = job
    t, p = rv.training, rv.parallelism
    sb = state_bytes(t.precision, p.framework)
    opt_on_gpu = p.offload == "none"
    params_on_gpu = p.offload != "optimizer+params"
    opt_per = optimizer_state_bytes(t.optimizer, t.precision, p.framework)
    optimizer = place.sharded_bytes(layout, opt_per, "optimizer") if opt_on_gpu else 0
    if opt_on_gpu and optimizer_spec(t.optimizer).factored:
        dense_ada = place.adafactor_state_local - place.expert_adafactor_local
        optimizer += (dense_ada // layout.optimizer_shard
                      + place.expert_adafactor_local // layout.expert_optimizer_shard)
    if opt_on_gpu and optimizer_spec(t.optimizer).matrix_only:
        optimizer += _muon_adamw_bytes(job, layout, place, opt_per)
    master = place.sharded_bytes(layout, sb.master, "optimizer") if opt_on_gpu else 0
    fsdp2_sgo = _fsdp2_shard_grad_op(job, layout)
    # FSDP2 shards the stored parameters for every strategy; DeepSpeed ZeRO-2 keeps its bf16 copy replicated.
    store_kind = "grad" if fsdp2_sgo else "param"
    param_store = place.sharded_bytes(layout, sb.param, store_kind) if params_on_gpu else 0
    p_shard, e_shard = ((layout.grad_shard, layout.expert_grad_shard) if fsdp2_sgo
                        else (layout.param_shard, layout.expert_param_shard))
    frozen = place.dense_frozen_local_bytes // p_shard + place.expert_frozen_local_bytes // e_shard
    params = param_store + master + frozen
    sharded_params = layout.sharding in ("zero3", "hsdp")
    cache = 0
    if sb.compute_param and not sharded_params and layout.sharding != "zero2":
        # autocast caches the bf16 cast of every trainable weight it meets (full: the linears; LoRA/QLoRA: the
        # fp32 adapters, each saved for backward: measured as a token-independent ~2 B per adapter parameter in
        # the saved-tensor probes of device call 7)
        cache = int(place.linear_trainable_local * sb.compute_param)
    temp = _optimizer_temp(job, shape, place, layout) if opt_on_gpu else 0
    gathered, gathered_bwd = _gather_buffers(job, place, layout) if sharded_params else (0, 0)
    gathered_loss = _loss_gather_buffers(job, place, gathered) if sharded_params else 0
    persistent_gathered = 0
    if fsdp2_sgo:
        # all-gathered once in forward, kept unsharded until post_backward (reshard_after_forward=False)
        persistent_gathered = int(place.trainable_local * sb.compute_dtype_bytes) + place.frozen_local_bytes
        gathered_bwd = _reduce_scatter_layer(job, place)
    root_reduce = _root_reduce_bytes(job, place) if sharded_params or fsdp2_sgo else 0
    if sharded_params and p.framework == "pytorch":  # FSDP2 x TP: the full embedding gradient, until reduced
        root_reduce += _full_embedding_grad(job, shape, layout)
    buckets, bwd_buckets = _buckets(job, layout, place)
    grads = _grads_on_gpu(job, layout, place)
    held_embedding_grad = 0 if sharded_params else _full_embedding_grad(job, shape, layout)
    return _States(params, cache, grads + held_embedding_grad, optimizer, temp, gathered,
                   root_reduce, gathered_bwd, persistent_gathered, buckets, bwd_buckets,
                   grads_persistent=p.framework == "megatron",
                   grads_before_first_layer=_grads_before_first_layer(job, shape, layout, place, grads),
                   gathered_loss=gathered_loss)


def _full_embedding_grad(job: Job, shape: ModelShape, layout: Layout) -> int:
    """PyTorch TP (DTensor) with a vocabulary-sharded, untied input embedding: ``embedding_dense_backward`` has
    no vocabulary-sharded strategy (``torch/distributed/tensor/_ops/_embedding_ops.py``), so the replicated one
    computes the whole V x h gradient and the redistribution to the parameter's Shard(0) keeps a view of it
    (``torch.chunk``): the full tensor stays allocated until ``zero_grad``, (1 - 1/tp) of it beyond the local
    gradient already counted. Measured on the H200 (Llama 3.1 8B, tp=2/4/8: 0.98/1.47/1.71 GiB predicted,
    +0.06 GiB measured; tied embeddings accumulate into the LM head's local gradient and show none). Under
    FSDP2 (``zero3``) the gradient is the unsharded compute-dtype one, reduce-scattered (and freed) at the end
    of backward: the caller counts it with the root group's reduction, not as a held gradient."""
    rv = job
    t, p = rv.training, rv.parallelism
    if (p.framework != "pytorch" or layout.embedding_tp == 1 or t.method != "full" or shape.dims.tied_embeddings
            or layout.pp > 1 or layout.sharding not in ("none", "zero1", "zero3")):
        return 0
    sb = state_bytes(t.precision, p.framework)
    grad = sb.compute_dtype_bytes if layout.sharding == "zero3" else sb.grad
    return int(shape.embedding_params() * (layout.tp - 1) / layout.tp * grad)


def _grads_before_first_layer(job: Job, shape: ModelShape, layout: Layout, place: ParamPlacement,
                              grads: int) -> int:
    """Gradients already on the GPU when backward reaches the stage's first decoder layer: all of them but
    that layer's and, for an untied input embedding (whose backward runs last), the embedding's."""
    if job.training.method == "full":
        later = place.max_layer_local
        if not shape.dims.tied_embeddings and layout.pp == 1:
            later += shape.embedding_params() // layout.embedding_tp
        total = place.total_local
    else:
        later, total = place.max_layer_trainable_local, place.trainable_local
    return int(grads * max(0, total - later) / max(1, total))


def _root_reduce_bytes(job: Job, place: ParamPlacement) -> int:
    """FSDP2 reduce-scatters the root group (embeddings, LM head, final norm) last: its unsharded low-precision
    gradients and their ``reduce_dtype`` copy coexist with the (almost) complete sharded gradients."""
    rv = job
    if rv.training.method != "full":
        return 0
    compute = 4 if rv.training.precision == "fp32" else 2
    reduce_bytes = 2 if rv.training.precision == "bf16-true" else 4
    return place.root_local * (compute + reduce_bytes)


def _optimizer_temp(job: Job, shape: ModelShape, place: ParamPlacement, layout: Layout) -> int:
    t = job.training
    spec = optimizer_spec(t.optimizer)
    if spec.torchao_step:
        return torchao_adamw_step_bytes(_largest_trainable_local(job, shape, place, layout), spec.block_bits,
                                        spec.block_size)
    if not spec.temporaries:
        return 0
    dtype = 2 if t.precision == "bf16-true" else 4
    if t.optimizer_impl == "foreach":
        return place.sharded_bytes(layout, dtype * FOREACH_TEMP_FRACTION, "optimizer")
    if t.optimizer_impl == "for-loop":
        return int(place.largest_tensor * dtype * 2 / layout.optimizer_shard)
    return 0


def _largest_trainable_local(job: Job, shape: ModelShape, place: ParamPlacement, layout: Layout) -> int:
    """Elements of the largest trainable tensor this rank's optimizer steps: the largest parameter (full; its
    ZeRO / FSDP2 shard), or the largest LoRA factor (``rank x max(in, out)`` of the adapted linears)."""
    if job.training.method == "full":
        return place.largest_tensor // layout.optimizer_shard
    rank = job.training.lora_rank
    linears = adapted_linears(shape, job.training.lora_targets)
    factors = [rank * max(lin.in_features, lin.out_features) for lin in linears]
    return max(factors, default=0) // (layout.tp * layout.optimizer_shard)


def _reduce_scatter_layer(job: Job, place: ParamPlacement) -> int:
    """FSDP2 backward: one layer's unsharded gradient and its reduce-scatter copy (``reduce_dtype=float32``)."""
    rv = job
    compute = 2 if rv.training.precision != "fp32" else 4
    reduce_bytes = 4 if rv.training.precision in ("bf16-mixed", "fp32", "fp8-mixed") else 2
    grad_layer = place.max_layer_local if rv.training.method == "full" else place.max_layer_trainable_local
    return grad_layer * (compute + reduce_bytes)


def _gather_buffers(job: Job, place: ParamPlacement, layout: Layout) -> tuple[int, int]:
    """ZeRO-3/FSDP2: unsharded bf16 parameters of the current and the prefetched layer in forward; in backward
    also the unsharded gradient and its fp32 reduce-scatter copy."""
    layer = place.max_layer_local
    compute = 2 if job.training.precision != "fp32" else 4
    forward = 2 * layer * compute + place.root_local * compute
    return forward, forward + _reduce_scatter_layer(job, place)


def _loss_gather_buffers(job: Job, place: ParamPlacement, gathered: int) -> int:
    """Unsharded parameters alive while the loss runs (the ``forward`` phase) and while its backward starts (the
    ``backward`` phase): FSDP2 holds the root group and one decoder layer's, not two.

    - Forward: the root group is never resharded after forward (``FSDPState._lazy_init``: "For the root, do not
      reshard after forward", ``post_forward_mesh_info = None``); each layer frees its unsharded parameters in its
      ``post_forward`` (``reshard_after_forward=True``), but ``FSDPParamGroup.wait_for_unshard`` keeps the flat
      all-gather output of the group last gathered in forward (``comm_ctx.all_gather_state``, "Defer free to allow
      for overlap of this copy-out with next all-gather collective") until the next all-gather or the root's
      ``FSDPState._post_forward`` ("Free the last all-gather result if needed"). A Hugging Face causal LM computes
      its loss inside the root module's forward: the last layer's all-gather output (its parameters, unsharded, in
      the compute dtype) is alive during the loss, freed when the forward returns.
    - Backward: the root's ``_pre_backward`` runs at the first gradient (the loss's), before the loss backward, and
      ``FSDPParamGroup.pre_backward`` prefetches the next group in backward order (``_backward_prefetch``): the last
      layer's all-gather output is allocated while the log-softmax backward runs; its copy-out, and the prefetch of
      the layer before, wait for that layer's own ``pre_backward``.

    ``torch/distributed/fsdp/_fully_shard/_fsdp_state.py`` and ``_fsdp_param_group.py`` (torch 2.11 measured, 2.13
    read). Measured on the H100 (issue 33, Qwen3-30B-A3B LoRA under FSDP2 at W = 8,
    ``tests/data/stacks_h100_raw/call3_results.jsonl``): the forward peak sits one layer (1.16 GiB) above the
    forward's end, whose allocation holds the root but no layer; the backward peak sits the loss backward's
    transient plus one layer above it. DeepSpeed ZeRO-3's prefetch (``stage3_prefetch_bucket_size``) keeps its
    ``gathered`` count."""
    if job.parallelism.framework != "pytorch":
        return gathered
    compute = 2 if job.training.precision != "fp32" else 4
    return (place.max_layer_local + place.root_local) * compute


def _in_flight(job: Job, layout: Layout, stage: str = "first") -> float:
    """Micro-batches whose activations the first pipeline stage holds (Narayanan 2021 Sec. 2.2; interleaved
    schedule: x (1 + (p-1)/(p*v)), Korthikanti 2022 Sec. 4.2.3); rank 1 (``middle``, an uneven split's busiest
    middle rank) holds one fewer under 1F1B."""
    rv = job
    if layout.pp == 1:
        return 1.0
    m = rv.training.gradient_accumulation_steps
    if rv.training.pipeline_schedule == "gpipe":
        return float(m)
    in_flight = float(min(layout.pp - (1 if stage == "middle" else 0), m))
    if layout.vp > 1 and rv.training.pipeline_schedule == "interleaved":
        in_flight *= 1 + (layout.pp - 1) / (layout.pp * layout.vp)
    return in_flight


class _StageBase:
    """One pipeline stage's phases apart from the micro-batch's activations (:func:`_stage_base`): what the six
    phases hold without the stored activations, the logits and one layer's backward transient, and the parts of
    the overhead input that do not depend on them. Neither depends on the micro-batch or the sequence length."""

    stage: Final[str]
    place: Final[ParamPlacement]
    states: Final[_States]
    layers: Final[int]  # decoder layers on the stage
    in_flight: Final[float]  # micro-batches whose activations it holds
    keeps_residual: Final[bool]  # a stage before the last also holds the residual stream it sends on
    has_logits: Final[bool]
    rows: Final[tuple[Phase, ...]]  # the six phases without activations and logits
    allocated: Final[tuple[int, int, int, int, int, int]]  # each row's allocated bytes without the activations
    logits_div: Final[int]  # the overhead input's fp32 logits: 4 x tokens x vocabulary // this (0: none)
    fsdp_buffer: Final[int]
    foreach_temp: Final[int]
    largest_state_block: Final[int]

    def __init__(self, stage: str, place: ParamPlacement, states: _States, layers: int, in_flight: float,
                 rows: tuple[Phase, ...], logits_div: int, fsdp_buffer: int, foreach_temp: int,
                 largest_state_block: int) -> None:
        self.stage = stage
        self.place = place
        self.states = states
        self.layers = layers
        self.in_flight = in_flight
        self.keeps_residual = stage != "last"
        self.has_logits = stage in ("last", "only")
        self.rows = rows
        a = [r.allocated for r in rows]
        self.allocated = (a[0], a[1], a[2], a[3], a[4], a[5])
        self.logits_div = logits_div
        self.fsdp_buffer = fsdp_buffer
        self.foreach_temp = foreach_temp
        self.largest_state_block = largest_state_block


def _stage_base(job: Job, layout: Layout, place: ParamPlacement, st: _States, stage: str) -> _StageBase:
    rv = job
    accumulating = rv.training.gradient_accumulation_steps > 1 or layout.pp > 1
    grads_during_fwd = st.grads if accumulating or st.grads_persistent else 0
    gathered = st.params + st.persistent_gathered  # FSDP2 shard-grad-op reshards in post_backward
    ckpt = rv.training.activation_checkpointing == "full"
    bwd_cache = 0 if ckpt else st.compute_cache
    full = rv.training.method == "full"
    head_grads = int(st.grads * place.root_local / max(1, place.total_local)) if full else 0
    bk, bwd_bk = st.grad_buckets, st.backward_buckets
    first_layer_grads = st.grads if accumulating or st.grads_persistent else st.grads_before_first_layer
    rows = (
        Phase("forward", gathered + st.compute_cache, grads_during_fwd + bk, st.optimizer, 0, 0, st.gathered_loss),
        Phase("backward", gathered + bwd_cache, grads_during_fwd + bk, st.optimizer, 0, 0,
              st.gathered_loss + bwd_bk),
        Phase("backward-layer", gathered + bwd_cache, max(grads_during_fwd, head_grads) + bk, st.optimizer, 0, 0,
              st.gathered_backward + bwd_bk),
        Phase("backward-first-layer", gathered, first_layer_grads + bk, st.optimizer, 0, 0,
              st.gathered_backward + bwd_bk),
        Phase("backward-end", st.params, st.grads + bk, st.optimizer, 0, 0, st.root_reduce),
        Phase("optimizer", st.params, st.grads + bk, st.optimizer, 0, 0, st.optimizer_temp),
    )
    per_param = 6 if full else 2
    fsdp = (place.root_local + 2 * place.max_layer_local) * per_param if layout.sharding in ("zero3", "hsdp") else 0
    return _StageBase(stage, place, st, layout.layers_on(stage), _in_flight(job, layout, stage), rows,
                      layout.logits_tp if stage in ("last", "only") else 0, fsdp,
                      st.optimizer_temp if rv.training.optimizer_impl == "foreach" else 0,
                      place.largest_tensor * 4 // layout.grad_shard if full else 0)


def _stored(base: _StageBase, act: ActivationModel) -> int:
    """The activations a stage holds at its forward peak: its layers' for the micro-batches in flight, and the
    residual stream it sends on."""
    layers = base.layers * base.in_flight
    if act.offload_keep_layers:  # activation offloading: the rest is in pinned host memory (training.mechanisms)
        layers = min(layers, act.offload_keep_layers)
    return (int(act.stored_per_layer_bytes * layers)
            + (act.residual_bytes if base.keeps_residual else 0))


def _head_extra(base: _StageBase, act: ActivationModel) -> int:
    """What the final norm and the LM head save (:attr:`ActivationModel.head_saved_bytes`) on the stage holding the
    loss, beyond the residual stream :func:`_stored` already counts there (the norm's input)."""
    if not base.has_logits:
        return 0
    return max(0, act.head_saved_bytes - (act.residual_bytes if base.keeps_residual else 0))


def _layer_temp(base: _StageBase, act: ActivationModel) -> int:
    """One layer's backward transient: the MLP's and the attention core's backward run one after the other, so
    the larger counts, with the recomputed activations."""
    return act.recompute_layer_bytes + max(base.place.backward_temp_bytes(act), act.attention_backward_bytes)


def _phases(base: _StageBase, act: ActivationModel) -> tuple[Phase, ...]:
    """The six phases of one stage with one micro-batch's activations: the stored activations in forward and
    backward (one layer's in the first layer's backward), the logits, and one layer's backward transient."""
    stored = _stored(base, act)
    at_loss = stored + _head_extra(base, act)
    fwd_logits = act.logits_forward_bytes if base.has_logits else 0
    bwd_logits = act.logits_backward_bytes if base.has_logits else 0
    layer_temp = _layer_temp(base, act)
    fwd, bwd, layer, first, end, opt = base.rows
    return (
        Phase(fwd.name, fwd.parameters, fwd.gradients, fwd.optimizer_states, at_loss, fwd_logits, fwd.temporary),
        Phase(bwd.name, bwd.parameters, bwd.gradients, bwd.optimizer_states, at_loss, bwd_logits, bwd.temporary),
        Phase(layer.name, layer.parameters, layer.gradients, layer.optimizer_states, stored, 0,
              layer.temporary + layer_temp),
        Phase(first.name, first.parameters, first.gradients, first.optimizer_states, act.stored_per_layer_bytes, 0,
              first.temporary + layer_temp),
        end,  # no activations, logits or layer transient: the stage's own (a Phase is never changed)
        opt,
    )


def _peak_allocated(base: _StageBase, act: ActivationModel) -> int:
    """The largest :attr:`Phase.allocated` of the stage's :func:`_phases` (the same sums), without building them."""
    s0, s1, s2, s3, s4, s5 = base.allocated
    stored = _stored(base, act)
    at_loss = stored + _head_extra(base, act)
    temp = _layer_temp(base, act)
    fwd_logits, bwd_logits = (act.logits_forward_bytes, act.logits_backward_bytes) if base.has_logits else (0, 0)
    # two-argument max()es: compiled to comparisons of native ints (max() of more boxes each into a Python int)
    return max(max(max(s0 + at_loss + fwd_logits, s1 + at_loss + bwd_logits), max(s2 + stored + temp,
               s3 + act.stored_per_layer_bytes + temp)), max(s4, s5))


def _overhead_input(job: Job, shape: ModelShape, layout: Layout, peak_allocated: int,
                    act: ActivationModel, base: _StageBase) -> OverheadInput:
    # the loss's largest fp32 transient (the whole logits for the materialised loss; one chunk or tile otherwise)
    t = job.training
    logits = loss_transient_fp32_bytes(t.loss_kernel, act.tokens, shape.dims.vocab_size, base.logits_div,
                                       shape.dims.hidden_size, impl="trl" if t.stack == "trl" else "torchtune") \
        if base.logits_div else 0
    return OverheadInput(peak_allocated=peak_allocated, world_size=layout.world_size, num_nodes=layout.num_nodes,
                         logits_fp32_bytes=logits, checkpointing=job.training.activation_checkpointing == "full",
                         foreach_temp_bytes=base.foreach_temp, fsdp_buffer_bytes=base.fsdp_buffer,
                         largest_block_bytes=max(logits, base.largest_state_block),
                         expandable_segments=job.training.allocator == "expandable_segments")


def _stages(layout: Layout) -> tuple[str, ...]:
    """The stages whose peak may be the largest; an uneven split (fewer layers on the first and last stages)
    adds rank 1, the middle rank with the most layers and micro-batches in flight."""
    if layout.pp == 1:
        return ("only",)
    return ("first", "middle", "last") if layout.uneven and layout.pp > 2 else ("first", "last")


def _state_key(job: Job) -> tuple[object, ...]:
    """Everything :func:`place_params` and :func:`_states` read from the request (not the batch shape)."""
    rv = job
    t, p = rv.training, rv.parallelism
    return (t.method, t.lora_rank, t.lora_targets, t.precision, t.optimizer, t.optimizer_impl, p.framework,
            p.offload)


_STAGE_STATES: Final[BoundedMemo[tuple[object, ...], tuple[ParamPlacement, _States]]] = BoundedMemo(8192)


def _placed_states(job: Job, shape: ModelShape, layout: Layout,
                   stage: str) -> tuple[ParamPlacement, _States]:
    place = place_params(job, shape, layout, stage)
    return place, _states(job, shape, layout, place)


def _stage_states(job: Job, shape: ModelShape, layout: Layout,
                  stage: str) -> tuple[ParamPlacement, _States]:
    """Placement and model states of one pipeline stage, memoised: they do not depend on the micro-batch or
    the sequence length, which the largest-micro-batch search, the suggestions and the planner vary."""
    key = (_state_key(job), shape, layout, stage)
    found = _STAGE_STATES.get(key)
    if found is None:
        found = _STAGE_STATES.remember(key, _placed_states(job, shape, layout, stage))
    return found


_Key = tuple[object, ...]
_PEAKS: Final[BoundedMemo[_Key, MemoryPeak]] = BoundedMemo(4096)
_TOTALS: Final[BoundedMemo[_Key, tuple[int, bool]]] = BoundedMemo(4096)
_MAX_MICRO_BATCH: Final[BoundedMemo[_Key, int]] = BoundedMemo(4096)


def _key(job: Job, shape: ModelShape, layout: Layout, gpu_memory_bytes: int) -> _Key:
    """The request parts the memory model reads (training and parallelism, by their field values), the shape,
    the layout and the capacity."""
    v = job
    return (v.training.values, v.parallelism.values, shape, layout, gpu_memory_bytes)


def peak_memory(job: Job, shape: ModelShape, layout: Layout, gpu_memory_bytes: int) -> MemoryPeak:
    """The busiest GPU's peak; memoised on the request parts it reads (training and parallelism)."""
    key = _key(job, shape, layout, gpu_memory_bytes)
    found = _PEAKS.get(key)
    if found is None:
        found = _PEAKS.remember(key, _peak_memory(job, shape, layout, gpu_memory_bytes))
    return found


def peak_total(job: Job, shape: ModelShape, layout: Layout, gpu_memory_bytes: int) -> tuple[int, bool]:
    """(:attr:`MemoryPeak.total`, :attr:`MemoryPeak.fits`) of :func:`peak_memory` without building the phases
    (the suggestions' re-estimates); memoised the same way."""
    key = _key(job, shape, layout, gpu_memory_bytes)
    return _TOTALS.get_or_compute(key, lambda: _total_and_fits(
        *_peak_bytes(job, shape, layout, activation_model(job, shape, layout)), gpu_memory_bytes))


_RANKS: Final = {"only": N_("every rank (identical)"),
          "first": N_("first pipeline stage (embeddings, most micro-batches in flight)"),
          "middle": N_("second pipeline stage (most decoder layers of an uneven split)"),
          "last": N_("last pipeline stage (LM head and loss)")}


_BASES: Final[BoundedMemo[tuple[object, ...], tuple[_StageBase, ...]]] = BoundedMemo(8192)


def _stage_bases(job: Job, shape: ModelShape, layout: Layout) -> tuple[_StageBase, ...]:
    """The :class:`_StageBase` of every stage whose peak may be the largest (:func:`_stages`), memoised on the
    request fields they read (the model states', the accumulation, the schedule, the checkpointing): the largest-
    micro-batch search, the suggestions and the planner vary the micro-batch and the sequence length."""
    t = job.training
    key = (_state_key(job), t.gradient_accumulation_steps, t.pipeline_schedule, t.activation_checkpointing, shape,
           layout)
    found = _BASES.get(key)
    if found is None:
        found = _BASES.remember(key, tuple(_stage_base(job, layout, *_stage_states(job, shape, layout, stage), stage)
                                           for stage in _stages(layout)))
    return found


def _busiest(job: Job, shape: ModelShape, layout: Layout, act: ActivationModel,
             bases: tuple[_StageBase, ...] | None = None) -> tuple[int, int, tuple[Phase, ...], str, OverheadInput]:
    """(allocated bytes at the peak, index of the peak phase, the phases, stage, overhead input) of the busiest
    pipeline stage (the first stage with the largest peak: :func:`_busiest_stage`); only its phases are built.
    ``bases``: :func:`_stage_bases`, when the caller evaluates several micro-batches of one request."""
    stages = bases or _stage_bases(job, shape, layout)
    base = _busiest_stage(stages, act)[1] if len(stages) > 1 else stages[0]
    rows = _phases(base, act)
    index, best_bytes = _largest(rows)
    return best_bytes, index, rows, base.stage, _overhead_input(job, shape, layout, best_bytes, act, base)


def _busiest_stage(bases: tuple[_StageBase, ...], act: ActivationModel) -> tuple[int, _StageBase]:
    """(allocated bytes at its peak, stage) of the first stage with the largest :func:`_peak_allocated`."""
    best_bytes, best = -1, bases[0]
    for base in bases:
        top = _peak_allocated(base, act)
        if top > best_bytes:
            best_bytes, best = top, base
    return best_bytes, best


def _busiest_total(job: Job, shape: ModelShape, layout: Layout, act: ActivationModel,
                   bases: tuple[_StageBase, ...]) -> int:
    """The allocated peak plus the hard overhead of the busiest stage (:func:`_busiest`,
    :func:`~estimator.training.overhead.hard_overhead_bytes`) without building the phases: what the largest-micro-batch
    search compares with the capacity at each size it tries."""
    best_bytes, best = _busiest_stage(bases, act)
    return best_bytes + hard_overhead_bytes(_overhead_input(job, shape, layout, best_bytes, act, best))


def _largest(rows: tuple[Phase, ...]) -> tuple[int, int]:
    """(index, allocated bytes) of the first phase with the most allocated bytes."""
    index, top = 0, rows[0].allocated
    for i in range(1, len(rows)):
        size = rows[i].allocated
        if size > top:
            index, top = i, size
    return index, top


def _peak_bytes(job: Job, shape: ModelShape, layout: Layout,
                act: ActivationModel) -> tuple[int, int, int]:
    """(allocated at the peak, soft overhead, hard overhead) of :func:`_peak_memory`."""
    allocated, _, _, _, inp = _busiest(job, shape, layout, act)
    return allocated, overhead_bytes(inp), hard_overhead_bytes(inp)


def _peak_memory(job: Job, shape: ModelShape, layout: Layout, gpu_memory_bytes: int,
                 act: ActivationModel | None = None) -> MemoryPeak:
    allocated, index, phases, stage, inp = _busiest(job, shape, layout, act or activation_model(job, shape, layout))
    return MemoryPeak(peak=phases[index], phases=phases, soft_overhead=overhead_bytes(inp),
                      hard_overhead=hard_overhead_bytes(inp), capacity=gpu_memory_bytes, busiest_rank=_RANKS[stage],
                      reserved_peak=allocated + reserved_minus_allocated_bytes(inp),
                      fixed_overhead=fixed_bytes(inp))


def max_micro_batch(job: Job, shape: ModelShape, layout: Layout, gpu_memory_bytes: int,
                    limit: int = 4096) -> int:
    """:func:`_max_micro_batch`, memoised on the request parts it reads (training and parallelism)."""
    peak_key = _key(job, shape, layout, gpu_memory_bytes)
    return _MAX_MICRO_BATCH.get_or_compute((*peak_key, limit), lambda: _max_micro_batch(
        job, shape, layout, gpu_memory_bytes, limit, _PEAKS.get(peak_key)))


def _max_micro_batch(job: Job, shape: ModelShape, layout: Layout, gpu_memory_bytes: int,
                     limit: int, known: MemoryPeak | None = None) -> int:
    """The largest micro-batch (at most ``limit``) whose peak :attr:`MemoryPeak.fits`; 0 if 1 does not.

    Everything but the activations, logits and the allocator reserve is independent of the micro-batch, and
    those grow piecewise linearly with it, so the total is increasing and (nearly) convex in it: the model
    states are computed once (:func:`_stage_bases`), a line through the totals at 1 and 2 sequences guesses
    the boundary, and secant steps between the largest size known to fit and the smallest known not to
    (with the next size up checked after each guess that fits) close in on it, usually in 3 to 5 evaluations.
    The total being increasing in the micro-batch, any such search finds the same, largest size that fits.
    ``known``: the request's own peak (:func:`peak_memory`), when it was computed."""
    cap = gpu_memory_bytes
    memo: dict[int, int] = {}
    if known is not None:  # the request's own micro-batch
        memo[job.training.micro_batch_size] = known.peak_allocated + known.hard_overhead
    rates = activation_rates(job, shape, layout)
    bases = _stage_bases(job, shape, layout)

    def total(m: int) -> int:
        if m not in memo:
            memo[m] = _busiest_total(job, shape, layout, activation_model(job, shape, layout, m, rates), bases)
        return memo[m]

    if total(1) > cap:
        return 0
    lo = 1
    hi = limit + 1  # smallest size known not to fit (limit + 1: none known)
    probe = 2
    while hi - lo > 1:
        probe = max(lo + 1, min(hi - 1, probe))
        if total(probe) > cap:
            hi = probe
        else:
            lo = probe
            # after a guess (not the first step up from 1, which only gives the slope), the next size up
            if probe > 2 and lo + 1 < hi:
                if total(lo + 1) > cap:
                    return lo
                lo += 1
        probe = _secant(lo, total(lo), hi, memo.get(hi), cap, memo.get(lo - 1))
    return lo


def _secant(lo: int, at_lo: int, hi: int, at_hi: int | None, cap: int, below_lo: int | None) -> int:
    """The next size to try: where the line through (lo, at_lo) and (hi, at_hi) meets the capacity, or, with
    no failing size known yet, where the slope just below ``lo`` extrapolates to it; bisection when the line
    gives nothing better."""
    if at_hi is not None and at_hi > at_lo:
        return lo + (cap - at_lo) * (hi - lo) // (at_hi - at_lo)
    if below_lo is not None and at_lo > below_lo:
        return lo + (cap - at_lo) // (at_lo - below_lo)
    return (lo + hi) // 2


@dataclass(frozen=True)
class MemoryFloor:
    """What every micro-batch and checkpointing variant of one layout holds at least on its first pipeline stage:
    a lower bound on ``peak_allocated`` for the planner's screen (:mod:`estimator.planner.screen`).

    Every phase of :func:`_phases` holds the stored parameters, the optimizer states and the persistent gradient
    buckets (``states``); ``backward-end`` adds every gradient (``grads``); ``forward`` adds at least, per decoder
    layer of the stage, the residual stream of the micro-batch's tokens (``residual_bytes_per_token`` each: what
    full checkpointing keeps; the other policies keep more)."""

    states: int
    grads: int
    residual_bytes_per_token: int
    residual_div: int
    layers: int
    cp: int


def memory_floor(job: Job, shape: ModelShape, layout: Layout) -> MemoryFloor:
    """The :class:`MemoryFloor` of ``job``'s layout (its micro-batch and checkpointing do not matter)."""
    stage = _stages(layout)[0]
    _, st = _stage_states(job, shape, layout, stage)
    rates = activation_rates(job, shape, layout)
    return MemoryFloor(states=st.params + st.optimizer + st.grad_buckets, grads=st.grads,
                       residual_bytes_per_token=rates.residual_dtype * shape.dims.hidden_size,
                       residual_div=rates.residual_div, layers=layout.layers_on(stage), cp=layout.cp)
