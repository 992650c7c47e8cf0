"""Context parallelism in the host-side replica arithmetic, and strict integer hardware fields.

``layout.shard_group`` spans the cp ranks (dense states are sharded over dp x cp). The node's data-parallel
traffic (``host_network``) and the number of nodes that write optimizer states (``host_checkpoint``) must count
cp once: a cp = 2 job moves and writes what the same model sharded over the same number of ranks without cp
does.
"""

from __future__ import annotations

import pydantic
import pytest

from estimator.host.network import inter_node_traffic
from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.training.checkpoint import checkpoint_size
from estimator.training.layout import build_layout


def _req(sharding: str, cp: int, nodes: int, **par: object) -> EstimateRequest:
    return EstimateRequest.model_validate({
        "model": "llama-3.1-8b", "training": {"seq_len": 8192, "activation_checkpointing": "full"},
        "parallelism": {"sharding": sharding, "cp": cp, **par},
        "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": nodes, "gpus_per_node": 8}})


def _traffic(req: EstimateRequest) -> dict[str, int]:
    shape = ModelShape(resolve_model(req.model))
    return inter_node_traffic(job_of(req), shape, build_layout(job_of(req), shape)).by_kind


@pytest.mark.parametrize("sharding", ["none", "zero1", "zero2", "zero3"])
def test_data_parallel_traffic_counts_cp_once(sharding: str) -> None:
    """16 GPUs on 2 nodes: dp 8 x cp 2 reduces and shards over the same 16 ranks as dp 16."""
    with_cp, without = _traffic(_req(sharding, 2, 2)), _traffic(_req(sharding, 1, 2))
    assert with_cp and with_cp == without


def test_hsdp_replica_traffic_with_cp() -> None:
    """HSDP shard groups of 4 dp x 2 cp ranks = one node: 4 nodes hold 4 replicas; the cross-replica all-reduce
    moves 1/8 of the gradients per rank, as HSDP over 8 dp ranks without cp."""
    with_cp = _traffic(_req("hsdp", 2, 4, hsdp_shard_size=4))
    without = _traffic(_req("hsdp", 1, 4, hsdp_shard_size=8))
    assert with_cp["gradient all-reduce across replicas"] == without["gradient all-reduce across replicas"]
    assert "weight all-gather" not in with_cp  # the shard group stays on one node


def _writers(req: EstimateRequest) -> int:
    shape = ModelShape(resolve_model(req.model))
    return checkpoint_size(job_of(req), shape, build_layout(job_of(req), shape)).writer_nodes


def test_hsdp_checkpoint_writers_with_cp() -> None:
    """One HSDP replica (4 dp x 2 cp = 8 ranks) fits on one node: one node writes the sharded states."""
    assert _writers(_req("hsdp", 2, 4, hsdp_shard_size=4)) == _writers(_req("hsdp", 1, 4, hsdp_shard_size=8)) == 1


@pytest.mark.parametrize("field", ["num_nodes", "gpus_per_node"])
def test_hardware_integers_refuse_booleans(field: str) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        EstimateRequest.model_validate({"hardware": {field: True}})
    assert err.value.errors()[0]["loc"] == ("hardware", field)


def test_hardware_integers_accept_numeric_text() -> None:
    """The web form submits text."""
    hw = EstimateRequest.model_validate({"hardware": {"num_nodes": "2", "gpus_per_node": "4"}}).hardware
    assert (hw.num_nodes, hw.gpus_per_node) == (2, 4)

