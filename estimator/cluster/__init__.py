"""From one node to a cluster (issue 32): the compute fabric of N nodes (:mod:`~estimator.cluster.fabric`, priced
and racked by :mod:`~estimator.cluster.design`), the scaling curve of a job over it
(:mod:`~estimator.cluster.scaling`) and the nccl-tests health check (:mod:`~estimator.cluster.nccl`). The contract
(request and response models) is :mod:`~estimator.cluster.contract`."""

from estimator.cluster.contract import (
    FABRIC_CHOICES,
    ClusterRequest,
    ClusterResponse,
    NcclCheck,
    ScalingPoint,
)
from estimator.cluster.design import design_cluster, nccl_commands
from estimator.cluster.fabric import Topology, design_topology

__all__ = [
    "FABRIC_CHOICES",
    "ClusterRequest",
    "ClusterResponse",
    "NcclCheck",
    "ScalingPoint",
    "Topology",
    "design_cluster",
    "design_topology",
    "nccl_commands",
]
