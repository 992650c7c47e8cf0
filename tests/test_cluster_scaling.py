"""The scaling curve from one node to N (issue 32): one estimate per size, efficiency against the first size, and
the reasons when it drops below the threshold."""

from __future__ import annotations

import itertools

import pytest

from estimator import EstimateRequest, estimate
from estimator.cluster import ClusterRequest, design_cluster
from estimator.cluster.scaling import curve_sizes, scaling_curve
from estimator.errors import InvalidRequestError
from hardware_catalog import Catalog, load_catalog

JOB = {"model": "llama-3.1-70b",
       "training": {"train_tokens": 1e11, "gradient_accumulation_steps": 8, "activation_checkpointing": "full"},
       "parallelism": {"tp": 8, "sharding": "zero1", "framework": "megatron"}}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def test_sizes_double_up_to_the_node_count() -> None:
    assert curve_sizes(1) == [1]
    assert curve_sizes(16) == [1, 2, 4, 8, 16]
    assert curve_sizes(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert len(curve_sizes(10**6)) == 16 and curve_sizes(10**6)[-1] == 10**6
    assert curve_sizes(16, 2) == [2, 4, 8, 16] and curve_sizes(5, 2) == [2, 4]


def test_each_point_is_the_estimate_at_that_size(catalog: Catalog) -> None:
    job = EstimateRequest.model_validate(JOB)
    points = scaling_curve(job, catalog.server("nvidia-dgx-h100"), 16, catalog)
    assert [p.nodes for p in points] == [1, 2, 4, 8, 16]
    at8 = estimate(job.model_copy(update={"hardware": job.hardware.model_copy(update={
        "server": "nvidia-dgx-h100", "num_nodes": 8, "gpus_per_node": 8})}), catalog)
    p8 = points[3]
    assert p8.step_time_s == at8.time.step_time_s and p8.tokens_per_s == at8.time.tokens_per_s  # type: ignore[union-attr]
    assert p8.dp == 8 and p8.gpus == 64
    assert points[0].scaling_efficiency == 1.0
    assert p8.scaling_efficiency == pytest.approx(p8.tokens_per_s / 8 / points[0].tokens_per_s)
    assert all(a.scaling_efficiency >= b.scaling_efficiency - 1e-9 for a, b in itertools.pairwise(points[1:]))
    assert p8.cost_usd is not None and p8.time_to_train_s is not None
    breakdown = at8.time.breakdown_s  # type: ignore[union-attr]
    assert p8.collectives_s["data_parallel_s"] == breakdown["data_parallel_s"] > 0
    assert p8.collectives_s["tensor_parallel_exposed_s"] == breakdown["tensor_parallel_exposed_s"]
    assert "forward_s" not in p8.collectives_s and points[0].collectives_s["data_parallel_s"] == 0


def test_reasons_name_the_data_parallel_all_reduce_below_the_threshold(catalog: Catalog) -> None:
    job = EstimateRequest.model_validate(JOB)
    points = scaling_curve(job, catalog.server("nvidia-dgx-h100"), 64, catalog, threshold=0.99)
    below = [p for p in points if p.scaling_efficiency < 0.99 and p.fits]
    assert below and all(p.reasons for p in below)
    assert any("data-parallel all-reduce over the NICs" in r for p in below for r in p.reasons)
    assert not [p for p in points if p.scaling_efficiency >= 0.99 and p.fits and p.reasons]


def test_tensor_parallelism_across_nodes_is_named(catalog: Catalog) -> None:
    job = EstimateRequest.model_validate({**JOB, "parallelism": {"tp": 16, "sharding": "zero1",
                                                                 "framework": "megatron"}})
    points = scaling_curve(job, catalog.server("nvidia-dgx-h100"), 4, catalog, threshold=1.01)
    assert [p.nodes for p in points] == [2, 4]  # tp 16 needs two 8-GPU nodes
    assert any("crosses the NVLink domain of 8 GPUs" in r for r in points[-1].reasons)


def test_a_job_that_cannot_run_names_the_job_field(catalog: Catalog) -> None:
    job = EstimateRequest.model_validate({**JOB, "parallelism": {"tp": 2, "ep": 3}})
    with pytest.raises(InvalidRequestError) as err:
        scaling_curve(job, catalog.server("nvidia-dgx-h100"), 4, catalog)
    assert (err.value.field or "").startswith("job")


def test_the_cluster_response_carries_the_curve(catalog: Catalog) -> None:
    r = design_cluster(ClusterRequest.model_validate({"server": "hgx-b200-8gpu-cx7", "num_nodes": 64, "job": JOB}),
                       catalog)
    assert [p.nodes for p in r.scaling] == [1, 2, 4, 8, 16, 32, 64]
    assert all(p.gpus == p.nodes * 8 for p in r.scaling)
