"""Inter-node traffic per step and the NICs a node needs so that it does not dominate the step.

Volumes follow the NCCL bus-bandwidth factors (``NVIDIA/nccl-tests`` ``doc/PERFORMANCE.md``): all-reduce
moves ``2(n-1)/n`` of the buffer per rank, reduce-scatter and all-gather ``(n-1)/n``. A collective over a group
with ``k`` ranks on each of ``N`` nodes is taken as hierarchical (NCCL rings and trees over rail-optimised
NICs behave so): the ``k`` local ranks reduce over NVLink first, and each carries ``1/k`` of the buffer over
its NIC, so a node sends ``factor x buffer x (N-1)/N`` per group, summed over the node's groups.

Per step, by sharding (PyTorch defaults: FSDP2 reduce-scatters every micro-batch; DDP, ZeRO-1 and Megatron's
distributed optimizer reduce once per step with ``no_sync``; DeepSpeed ZeRO-2 reduces every micro-batch):

- ``none``: one all-reduce of the gradients;
- ``zero1``: a reduce-scatter of the gradients and an all-gather of the updated weights;
- ``zero2``: a reduce-scatter per micro-batch and one all-gather of the weights;
- ``zero3``: per micro-batch, two all-gathers of the weights (forward and backward, ``reshard_after_forward``)
  and a reduce-scatter of the gradients;
- ``hsdp``: ``zero3`` inside the shard group plus an all-reduce of the gradient shards across replicas.

Pipeline parallelism sends each micro-batch's boundary activations (``b x s x h`` in bf16) forward and their
gradients back; tensor parallelism across nodes all-reduces ``b x s x h`` four times per layer (Megatron-LM,
Shoeybi et al. 2019, Sec. 3); expert parallelism across nodes all-to-alls every routed token twice per MoE
layer and pass (dispatch and combine).
"""

from __future__ import annotations

from typing import Final

from estimator.job import Job
from estimator.memo import BoundedMemo
from estimator.model.spec import ModelShape
from estimator.training.layout import Layout
from estimator.training.tensors import local_tensors, stages

__all__ = ["NetworkTraffic", "inter_node_traffic"]


class NetworkTraffic:
    bytes_per_step_per_node: Final[int]  # sent by the busiest node (NICs are full duplex: as much is received)
    by_kind: Final[dict[str, int]]
    latency_sensitive: Final[bool]  # tp, cp or ep across nodes: many small, blocking messages

    def __init__(self, bytes_per_step_per_node: int, by_kind: dict[str, int], latency_sensitive: bool) -> None:
        self.bytes_per_step_per_node = bytes_per_step_per_node
        self.by_kind = by_kind
        self.latency_sensitive = latency_sensitive


