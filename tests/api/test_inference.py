"""``POST /api/v1/inference-estimates``: one request, a list, engine refusals as 200s with the engine's error,
bad input as 422s naming the field, and the operation id."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem

URL = "/api/v1/inference-estimates"


@pytest.fixture
def catalog() -> Any:  # the cost adapter needs the real catalog's TCO defaults and prices
    from hardware_catalog import load_catalog

    return load_catalog()


def test_one_request_gives_memory_speed_cost_with_error_bars(client: TestClient) -> None:
    r = client.post(URL, json={"model": "llama-3.1-8b", "hardware": {"server": "dell-xe9680-h200"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["starts"] is True and body["errors"] == []
    mem = body["memory"]
    assert mem["weights_bytes"] == 16_060_522_496  # 8.03B bf16 parameters, as torch counts them on the H200
    assert mem["kv_bytes_per_token"] == 131_072  # 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    assert mem["kv_tokens"] == mem["num_blocks"] * 16
    assert mem["error_bar_pct"] > 0 and body["speed"]["error_bar_pct"] > 0 and body["cost"]["error_bar_pct"] > 0
    assert body["speed"]["replicas_per_node"] == 8
    assert body["cost"]["usd_per_million_output_tokens"] > 0
    assert body["command"].startswith("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 1")
    assert body["server"] == "dell-xe9680-h200"


def test_a_list_gives_a_list_in_order(client: TestClient) -> None:
    r = client.post(URL, json=[{"engine": "vllm"}, {"engine": "sglang"}, {"engine": "tensorrt-llm"}])
    assert r.status_code == 200, r.text
    assert [b["engine"] for b in r.json()] == ["vllm", "sglang", "tensorrt-llm"]
    assert "sglang.launch_server" in r.json()[1]["command"]


def test_a_set_up_vllm_refuses_is_a_200_with_vllms_own_error(client: TestClient) -> None:
    r = client.post(URL, json={"model": "llama-3.1-70b", "serving": {"max_model_len": 131072}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["starts"] is False and body["speed"] is None
    assert body["errors"][0].startswith("ValueError: No available memory for the cache blocks")


def test_max_model_len_too_long_names_the_length_that_fits(client: TestClient) -> None:
    r = client.post(URL, json={"model": "llama-3.1-70b", "serving": {"tensor_parallel_size": 2,
                                                                       "max_model_len": 10_000_000},
                               "workload": {"input_tokens": 1000, "output_tokens": 100}})
    body = r.json()
    assert body["starts"] is False
    assert "To serve at least one request with the model's max seq len (10000000)" in body["errors"][0]
    assert f"the estimated maximum model length is {body['memory']['longest_request_tokens']}" in body["errors"][0]


@pytest.mark.parametrize(("payload", "field"), [
    ({"serving": {"tensor_parallel_size": 0}}, "serving.tensor_parallel_size"),
    ({"serving": {"tensor_parallel_size": 16}}, "serving.tensor_parallel_size"),
    ({"workload": {"input_tokens": 8000, "output_tokens": 1000}}, "workload.output_tokens"),
    ({"serving": {"weights": "int3"}}, "serving.weights"),
    ({"engine": "ollama"}, "engine"),
    ({"serving": {"gpu_memory_utilization": 1.5}}, "serving.gpu_memory_utilization"),
    ({"hardware": {"gpu": "tpu-v5"}}, "hardware.gpu"),
    ({"hardware": {"server": "no-such-server"}}, "hardware.server"),
    ({"model": "no-such-model"}, "model"),
    ({"cost": {"basis": "cloud", "cloud_offer": "nope"}}, "cost.cloud_offer"),
    ({"servng": {}}, "servng"),
])
def test_bad_input_is_a_422_naming_the_field(client: TestClient, payload: dict[str, Any], field: str) -> None:
    assert_problem(client.post(URL, json=payload), 422, field)


def test_a_bad_item_in_a_list_is_named_by_its_index(client: TestClient) -> None:
    assert_problem(client.post(URL, json=[{}, {"hardware": {"gpu": "tpu-v5"}}]), 422, "1.hardware.gpu")
    assert_problem(client.post(URL, json=[{}, {"workload": {"output_tokens": 0}}]), 422, "1.workload.output_tokens")


def test_operation_id_follows_the_tag_function_style(client: TestClient) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    op = spec["paths"]["/api/v1/inference-estimates"]["post"]
    assert op["operationId"] == "inference-estimates-create_inference_estimates"
    assert "InferenceRequest" in spec["components"]["schemas"]


def test_both_cost_results_get_clean_component_names(client: TestClient) -> None:
    """The training estimate's ``CostResult`` and the serving ``ServingCostResult`` are two models; with one name
    for both, FastAPI fell back to module-path names (``estimator__cost__CostResult``)."""
    schemas = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    assert {"CostResult", "ServingCostResult"} <= set(schemas)
    assert not [name for name in schemas if "__" in name]
    assert "usd_per_million_output_tokens" in schemas["ServingCostResult"]["properties"]
    assert "usd_per_million_output_tokens" not in schemas["CostResult"]["properties"]
