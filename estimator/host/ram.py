"""Host RAM per training process and per node: what ``ru_maxrss`` and ``free`` would show at the peak.

A training process holds, besides its framework baseline (Python, torch, CUDA runtime and libraries, NCCL):

- with CPU offload, the offloaded model states. PyTorch FSDP2 ``CPUOffloadPolicy(pin_memory=True)``
  (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``) keeps every sharded fp32 parameter in pinned
  memory (``padded_sharded_param.pin_memory()``), copies each reduce-scattered gradient to the host with
  ``.to("cpu", non_blocking=True)`` (a pinned allocation, ``_fsdp_collectives.py`` ``foreach_reduce``), and
  the optimizer keeps its states in ordinary memory (``torch.zeros_like(param)``). Pinned blocks come from
  PyTorch's caching host allocator, which rounds each block up to a power of two
  (``aten/src/ATen/core/CachingHostAllocator.h``) and keeps freed blocks cached: the rounding is counted
  tensor by tensor. The CPU optimizer's own temporaries: the for-loop AdamW allocates ``exp_avg_sq.sqrt()``
  and its quotient per tensor (two of the largest tensor), the foreach one over the whole list (one copy of
  all trainable parameters), the fused one none (``torch/optim/adamw.py``).
  DeepSpeed ZeRO-Offload follows its own estimator (``deepspeed/runtime/zero/stage3.py``
  ``estimate_zero3_model_states_mem_needs``): 16 bytes per parameter (fp32 master, fp32 gradient, Adam
  states) or 18 with parameter offload, times ``additional_buffer_factor`` 1.5.
- model loading: nothing extra with meta-device init (each rank materialises its shard); the full bf16 weights
  on rank 0 when rank 0 loads and broadcasts (``sync_module_states`` / ``cpu_ram_efficient_loading``); the
  full weights in *every* process when each calls ``from_pretrained``. Loading precedes the optimizer, so the
  process peak is the larger of the load phase and the training phase.
- checkpoint staging: an asynchronous DCP save (``torch.distributed.checkpoint.async_save``) keeps a pinned
  copy of the rank's shard; a full (rank-0 gathered) state dict holds the whole checkpoint on rank 0.

NCCL: every multi-GPU job holds some pinned host memory per process (each communicator's work FIFO, and the
SHM transport's buffers where peer-to-peer is unavailable); a multi-node job adds the network proxy buffers
(``host_defaults.yaml`` ``nccl_host_gib_single_node`` and ``nccl_host_gib``).

Per node: the processes of the busiest node (the one with rank 0), their DataLoader workers, and a reserve
for the operating system.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from estimator.host_options import GIB, HostOptions, host_defaults
from estimator.job import Job
from estimator.memo import BoundedMemo
from estimator.model.spec import ModelShape
from estimator.training.activations import pinned_offload_bytes
from estimator.training.checkpoint import CheckpointSize
from estimator.training.layout import Layout
from estimator.training.optimizers import optimizer_spec
from estimator.training.precision import optimizer_state_bytes
from estimator.training.tensors import Tensor, local_tensors, pow2ceil, stages

__all__ = ["BREAKDOWN_KEYS", "HostRam", "ProcessRam", "host_ram", "process_ram"]

BREAKDOWN_KEYS: Final = (
    "framework_baseline", "nccl", "model_loading", "offloaded_parameters", "offloaded_gradients",
    "offloaded_optimizer_states", "cpu_optimizer_temporary", "pinned_rounding", "checkpoint_staging",
    "dataloader_workers", "os_reserved",
)


@dataclass(frozen=True)
class ProcessRam:
    """One training process in one phase; the items add up to :attr:`total`."""

    items: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.items.values())


@dataclass(frozen=True)
class HostRam:
    busiest_process: ProcessRam  # rank 0 at its peak phase
    process_phase: str  # "load" or "train"
    node_items: dict[str, int]  # the busiest node at its peak phase, BREAKDOWN_KEYS; adds up to per_node
    node_phase: str
    load_phase_node_bytes: int
    train_phase_node_bytes: int
    # issue 33 item 4: pinned host bytes of activation offloading in the training phase (rank 0; its node)
    pinned_offload_per_process: int = 0
    pinned_offload_per_node: int = 0

    @property
    def per_process(self) -> int:
        return self.busiest_process.total

    @property
    def per_node(self) -> int:
        return sum(self.node_items.values())


_ZEROS: Final = dict.fromkeys(BREAKDOWN_KEYS, 0)


def _empty() -> dict[str, int]:
    """A zero for every breakdown key (a copy of one made once: ``dict.fromkeys`` is a generic call compiled)."""
    return _ZEROS.copy()


def _offload_items(job: Job, tensors: list[Tensor], layout: Layout) -> dict[str, int]:
    """Offloaded model states of one rank, tensor by tensor (PyTorch FSDP2 / Megatron CPU offload)."""
    rv = job
    t, p = rv.training, rv.parallelism
    items = _empty()
    shards = layout.shard_group if layout.sharding in ("zero3", "hsdp") else layout.optimizer_shard
    state_dtype = 2 if t.precision == "bf16-true" else 4
    param_dtype = 4 if t.precision != "bf16-true" else 2
    frozen_dtype = 2
    opt_pp = optimizer_state_bytes(t.optimizer, t.precision, p.framework)
    exact = rounded = 0
    largest = 0
    trainable_bytes = 0
    for x in tensors:
        n = x.shard_numel(shards)
        if x.trainable:
            param_b, grad_b = n * param_dtype, n * state_dtype
            exact += (param_b + grad_b) * x.count
            rounded += (pow2ceil(param_b) + pow2ceil(grad_b)) * x.count
            items["offloaded_parameters"] += param_b * x.count
            items["offloaded_gradients"] += grad_b * x.count
            items["offloaded_optimizer_states"] += int(n * opt_pp) * x.count + 4 * x.count
            largest = max(largest, n * state_dtype)
            trainable_bytes += n * state_dtype * x.count
        elif p.offload == "optimizer+params":
            frozen_b = n * frozen_dtype
            exact += frozen_b * x.count
            rounded += pow2ceil(frozen_b) * x.count
            items["offloaded_parameters"] += frozen_b * x.count
    if optimizer_spec(t.optimizer).factored:
        items["offloaded_optimizer_states"] += sum(
            ((-(-x.rows // shards) + x.cols) if x.cols > 1 else x.shard_numel(shards)) * state_dtype * x.count
            for x in tensors if x.trainable)
    items["pinned_rounding"] = rounded - exact
    impl = optimizer_spec(t.optimizer).implementation(t.optimizer_impl)
    items["cpu_optimizer_temporary"] = {"fused": 0, "for-loop": 2 * largest, "foreach": trainable_bytes}[impl]
    return items


def _deepspeed_offload_items(job: Job, tensors: list[Tensor], layout: Layout) -> dict[str, int]:
    """DeepSpeed's own estimate: (16 | 18) bytes per parameter x 1.5 (stage3.py, see the module docstring)."""
    items = _empty()
    shards = layout.shard_group if layout.sharding in ("zero3", "hsdp") else layout.optimizer_shard
    params = sum(x.shard_numel(shards) * x.count for x in tensors if x.trainable)
    frozen = sum(x.shard_numel(shards) * x.count for x in tensors if not x.trainable)
    factor = host_defaults().num("ram", "cpu_optimizer_buffer_factor")
    with_params = job.parallelism.offload == "optimizer+params"
    items["offloaded_parameters"] = params * (4 + (2 if with_params else 0)) + (frozen * 2 if with_params else 0)
    items["offloaded_gradients"] = params * 4
    items["offloaded_optimizer_states"] = params * 8
    states = items["offloaded_parameters"] + items["offloaded_gradients"] + items["offloaded_optimizer_states"]
    items["cpu_optimizer_temporary"] = int(states * (factor - 1))
    return items


