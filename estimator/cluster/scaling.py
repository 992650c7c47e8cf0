"""The scaling curve of one job from one node to N: :func:`scaling_curve`.

At each size the job keeps its layout inside the node (tensor, pipeline, context parallelism and the micro-batch)
and data parallelism grows with the nodes (weak scaling: the global batch grows with it, as when a run is moved to
a larger cluster at the same per-GPU batch). Each point is one :func:`estimator.estimate` on the same catalog:
step time, tokens/s, MFU, the collectives and how much of them is exposed, time to train and cost per run.
Scaling efficiency is tokens/s at N nodes over N times tokens/s at the first size (Narayanan et al., SC'21,
"Efficient large-scale language model training on GPU clusters using Megatron-LM", Sec. 5.1: weak-scaling
throughput per GPU). Below ``threshold`` the point says why, from the step's breakdown: data-parallel all-reduce
over the NICs, pipeline bubbles, tensor parallelism crossing the NVLink domain, or memory.

The estimator times inter-node collectives on the server's NICs (the catalog's measured per-NIC bandwidth); an
oversubscribed fabric is not modelled in the step time (said on the page).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from estimator.cluster.contract import ScalingPoint
from estimator.errors import EstimatorError, InvalidRequestError
from estimator.training.comm import scale_up_gpus

if TYPE_CHECKING:
    from estimator.request import EstimateRequest
    from hardware_catalog import Catalog, Server

__all__ = ["curve_sizes", "scaling_curve", "traffic"]

#: share of the step above which a cause is named
CAUSE_SHARE: Final = 0.05
MAX_POINTS: Final = 16
#: the step breakdown's collective entries (estimator.training.timing: per parallelism, total and exposed)
COLLECTIVE_KEYS: Final = ("parallel_s", "parallel_exposed_s", "p2p_s", "p2p_exposed_s")


def curve_sizes(num_nodes: int, start: int = 1) -> list[int]:
    """``start``, 2 x ``start``, 4 x ``start``, ... up to ``num_nodes``, and ``num_nodes`` itself when it is a
    multiple of ``start`` (at most :data:`MAX_POINTS` sizes)."""
    sizes: list[int] = []
    n = start
    while n < num_nodes and len(sizes) < MAX_POINTS - 1:
        sizes.append(n)
        n *= 2
    if num_nodes % start == 0 or not sizes:
        sizes.append(max(num_nodes, start))
    return sizes


def smallest_size(job: EstimateRequest, gpus_per_node: int) -> int:
    """The fewest nodes whose GPUs the job's model-parallel group (tp x pp x cp) divides."""
    group = job.parallelism.tp * job.parallelism.pp * job.parallelism.cp
    return group // math.gcd(group, gpus_per_node)


def _on(job: EstimateRequest, server: Server, nodes: int) -> EstimateRequest:
    hw = job.hardware.model_copy(update={"server": server.id, "gpu": server.gpu_id, "num_nodes": nodes,
                                         "gpus_per_node": server.gpu_count})
    return job.model_copy(update={"hardware": hw})


def traffic(dp: int, tp: int, pp: int, cp: int, ep: int, domain: int) -> tuple[list[str], list[str]]:
    """(parallelisms whose collectives cross the compute fabric, those that stay on NVLink) for a layout on a
    scale-up ``domain`` of GPUs, placed as the step-time model places them (:func:`estimator.training.comm.
    place_group`: tensor innermost, then context, data, pipeline outermost). On an NVL72 (domain 72) tensor,
    expert and context groups up to the domain stay on NVLink and the fabric carries data parallelism and the
    pipeline's sends; on 8-GPU nodes a TP or EP group of 16 crosses the NICs."""
    from estimator.training.comm import place_group

    groups = (("tensor", tp, 1), ("context", cp, tp), ("expert", ep, 1), ("data", dp, tp * cp),
              ("pipeline", pp, tp * cp * dp))
    fabric: list[str] = []
    nvlink: list[str] = []
    for name, size, stride in groups:
        if size <= 1:
            continue
        (fabric if place_group(size, stride, domain).nodes > 1 else nvlink).append(name)
    return fabric, nvlink


