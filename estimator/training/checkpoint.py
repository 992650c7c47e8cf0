"""Checkpoint size: the bytes a training checkpoint writes, in total, per rank and per node.

What is saved, by framework (bytes per trainable parameter):

- PyTorch (``torch.save`` of ``model.state_dict()`` and ``optimizer.state_dict()``, or
  ``torch.distributed.checkpoint`` of the same): the parameters in their stored dtype (fp32 under bf16-mixed,
  bf16 under bf16-true) and the optimizer states in the parameter dtype (``torch/optim/adamw.py``:
  ``exp_avg``/``exp_avg_sq`` = ``torch.zeros_like(param)``; one fp32 ``step`` scalar per parameter tensor):
  4 + 8 = 12 for AdamW. Adafactor (``torch/optim/_adafactor.py``) keeps a row and a column vector per matrix.
- DeepSpeed: bf16 module weights (``mp_rank_*_model_states.pt``) plus the fp32 master copy and the Adam
  states (``zero_pp_rank_*_optim_states.pt``): 2 + 4 + 8 = 14.
- Megatron-LM: bf16 weights plus the distributed optimizer's fp32 main parameters and Adam states: 14.
- LoRA / QLoRA: only the adapters and their optimizer states (PEFT ``save_pretrained`` and the HF Trainer save
  adapters only); the frozen base is not rewritten.

Who writes what, by sharding (the rank order is Megatron-LM's default, tp fastest, pp slowest):

- ``none`` (DDP): data-parallel rank 0 of each model-parallel group writes everything;
- ``zero1``/``zero2``: weights from data-parallel rank 0, optimizer states from every rank of the shard group;
- ``zero3``/FSDP: every rank writes its shard (DCP: one ``__<rank>_0.distcp`` file per rank);
- ``hsdp``: the ranks of one replica write (DCP de-duplicates replicated shards).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from estimator.host_options import host_defaults
from estimator.job import Job
from estimator.memo import BoundedMemo
from estimator.model.spec import ModelShape
from estimator.training.layout import Layout
from estimator.training.optimizers import optimizer_spec
from estimator.training.precision import optimizer_state_bytes, state_bytes
from estimator.training.tensors import Tensor, local_tensors

__all__ = ["CheckpointFile", "CheckpointSize", "checkpoint_size", "checkpoint_target", "saved_bytes_per_param"]

CheckpointFile = Literal["torch.save", "dcp"]


@dataclass(frozen=True)
class CheckpointSize:
    model_bytes: int  # weights, whole job
    optimizer_bytes: int  # optimizer states (+ master copies), whole job
    tensors: int  # tensor records written (for per-record overhead)
    overhead_bytes: int  # torch.save / DCP records and metadata
    per_rank_bytes: int  # the rank that writes the most
    per_node_bytes: int  # the node that writes the most
    writer_nodes: int  # nodes that write

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.optimizer_bytes + self.overhead_bytes


def saved_bytes_per_param(job: Job) -> tuple[float, float]:
    """(weight bytes, optimizer bytes incl. master copy) per trainable parameter; Adafactor's factored state
    is per matrix and added by :func:`checkpoint_size`."""
    rv = job
    t, p = rv.training, rv.parallelism
    sb = state_bytes(t.precision, p.framework)
    fp8_cache = 1.0 if t.precision == "fp8-mixed" and p.framework != "pytorch" else 0.0
    weight = sb.param - fp8_cache  # the fp8 weight cache is rebuilt, not saved
    opt = optimizer_state_bytes(t.optimizer, t.precision, p.framework) + sb.master
    return weight, opt


def _adafactor_bytes(tensors: list[Tensor], dtype: int) -> int:
    """torch.optim.Adafactor: ``row_var`` and ``col_var`` for matrices, ``variance`` for vectors."""
    return sum(((x.rows + x.cols) if x.cols > 1 else x.rows) * dtype * x.count for x in tensors if x.trainable)


def _stage_sizes(job: Job, shape: ModelShape, layout: Layout, stage: str) -> tuple[int, int, int]:
    """(weight bytes, optimizer bytes, tensor records) of one model-parallel rank of ``stage``."""
    rv = job
    weight_pp, opt_pp = saved_bytes_per_param(job)
    tensors = [x for x in local_tensors(job, shape, layout, stage) if x.trainable]
    trainable = sum(x.numel * x.count for x in tensors)
    weight = int(trainable * weight_pp)
    opt = int(trainable * opt_pp)
    n_tensors = sum(x.count for x in tensors)
    records_per_tensor = 1
    spec = optimizer_spec(rv.training.optimizer)
    if spec.factored:
        dtype = 2 if rv.training.precision == "bf16-true" else 4
        opt += _adafactor_bytes(tensors, dtype)
    if rv.parallelism.framework == "pytorch":
        records_per_tensor += spec.saved_tensors + 1  # + the ``step`` scalar
        opt += 4 * n_tensors  # fp32 ``step`` per parameter tensor
    return weight, opt, n_tensors * records_per_tensor


def _writer_nodes(layout: Layout) -> tuple[int, int]:
    """(nodes writing the weights, nodes writing the optimizer states)."""
    g, n = layout.gpus_per_node, layout.num_nodes
    mp_writers = layout.pp * layout.tp  # cp and dp replicas hold the same weights
    # ranks of one pipeline stage are contiguous (pp slowest); a stage's tp writers sit on ceil(tp/g) nodes
    weight_nodes = min(n, layout.pp * max(1, -(-layout.tp // g)) if mp_writers > 1 else 1)
    if layout.sharding in ("none",):
        return weight_nodes, weight_nodes
    replica_ranks = layout.shard_group * layout.tp * layout.pp  # the shard group already spans the cp ranks
    opt_nodes = max(1, min(n, replica_ranks // g))
    if layout.sharding in ("zero3", "hsdp"):
        return opt_nodes, opt_nodes
    return weight_nodes, opt_nodes  # zero1 / zero2


def _job_sizes(job: Job, shape: ModelShape, layout: Layout) -> tuple[tuple[int, int, int], int, int]:
    """((weights, optimizer, records) of the whole job, busiest stage's weights, busiest stage's optimizer)."""
    if layout.pp == 1:
        w, o, r = _stage_sizes(job, shape, layout, "only")
        return (w * layout.tp, o * layout.tp, r * layout.tp), w, o
    first = _stage_sizes(job, shape, layout, "first")
    last = _stage_sizes(job, shape, layout, "last")
    mid = _stage_sizes(job, shape, layout, "middle")
    n_mid = layout.pp - 2
    total = tuple((first[i] + last[i] + n_mid * mid[i]) * layout.tp for i in range(3))
    return (total[0], total[1], total[2]), max(first[0], last[0]), max(first[1], last[1])


_SIZES: Final[BoundedMemo[tuple[object, ...], CheckpointSize]] = BoundedMemo(4096)


def checkpoint_size(job: Job, shape: ModelShape, layout: Layout,
                    fmt: CheckpointFile = "dcp") -> CheckpointSize:
    """Bytes of one checkpoint of this training job (see the module docstring for what is saved), written with
    ``torch.save`` or ``torch.distributed.checkpoint`` (``fmt``). DCP writes tied embeddings twice (the model
    state dict holds both names) and has a larger record overhead. Memoised on the request fields it reads (not
    the batch shape)."""
    t = job.training
    key = (t.method, t.lora_rank, t.lora_targets, t.precision, t.optimizer, job.parallelism.framework, shape,
           layout, fmt)
    return _SIZES.get_or_compute(key, lambda: _checkpoint_size(job, shape, layout, fmt))


def _checkpoint_size(job: Job, shape: ModelShape, layout: Layout, fmt: CheckpointFile) -> CheckpointSize:
    key = "dcp_overhead_bytes_per_tensor" if fmt == "dcp" else "torch_save_overhead_bytes_per_tensor"
    per_record = int(host_defaults().num("checkpoint", key))
    (weight_total, opt_total, rec_total), stage_weight, stage_opt = _job_sizes(job, shape, layout)
    if fmt == "dcp" and shape.dims.tied_embeddings and job.training.method == "full":
        dup = int(shape.embedding_params() * saved_bytes_per_param(job)[0])
        weight_total += dup
        stage_weight += dup // layout.tp if layout.pp == 1 else 0
    if layout.sharding in ("zero3", "hsdp"):
        per_rank = (stage_weight + stage_opt) // layout.shard_group
    else:
        per_rank = stage_weight + stage_opt // layout.optimizer_shard
    w_nodes, o_nodes = _writer_nodes(layout)
    overhead = rec_total * per_record
    per_node = weight_total // w_nodes + (opt_total + overhead) // o_nodes
    return CheckpointSize(model_bytes=weight_total, optimizer_bytes=opt_total, tensors=rec_total,
                          overhead_bytes=overhead, per_rank_bytes=per_rank, per_node_bytes=per_node,
                          writer_nodes=max(w_nodes, o_nodes))


def checkpoint_target(num_nodes: int, requested: str = "auto") -> str:
    """Where checkpoints are written (the one place that decides it, for the host sizing and the training
    totals): the requested target, else ``local`` NVMe on one node and ``shared`` storage (parallel file system
    or NFS) once the job spans nodes, where a restart on other nodes must find every rank's shard."""
    if requested != "auto":
        return requested
    return "local" if num_nodes <= 1 else "shared"