def process_ram(job: Job, shape: ModelShape, layout: Layout, ckpt: CheckpointSize,
                options: HostOptions, rank0: bool) -> tuple[ProcessRam, ProcessRam]:
    """(load phase, training phase) of one process: rank 0 when ``rank0``, any other rank otherwise."""
    d = host_defaults()
    p = job.parallelism
    base = int(d.num("ram", "framework_baseline_gib") * GIB)
    nccl_on = options.nccl if options.nccl is not None else layout.world_size > 1
    nccl_key = "nccl_host_gib" if layout.num_nodes > 1 else "nccl_host_gib_single_node"
    nccl = int(d.num("ram", nccl_key) * GIB) if nccl_on and layout.world_size > 1 else 0
    best_train: dict[str, int] | None = None
    best_load: dict[str, int] | None = None
    for stage in stages(layout):
        tensors = local_tensors(job, shape, layout, stage)
        train = _empty()
        if p.offload != "none":
            offload = (_deepspeed_offload_items if p.framework == "deepspeed" else _offload_items)(
                job, tensors, layout)
            train.update({k: v for k, v in offload.items() if v})
        train["framework_baseline"] = base
        train["nccl"] = nccl
        offloaded = pinned_offload_bytes(job, shape, layout, stage)
        if offloaded:  # issue 29/33: pinned host copies of the saved activations (only then is the key present)
            train["offloaded_activations"] = offloaded
        if options.async_checkpoint:
            train["checkpoint_staging"] = ckpt.per_rank_bytes
        if options.checkpoint_format == "full" and rank0:
            train["checkpoint_staging"] = max(train["checkpoint_staging"],
                                              ckpt.model_bytes + ckpt.optimizer_bytes)
        load = _empty()
        load["framework_baseline"] = base
        load["nccl"] = nccl
        load["offloaded_parameters"] = train["offloaded_parameters"]
        load["pinned_rounding"] = train["pinned_rounding"] if p.offload == "optimizer+params" else 0
        if options.model_loading == "every-rank" or (options.model_loading == "rank0" and rank0):
            per_param = d.num("ram", "model_load_bytes_per_param")
            load["model_loading"] = int(sum(x.numel * x.count for x in tensors) * per_param)
        if best_train is None or sum(train.values()) > sum(best_train.values()):
            best_train = train
        if best_load is None or sum(load.values()) > sum(best_load.values()):
            best_load = load
    assert best_train is not None and best_load is not None
    return ProcessRam(best_load), ProcessRam(best_train)


