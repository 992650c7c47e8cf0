"""Clusters for the API and the page: the estimator's fabric design with its topology drawn (SVG), and the nccl-tests
check on a catalog server. Unknown ids and bad sizes are estimator errors naming the field (422)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.charts.topology import topology_svg
from estimator.cluster import ClusterRequest, ClusterResponse, NcclCheck, design_cluster
from estimator.cluster.nccl import NcclParseError, check_nccl
from estimator.errors import InvalidRequestError, UnknownHardwareError
from hardware_catalog import UnknownCatalogIdError

if TYPE_CHECKING:
    from app.schemas.clusters import NcclCheckRequest
    from hardware_catalog import Catalog

__all__ = ["compute_cluster", "run_nccl_check"]


def compute_cluster(req: ClusterRequest, catalog: Catalog) -> ClusterResponse:
    """The design, parts, power, racks, cost, TCO and scaling curve, with the topology drawing filled in."""
    result = design_cluster(req, catalog)
    server = catalog.server(req.server)
    return result.model_copy(update={"svg": topology_svg(result.design, server.name, req.num_nodes)})


def run_nccl_check(req: NcclCheckRequest, catalog: Catalog) -> NcclCheck:
    try:
        server = catalog.server(req.server)
    except UnknownCatalogIdError as exc:
        raise UnknownHardwareError(str(exc), "server") from None
    try:
        return check_nccl(req.text, server, catalog, nodes=req.nodes, gpus=req.gpus, collective=req.collective)
    except NcclParseError as exc:
        raise InvalidRequestError(exc.message, "text") from None