def _reasons(job: EstimateRequest, server: Server, nodes: int, fits: bool, step: float,
             breakdown: dict[str, float], bubble: float) -> list[str]:
    out = []
    dp = breakdown.get("data_parallel_exposed_s", 0.0)
    if nodes > 1 and dp > CAUSE_SHARE * step:
        out.append(f"data-parallel all-reduce over the NICs: {dp:.2f} s of the {step:.2f} s step is not hidden "
                   f"behind backward ({dp / step:.0%})")
    if bubble > CAUSE_SHARE * step:
        out.append(f"pipeline bubble: {bubble:.2f} s of the step ({bubble / step:.0%}); more micro-batches per "
                   "step or an interleaved schedule shrink it")
    tp, ep, domain = job.parallelism.tp, job.parallelism.ep, scale_up_gpus(server, server.gpu_count)
    if tp > domain:
        tp_s = breakdown.get("tensor_parallel_exposed_s", 0.0)
        out.append(f"tensor parallelism ({tp}) crosses the NVLink domain of {domain} GPUs: its "
                   f"collectives ride the NICs ({tp_s:.2f} s exposed)")
    if ep > domain:
        out.append(f"expert parallelism ({ep}) crosses the NVLink domain of {domain} GPUs: its all-to-alls "
                   "ride the NICs")
    pp_s = breakdown.get("pipeline_p2p_exposed_s", 0.0)
    if pp_s > CAUSE_SHARE * step:
        out.append(f"pipeline sends between stages: {pp_s:.2f} s exposed")
    if not fits:
        out.append("does not fit in GPU memory at this size (sharding over more data-parallel ranks helps)")
    if not out:
        out.append("communication that grows with the node count (no single cause above 5 % of the step)")
    return out


def scaling_curve(job: EstimateRequest, server: Server, num_nodes: int, catalog: Catalog,
                  threshold: float = 0.8) -> list[ScalingPoint]:
    """One point per size of :func:`curve_sizes` from the fewest nodes the job's model-parallel group fits
    (:func:`smallest_size`); efficiency against the first size's per-node tokens/s."""
    from estimator import estimate

    points: list[ScalingPoint] = []
    base = 0.0
    for nodes in curve_sizes(num_nodes, smallest_size(job, server.gpu_count)):
        try:
            res = estimate(_on(job, server, nodes), catalog)
        except EstimatorError as exc:
            field = exc.field or ""
            raise InvalidRequestError(f"the job at {nodes} nodes: {exc}", f"job.{field}" if field else "job") from exc
        t = res.time
        if t is None:
            continue
        per_node = t.tokens_per_s / nodes
        if base == 0.0:
            base = per_node
        eff = per_node / base if base > 0 else 0.0
        fits = bool(res.memory.fits)
        reasons = _reasons(job, server, nodes, fits, t.step_time_s, t.breakdown_s, t.bubble_s) \
            if eff < threshold or not fits else []
        lay = res.layout
        over_fabric, over_nvlink = traffic(lay.dp, lay.tp, lay.pp, lay.cp, lay.ep,
                                        scale_up_gpus(server, server.gpu_count))
        points.append(ScalingPoint(
            fabric_traffic=over_fabric, nvlink_traffic=over_nvlink,
            nodes=nodes, gpus=nodes * server.gpu_count, dp=res.layout.dp, step_time_s=t.step_time_s,
            tokens_per_s=t.tokens_per_s, mfu=t.mfu, scaling_efficiency=eff, communication_s=t.communication_s,
            exposed_communication_s=t.exposed_communication_s, bubble_s=t.bubble_s,
            time_to_train_s=res.train.time_to_train_s if res.train is not None else None,
            cost_usd=res.cost.total_usd if res.cost is not None else None, fits=fits, reasons=reasons,
            collectives_s={k: v for k, v in t.breakdown_s.items() if k.endswith(COLLECTIVE_KEYS)}))
    return points
