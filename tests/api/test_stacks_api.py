"""Issue 29 in the HTTP contract: ``training.stack``, ``loss_kernel``, ``fused_kernels``,
``activation_offloading`` and the new optimizers are in the OpenAPI document, a stack's defaults come back in
the estimate's assumptions, and unknown values or refused combinations are a 422 naming the field."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem

URL = "/api/v1/estimates"
ONE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 1}}


def test_openapi_lists_the_fields(client: TestClient) -> None:
    props = client.get("/api/v1/openapi.json").json()["components"]["schemas"]["Training"]["properties"]
    stack = props["stack"]
    assert set(stack["enum"]) == {"transformers", "trl", "axolotl", "llama-factory", "torchtune", "unsloth"}
    assert stack["default"] == "transformers"
    for field, values, default in (("loss_kernel", {"materialized", "chunked", "fused"}, "materialized"),
                                   ("fused_kernels", {"none", "liger"}, "none"),
                                   ("activation_offloading", {"none", "checkpoints", "all"}, "none")):
        choices = {v for alt in props[field]["anyOf"] for v in alt.get("enum", [])}
        assert choices == values and props[field]["default"] == default  # the transformers stack's: today's
        assert any(alt.get("type") == "null" for alt in props[field]["anyOf"])  # null: the stack's default
        assert "stack's default" in props[field]["description"]
    assert {"paged-adamw-8bit", "paged-adamw", "adamw-4bit", "muon"} <= set(props["optimizer"]["enum"])


def test_a_stack_is_resolved_and_named(client: TestClient) -> None:
    r = client.post(URL, json={**ONE, "training": {"method": "lora", "stack": "torchtune"}})
    assert r.status_code == 200, r.text
    assumptions = r.json()["assumptions"]
    assert any(a.startswith("Stack torchtune: loss_kernel chunked (torchtune torchtune/modules/loss/"
                            "ce_chunked_output_loss.py") for a in assumptions)
    assert any("enable_activation_checkpointing: True" in a for a in assumptions)


@pytest.mark.parametrize(("payload", "field"), [
    ({"training": {"stack": "nemo"}}, "training.stack"),
    ({"training": {"loss_kernel": "cut"}}, "training.loss_kernel"),
    ({"training": {"fused_kernels": True}}, "training.fused_kernels"),
    ({"training": {"activation_offloading": "disk"}}, "training.activation_offloading"),
    ({"training": {"optimizer": "galore"}}, "training.optimizer"),
    ({"training": {"stack": "trl", "fused_kernels": "liger", "loss_kernel": "chunked"}}, "training.loss_kernel"),
    ({"training": {"activation_offloading": "checkpoints"}}, "training.activation_offloading"),
    ({"training": {"stack": "unsloth"}, "parallelism": {"sharding": "fsdp"}}, "training.stack"),
    ({"training": {"optimizer": "paged-adamw-8bit"}, "parallelism": {"offload": "optimizer", "sharding": "fsdp"}},
     None),
])
def test_bad_values_are_a_422_naming_the_field(client: TestClient, payload: dict, field: str | None) -> None:
    r = client.post(URL, json={**ONE, **payload})
    if field is None:  # the optimizer's own refusal of CPU offload (estimator.layout), as for 8-bit AdamW
        assert r.status_code == 422 and "unified memory" in r.text
        return
    assert_problem(r, 422, field)
