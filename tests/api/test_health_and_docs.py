"""Health, readiness, metrics, the offline docs and the OpenAPI document."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from fastapi.testclient import TestClient

EXTERNAL_URL = re.compile(r"""(?:src|href|url)\s*[=(:]\s*["']?\s*(?:https?:)?//(?!127\.0\.0\.1|localhost)""", re.I)


def test_healthz_and_readyz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}


def test_metrics_count_requests_by_route_template(client: TestClient) -> None:
    client.get("/api/v1/quotes/12345")
    client.post("/api/v1/estimates", json={"model": "llama-3.2-1b"})
    text = client.get("/metrics").text
    assert 'capplan_http_requests_total{method="GET",route="/api/v1/quotes/{item_id}",status="404"} 1.0' in text
    assert 'capplan_estimates_total{endpoint="estimates"} 1.0' in text
    assert "12345" not in text


@pytest.mark.parametrize("page", ["/api/v1/docs", "/api/v1/redoc"])
def test_docs_pages_load_nothing_from_other_hosts(client: TestClient, page: str) -> None:
    r = client.get(page)
    assert r.status_code == 200
    assert not EXTERNAL_URL.search(r.text), EXTERNAL_URL.search(r.text)
    for asset in re.findall(r'(?:src|href)="(/static/[^"]+)"', r.text):
        assert client.get(asset).status_code == 200, asset


def test_swagger_ui_does_not_call_the_online_validator(client: TestClient) -> None:
    assert '"validatorUrl": null' in client.get("/api/v1/docs").text


def test_operation_ids_are_unique_and_named_by_tag_and_function(client: TestClient) -> None:
    schema = client.get("/api/v1/openapi.json").json()
    ids = [op["operationId"] for ops in schema["paths"].values() for op in ops.values()]
    assert not [i for i, n in Counter(ids).items() if n > 1]
    assert {"estimates-create_estimates", "compare-create_comparison", "tco-create_tco", "quotes-create_quote",
            "quotes-recompute_quote", "catalog-override_server", "saved-plans-get_saved_plan"} <= set(ids)


def test_every_api_error_is_documented_as_problem_json(client: TestClient) -> None:
    schema = client.get("/api/v1/openapi.json").json()
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    assert list(response["content"]) == ["application/problem+json"], (method, path, status)


def test_writes_declare_the_api_key_and_reads_do_not(client: TestClient) -> None:
    schema = client.get("/api/v1/openapi.json").json()
    assert schema["components"]["securitySchemes"]["ApiKey"] == {
        "type": "apiKey", "in": "header", "name": "X-API-Key",
        "description": "Key made with `capplan api-keys create`; needed for every write."}
    computations = {"/api/v1/estimates", "/api/v1/compare", "/api/v1/plans", "/api/v1/plans/reverse", "/api/v1/tco"}
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            writes = method != "get" and path not in computations
            assert ("security" in op) == writes, (method, path)
