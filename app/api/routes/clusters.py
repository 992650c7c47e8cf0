"""``POST /api/v1/clusters``: the compute fabric of N nodes (leaf / spine / core, links, cables, optics, power,
racks, cost, TCO), its topology as SVG, nccl-tests command lines and, with a `job`, the scaling curve;
``POST /api/v1/clusters/nccl-checks``: nccl-tests output judged against the published bus bandwidth."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import CatalogDep, MetricsDep
from app.schemas.clusters import NcclCheckRequest
from app.schemas.problem import problem_responses
from app.services.clusters import compute_cluster, run_nccl_check
from estimator.cluster import ClusterRequest, ClusterResponse, NcclCheck

router = APIRouter(prefix="/clusters", tags=["clusters"])


@router.post("", responses=problem_responses(422),
             summary="Cluster fabric for N nodes: design, parts, power, racks, cost, TCO, scaling curve")
def create_cluster(body: ClusterRequest, catalog: CatalogDep, metrics: MetricsDep) -> ClusterResponse:
    """Rail-optimised compute fabric for `num_nodes` x `server` on `fabric` (ib-ndr, ib-xdr, roce-400, roce-800):
    non-blocking two tiers up to the switch radix, three beyond (or `oversubscription` at the leaves, an explicit
    choice); leaf, spine and core counts, links, cables and transceivers (twin-port OSFP where the node has fewer
    cages than NICs), the UFM appliance, switch and optics power, switch rack units, cost from the catalog (parts
    without a price are listed), the ownership TCO with this fabric as its networking; `svg` draws it. With a `job`,
    `scaling` has tokens/s, step time, MFU, scaling efficiency, time and cost per run from 1 node to `num_nodes`, with
    reasons under `scaling_threshold`. 0 nodes, more `switch_ports` than the switch has, NICs the fabric cannot take
    and more nodes than three tiers hold are 422s naming the field."""
    metrics.estimates.labels("clusters").inc()
    return compute_cluster(body, catalog)


@router.post("/nccl-checks", responses=problem_responses(422),
             summary="Is the node healthy? nccl-tests output against the published bus bandwidth")
def create_nccl_check(body: NcclCheckRequest, catalog: CatalogDep, metrics: MetricsDep) -> NcclCheck:
    """Every run in `text` (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf output): peak bus
    bandwidth at 256 MB and more against the published figure for `server` and the path (in one node: NVLink;
    across nodes: the NICs), healthy at 90 % or better, else how far below with the likely causes; two nodes without
    NCCL_ALGO=Ring are flagged (tree overstates). Text without result rows is a 422 naming `text`."""
    metrics.estimates.labels("nccl-check").inc()
    return run_nccl_check(body, catalog)