def _host_ram_key(job: Job, shape: ModelShape, layout: Layout, ckpt: CheckpointSize,
                  options: HostOptions) -> tuple[object, ...]:
    """Everything :func:`_host_ram` reads: the request's model-state fields (not the batch shape), the
    checkpoint's staged sizes and the options it uses (before defaults are filled in, which is deterministic)."""
    rv = job
    t, p, o = rv.training, rv.parallelism, options
    return (t.method, t.lora_rank, t.lora_targets, t.precision, t.optimizer, t.optimizer_impl, p.offload,
            p.framework, shape, layout, ckpt.model_bytes, ckpt.optimizer_bytes, ckpt.per_rank_bytes, o.nccl,
            o.async_checkpoint, o.checkpoint_format, o.model_loading, o.dataloader_workers, o.include_os_reserved,
            t.activation_offloading, t.values if t.activation_offloading != "none" else None)


_HOST_RAM: Final[BoundedMemo[tuple[object, ...], HostRam]] = BoundedMemo(4096)


def host_ram(job: Job, shape: ModelShape, layout: Layout, ckpt: CheckpointSize,
             options: HostOptions) -> HostRam:
    """The node's host RAM, memoised on :func:`_host_ram_key` (it does not depend on the batch shape)."""
    key = _host_ram_key(job, shape, layout, ckpt, options)
    found = _HOST_RAM.get(key)
    if found is None:
        found = _HOST_RAM.remember(key, _host_ram(job, shape, layout, ckpt, options))
    return found


def _host_ram(job: Job, shape: ModelShape, layout: Layout, ckpt: CheckpointSize,
              options: HostOptions) -> HostRam:
    o = options.resolved()
    d = host_defaults()
    r0_load, r0_train = process_ram(job, shape, layout, ckpt, o, rank0=True)
    other_load, other_train = process_ram(job, shape, layout, ckpt, o, rank0=False)
    g = layout.gpus_per_node
    workers = int((o.dataloader_workers or 0) * g * d.num("ram", "dataloader_worker_gib") * GIB)
    os_reserved = int(d.num("ram", "os_reserved_gib") * GIB) if o.include_os_reserved else 0

    def node(r0: ProcessRam, other: ProcessRam, extra: dict[str, int]) -> dict[str, int]:
        items = {k: r0.items[k] + (g - 1) * other.items[k] for k in BREAKDOWN_KEYS}
        if "offloaded_activations" in r0.items or "offloaded_activations" in other.items:
            items["offloaded_activations"] = (r0.items.get("offloaded_activations", 0)
                                              + (g - 1) * other.items.get("offloaded_activations", 0))
        for k, v in extra.items():
            items[k] += v
        return items

    node_load = node(r0_load, other_load, {"os_reserved": os_reserved})
    node_train = node(r0_train, other_train, {"os_reserved": os_reserved, "dataloader_workers": workers})
    load_total, train_total = sum(node_load.values()), sum(node_train.values())
    node_phase = "load" if load_total > train_total else "train"
    process_phase = "load" if r0_load.total > r0_train.total else "train"
    return HostRam(busiest_process=r0_load if process_phase == "load" else r0_train, process_phase=process_phase,
                   node_items=node_load if node_phase == "load" else node_train, node_phase=node_phase,
                   load_phase_node_bytes=load_total, train_phase_node_bytes=train_total,
                   pinned_offload_per_process=r0_train.items.get("offloaded_activations", 0),
                   pinned_offload_per_node=node_train.get("offloaded_activations", 0))
