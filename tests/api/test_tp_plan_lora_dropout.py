"""The two request fields of issue 14 in the HTTP contract: ``training.lora_dropout`` and
``parallelism.tp_plan`` are in the OpenAPI document, change the estimate, and bad values are a 422 naming
the field."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem

URL = "/api/v1/estimates"
TP2 = {"model": "llama-3.1-8b", "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 1, "gpus_per_node": 2}}


def test_openapi_lists_both_fields(client: TestClient) -> None:
    doc = client.get("/api/v1/openapi.json").json()
    schemas = doc["components"]["schemas"]
    dropout = schemas["Training"]["properties"]["lora_dropout"]
    assert dropout["default"] == 0.0 and dropout["minimum"] == 0.0 and dropout["exclusiveMaximum"] == 1.0
    plan = schemas["Parallelism"]["properties"]["tp_plan"]
    choices = {v for alt in plan["anyOf"] for v in alt.get("enum", [])}
    assert choices == {"vocab-parallel", "replicated-embeddings"} and plan.get("default") is None
    assert "framework's default" in plan["description"]


def test_the_fields_change_the_estimate(client: TestClient) -> None:
    def peak(body: dict) -> int:
        r = client.post(URL, json=body)
        assert r.status_code == 200, r.text
        return int(r.json()["memory"]["peak_allocated_bytes"])

    vocab = peak({**TP2, "parallelism": {"tp": 2}})
    hf = peak({**TP2, "parallelism": {"tp": 2, "tp_plan": "replicated-embeddings"}})
    assert hf > vocab
    one = {"model": "llama-3.1-8b", "training": {"method": "lora", "micro_batch_size": 2},
           "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 1, "gpus_per_node": 1}}
    assert peak({**one, "training": {**one["training"], "lora_dropout": 0.05}}) > peak(one)


@pytest.mark.parametrize(("payload", "field"), [
    ({"training": {"lora_dropout": 1.0}}, "training.lora_dropout"),
    ({"training": {"lora_dropout": -0.1}}, "training.lora_dropout"),
    ({"training": {"lora_dropout": True}}, "training.lora_dropout"),
    ({"parallelism": {"tp_plan": "sharded"}}, "parallelism.tp_plan"),
    ({"parallelism": {"framework": "megatron", "tp_plan": "replicated-embeddings"}}, "parallelism.tp_plan"),
])
def test_bad_values_are_a_422_naming_the_field(client: TestClient, payload: dict, field: str) -> None:
    assert_problem(client.post(URL, json=payload), 422, field)
