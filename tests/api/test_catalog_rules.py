"""Cross-field rules of the shipped catalog's models (no location of their own) still name a field in a 422:
the fields the message mentions, else the fields the PATCH changed; and an unreadable body names ``body``."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from hardware_catalog import load_catalog
from tests.api.problems import assert_problem

GPU, SERVER, OFFER = "a100-sxm4-80gb", "nvidia-dgx-a100-320gb", "aws-p5-48xlarge"


@pytest.fixture
def catalog() -> Any:
    """The shipped catalog, whose models carry the cross-field rules (the API tests' fake one has none)."""
    return load_catalog()


@pytest.mark.parametrize(("url", "patch", "fields"), [
    # "memory_bytes is 0.01x memory_gb (...)": both named, only memory_gb was patched
    (f"/api/v1/catalog/gpus/{GPU}", {"set": {"memory_gb": 8000}}, ["set.memory_gb"]),
    # "expected fp32 <= tf32 <= bf16 TFLOP/s": no field named, so the patched one
    (f"/api/v1/catalog/gpus/{GPU}", {"set": {"fp32_tflops": 5000}}, ["set.fp32_tflops"]),
    # "price_usd needs price_date", after unsetting nothing and setting the date to null
    (f"/api/v1/catalog/servers/{SERVER}", {"set": {"price_date": None, "name": "x"}}, ["set.price_date"]),
    # "an offer needs an on-demand or a reserved price"
    (f"/api/v1/catalog/cloud-offers/{OFFER}", {"set": {"on_demand_usd_per_gpu_hour": None}},
     ["set.on_demand_usd_per_gpu_hour"]),
])
def test_a_cross_field_patch_error_names_the_patched_field(
    client: TestClient, auth: dict[str, str], url: str, patch: dict[str, Any], fields: list[str]
) -> None:
    problem = assert_problem(client.patch(url, json={**patch, "reason": "test"}, headers=auth), 422, *fields)
    assert [e["field"] for e in problem["errors"]] == fields
    assert all(e["field"] and e["pointer"].startswith("#/set/") for e in problem["errors"])


def test_a_cross_field_error_of_a_new_entry_names_the_fields_it_mentions(
    client: TestClient, auth: dict[str, str]
) -> None:
    server = client.get(f"/api/v1/catalog/servers/{SERVER}").json()["effective"]
    body = {**server, "id": "our-dgx", "price_date": None}
    problem = assert_problem(client.post("/api/v1/catalog/servers", json=body, headers=auth), 422,
                             "price_usd", "price_date")
    assert "price_usd needs price_date" in problem["errors"][0]["detail"]


@pytest.mark.parametrize("raw", [b'{"model": "llama-3.2-1b",}', b"{not json", b"[1, 2"])
def test_unreadable_json_names_the_body_and_says_why(client: TestClient, raw: bytes) -> None:
    r = client.post("/api/v1/estimates", content=raw, headers={"Content-Type": "application/json"})
    problem = assert_problem(r, 422, "body")
    error = problem["errors"][0]
    assert (error["field"], error["pointer"], error["type"]) == ("body", "#", "json_invalid")
    assert error["detail"].startswith("invalid JSON: ") and " at character " in error["detail"]
    assert problem["detail"] == "1 invalid field(s): body"
