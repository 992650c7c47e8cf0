"""The torchao 8-bit AdamW request value and the bitsandbytes refusal on DTensor layouts, through the API."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem

URL = "/api/v1/estimates"
EIGHT = {"model": "llama-3.1-8b", "training": {"method": "full", "seq_len": 4096, "activation_checkpointing": "full"},
         "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8}}


def test_openapi_lists_ao_adamw_8bit(client: TestClient) -> None:
    props = client.get("/api/v1/openapi.json").json()["components"]["schemas"]["Training"]["properties"]
    assert {"adamw-8bit", "ao-adamw-8bit", "adamw-4bit"} <= set(props["optimizer"]["enum"])


def test_ao_adamw_8bit_is_estimated_under_fsdp2(client: TestClient) -> None:
    body = {**EIGHT, "training": {**EIGHT["training"], "optimizer": "ao-adamw-8bit"},
            "parallelism": {"sharding": "fsdp", "framework": "pytorch"}}
    r = client.post(URL, json=body)
    assert r.status_code == 200, r.text
    assert any("torchao AdamW8bit" in a for a in r.json()["assumptions"])


@pytest.mark.parametrize("optimizer", ["adamw-8bit", "paged-adamw-8bit", "paged-adamw"])
def test_bitsandbytes_under_fsdp2_is_a_422_naming_the_optimizer(client: TestClient, optimizer: str) -> None:
    body = {**EIGHT, "training": {**EIGHT["training"], "optimizer": optimizer},
            "parallelism": {"sharding": "fsdp", "framework": "pytorch"}}
    problem = assert_problem(client.post(URL, json=body), 422, "training.optimizer")
    assert "DTensor" in problem["detail"] + str(problem["errors"])
    body["parallelism"]["framework"] = "deepspeed"
    assert client.post(URL, json=body).status_code == 200