def _sent(factor: float, buffer_bytes: float, group: int, local: int) -> float:
    """Bytes a node sends for one collective of ``buffer_bytes`` per rank over a group of ``group`` ranks of
    which ``local`` are on this node (hierarchical: the local ranks carry ``1/local`` each)."""
    local = max(1, min(group, local))
    nodes = -(-group // local)
    return 0.0 if nodes <= 1 else factor * buffer_bytes * (nodes - 1) / nodes


def _data_parallel(job: Job, layout: Layout, grads: float, weights: float,
                   weights_trainable: float) -> dict[str, float]:
    """Bytes per step a node sends for data-parallel / sharding collectives. Gradients are reduced, and model
    states sharded, over the data-parallel group *with* context parallelism (dp x cp ranks: cp ranks hold the
    same parameters and partial gradients; ``layout.shard_group`` spans them too), one group per tensor-parallel
    position."""
    g, m, s = layout.gpus_per_node, job.training.gradient_accumulation_steps, layout.sharding
    dp = layout.dp * layout.cp
    slots = max(1, min(g, layout.tp))  # distinct tensor-parallel positions on a node: one DP x CP group each
    local = max(1, g // slots)  # ranks of each DP x CP group on the node
    out: dict[str, float] = {}
    if s == "none":
        out["gradient all-reduce"] = _sent(2, grads, dp, local)
    elif s in ("zero1", "zero2"):
        out["gradient reduce-scatter"] = (m if s == "zero2" else 1) * _sent(1, grads, dp, local)
        out["weight all-gather"] = _sent(1, weights_trainable, dp, local)
    else:
        sg = layout.shard_group
        out["weight all-gather"] = m * 2 * _sent(1, weights, sg, local)
        out["gradient reduce-scatter"] = m * _sent(1, grads, sg, local)
        if s == "hsdp" and dp > sg:
            replicas = dp // sg
            local_r = max(1, local // sg)  # ranks of one replicate group on the node
            groups = max(1, local // local_r)  # replicate groups per model-parallel position on the node
            out["gradient all-reduce across replicas"] = m * groups * _sent(2, grads / sg, replicas, local_r)
    return {k: v * slots for k, v in out.items()}


_RANK_PARAMS: Final[BoundedMemo[tuple[object, ...], tuple[int, int]]] = BoundedMemo(4096)


def _rank_params(job: Job, shape: ModelShape, layout: Layout) -> tuple[int, int]:
    """(trainable, total) parameters of one model-parallel rank of the busiest stage, memoised on what
    :func:`local_tensors` reads (not the batch shape)."""
    t = job.training
    key = (t.method, t.lora_rank, t.lora_targets, shape, layout)
    return _RANK_PARAMS.get_or_compute(key, lambda: _rank_params_uncached(job, shape, layout))


def _rank_params_uncached(job: Job, shape: ModelShape, layout: Layout) -> tuple[int, int]:
    trainable = total = 0
    for stage in stages(layout):
        ts = local_tensors(job, shape, layout, stage)
        trainable = max(trainable, sum(x.numel * x.count for x in ts if x.trainable))
        total = max(total, sum(x.numel * x.count for x in ts))
    return trainable, total


def inter_node_traffic(job: Job, shape: ModelShape, layout: Layout) -> NetworkTraffic:
    rv = job
    t, p = rv.training, rv.parallelism
    g = layout.gpus_per_node
    if layout.num_nodes <= 1:
        return NetworkTraffic(0, {}, False)
    m = t.gradient_accumulation_steps
    grad_bytes = 2 if p.framework == "deepspeed" or t.precision == "bf16-true" else 4
    param_bytes = 4 if t.precision == "fp32" else 2
    trainable, total = _rank_params(job, shape, layout)
    kinds = _data_parallel(job, layout, trainable * grad_bytes, total * param_bytes, trainable * param_bytes)
    act = t.micro_batch_size * t.seq_len * shape.dims.hidden_size * 2 / layout.cp  # one rank's boundary tensor
    if layout.pp > 1:
        # a stage boundary between nodes: activations forward and their gradients back, each split over the tp
        # ranks (Megatron scatter/gather); a node sends across at most one boundary each way
        ranks_per_stage = layout.tp * layout.cp * layout.dp
        kinds["pipeline send/recv"] = 2.0 * m * act * min(g, ranks_per_stage) / layout.tp
    latency = False
    if layout.tp > g:
        # 4 all-reduces of the full activation per layer (2 forward, 2 backward), one TP group per node slot
        kinds["tensor-parallel all-reduce"] = 4 * layout.layers_per_stage * m * _sent(2, act, layout.tp, g)
        latency = True
    if layout.tp * layout.cp > g and layout.cp > 1:
        latency = True
    if shape.is_moe and layout.ep > 1 and layout.ep > g:
        tokens = t.micro_batch_size * t.seq_len / layout.cp / layout.tp
        moe_layers = round(layout.layers_per_stage * shape.moe_layers / shape.dims.num_layers)
        nodes = -(-layout.ep // g)
        per_gpu = tokens * shape.dims.experts_per_token * shape.dims.hidden_size * 2 * (nodes - 1) / nodes
        kinds["expert all-to-all"] = 4 * per_gpu * moe_layers * m * g  # dispatch + combine, forward + backward
        latency = True
    by_kind = {k: int(v) for k, v in kinds.items() if v > 0}
    return NetworkTraffic(sum(by_kind.values()), by_kind, latency)
