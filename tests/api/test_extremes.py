"""The largest inputs each computation accepts give a result JSON can carry, or a 422 naming a field: never a 500.

Schemathesis found one such 500 (``POST /api/v1/tco/upgrade``: 1e16 tokens of a 405B model on one server is an
estimate past ``JobCost``'s 1e11 s bound, see ``tests/api/test_tco.py``). These are the same class of input for
the other computations: every request bound at its maximum (1e16 train tokens, a 10M-token sequence, a million
accumulation steps, 100,000 nodes of 64 GPUs, a 1% utilisation, 1e7 requests a second), and the responses parsed
with non-finite numbers refused (``Infinity`` / ``NaN`` are no JSON)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient


@pytest.fixture
def catalog() -> Any:  # the real catalog: prices, cloud offers, servers
    from hardware_catalog import load_catalog

    return load_catalog()


def _refuse(constant: str) -> float:
    raise AssertionError(f"the response carries {constant}, which is no JSON")


def _finite_or_422(response: httpx2.Response) -> dict[str, Any]:
    assert response.status_code in (200, 201, 422), response.text[:500]
    body: dict[str, Any] = json.loads(response.text, parse_constant=_refuse)
    if response.status_code == 422:
        assert body["errors"] and all(e["field"] for e in body["errors"]), body
    return body


BIG = {"model": "llama-3.1-405b", "parallelism": {"sharding": "zero3", "offload": "optimizer+params"}}
ONE_GPU = {"gpu": "h100-sxm5-80gb", "gpus_per_node": 1, "num_nodes": 1}
MOST_GPUS = {"gpu": "h100-sxm5-80gb", "gpus_per_node": 72, "num_nodes": 100_000}  # MAX_GPUS_PER_NODE
TRAININGS = [
    {"method": "full", "train_tokens": 1e16},
    {"method": "full", "train_tokens": 1e16, "seq_len": 10_000_000},
    {"method": "full", "train_tokens": 1e16, "gradient_accumulation_steps": 1_000_000, "micro_batch_size": 65536},
    {"method": "lora", "train_tokens": 1e16, "lora_rank": 4096},
]
COSTS = [None, {"basis": "own", "utilisation": 0.01}, {"basis": "rent"}]


def _estimate(training: dict[str, Any], hardware: dict[str, Any], cost: dict[str, Any] | None) -> dict[str, Any]:
    return {**BIG, "training": training, "hardware": hardware, **({"cost": cost} if cost else {})}


@pytest.mark.parametrize("cost", COSTS)
@pytest.mark.parametrize("hardware", [ONE_GPU, MOST_GPUS])
@pytest.mark.parametrize("training", TRAININGS)
def test_estimates_at_the_bounds(client: TestClient, training: dict[str, Any], hardware: dict[str, Any],
                                 cost: dict[str, Any] | None) -> None:
    body = _finite_or_422(client.post("/api/v1/estimates", json=_estimate(training, hardware, cost)))
    if "train" in body and body["train"] is not None:  # the one-GPU 1e16-token run: ~1e12 s, still a number
        assert body["train"]["time_to_train_s"] > 0


@pytest.mark.parametrize("training", TRAININGS[:2])
def test_compare_at_the_bounds(client: TestClient, training: dict[str, Any]) -> None:
    request = _estimate(training, ONE_GPU, {"basis": "rent"})
    _finite_or_422(client.post("/api/v1/compare", json={"request": request, "options": [ONE_GPU, MOST_GPUS]}))


@pytest.mark.parametrize("constraints", [{}, {"max_nodes": 1024, "budget_usd": 1e-300}, {"deadline_days": 1e-300},
                                         {"deadline_days": 1e300, "budget_usd": 1e300}])
@pytest.mark.parametrize("training", [{"method": "full", "train_tokens": 1e16, "seq_len": 10_000_000},
                                      {"method": "full", "train_tokens": 1, "seq_len": 1}])
def test_plans_at_the_bounds(client: TestClient, training: dict[str, Any], constraints: dict[str, Any]) -> None:
    body = {"model": "llama-3.1-405b", "training": training, "constraints": constraints}
    _finite_or_422(client.post("/api/v1/plans", json=body))


@pytest.mark.parametrize("nodes", [(1, 100_000), (100_000, 1), (100_000, 100_000)])
def test_tco_and_upgrade_at_the_node_bounds(client: TestClient, nodes: tuple[int, int]) -> None:
    job = {"model": "llama-3.2-1b", "training": {"method": "full", "train_tokens": 1e16}}
    _finite_or_422(client.post("/api/v1/tco", json={
        "server": "nvidia-dgx-h100", "num_nodes": nodes[0], "job": job,
        "assumptions": {"utilisation": 0.01, "horizon_years": 15}}))
    _finite_or_422(client.post("/api/v1/tco/upgrade", json={
        "job": job, "current": {"server": "nvidia-dgx-h100", "num_nodes": nodes[0]},
        "candidate": {"server": "nvidia-dgx-b200", "num_nodes": nodes[1]}}))


@pytest.mark.parametrize("workload", [
    {"input_tokens": 10_000_000, "output_tokens": 10_000_000, "request_rate_per_s": 1e7},
    {"input_tokens": 1, "output_tokens": 1, "concurrency": 100_000},
    {"request_rate_per_s": 1e-300},
])
@pytest.mark.parametrize("serving", [{}, {"max_model_len": 10_000_000, "max_num_seqs": 100_000,
                                          "max_num_batched_tokens": 10_000_000}])
def test_inference_estimates_at_the_bounds(client: TestClient, serving: dict[str, Any],
                                           workload: dict[str, Any]) -> None:
    body = {"model": "llama-3.1-405b", "hardware": {"gpu": "h100-sxm5-80gb", "gpus_per_node": 64},
            "serving": serving, "workload": workload}
    _finite_or_422(client.post("/api/v1/inference-estimates", json=body))


def test_a_quote_at_the_bounds_saves_reads_exports_and_recomputes(client: TestClient, auth: dict[str, str]) -> None:
    inputs = _estimate(TRAININGS[0], ONE_GPU, {"basis": "own", "utilisation": 0.01})
    created = client.post("/api/v1/quotes", headers=auth, json={
        "name": "longest", "customer": "c", "price": 1e12, "server_count": 100_000, "inputs": inputs})
    item = _finite_or_422(created)
    assert created.status_code == 201, created.text
    base = f"/api/v1/quotes/{item['id']}"
    for response in (client.get(base, headers=auth), client.get(f"{base}.json", headers=auth),
                     client.post(f"{base}/recompute", headers=auth)):
        _finite_or_422(response)
        assert response.status_code == 200
    pdf = client.get(f"{base}.pdf", headers=auth)
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
