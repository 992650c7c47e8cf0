"""Health, readiness, metrics, the offline docs and the OpenAPI document."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.core.db import make_engine
from app.deps import get_session
from estimator import native

EXTERNAL_URL = re.compile(r"""(?:src|href|url)\s*[=(:]\s*["']?\s*(?:https?:)?//(?!127\.0\.0\.1|localhost)""", re.I)


def test_healthz_and_readyz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}


def test_readyz_is_503_when_the_database_is_down(app: FastAPI, tmp_path: Path) -> None:
    """A database that cannot be reached (a SQLite file in a folder that does not exist): not ready."""
    down = make_engine(f"sqlite:///{tmp_path / 'no-such-folder' / 'capplan.db'}")

    def unreachable() -> Iterator[Session]:
        with Session(down) as session:
            yield session

    app.dependency_overrides[get_session] = unreachable
    try:
        with TestClient(app) as client:
            r = client.get("/readyz")
            assert client.get("/healthz").json() == {"status": "ok"}, "liveness does not depend on the database"
    finally:
        down.dispose()
    assert r.status_code == 503
    assert r.json() == {"status": "unavailable", "detail": "OperationalError"}


def test_metrics_count_requests_by_route_template(client: TestClient) -> None:
    client.get("/api/v1/quotes/12345")
    client.post("/api/v1/estimates", json={"model": "llama-3.2-1b"})
    text = client.get("/metrics").text
    assert 'capplan_http_requests_total{method="GET",route="/api/v1/quotes/{item_id}",status="404"} 1.0' in text
    assert 'capplan_estimates_total{endpoint="estimates"} 1.0' in text
    assert "12345" not in text


def test_metrics_say_whether_the_estimator_runs_compiled(client: TestClient) -> None:
    expected = "1.0" if native.status().active else "0.0"
    assert f"\ncapplan_estimator_compiled {expected}\n" in client.get("/metrics").text


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


#: the public operation ids, frozen: generated clients name their methods after them. A rename fails here; a
#: new operation must be added (ids are part of the API contract, and the README's REST table lists them).
FROZEN_OPERATION_IDS = {
    ("POST", "/api/v1/estimates"): "estimates-create_estimates",
    ("POST", "/api/v1/compare"): "compare-create_comparison",
    ("POST", "/api/v1/tco"): "tco-create_tco",
    ("POST", "/api/v1/plans"): "plans-create_plan",
    ("POST", "/api/v1/plans/reverse"): "plans-answer_reverse_question",
    ("POST", "/api/v1/tco/upgrade"): "tco-create_upgrade",
    ("GET", "/api/v1/catalog/models"): "catalog-list_models",
    ("GET", "/api/v1/catalog/gpus"): "catalog-list_gpus",
    ("GET", "/api/v1/catalog/servers"): "catalog-list_servers",
    ("GET", "/api/v1/catalog/cloud-offers"): "catalog-list_cloud_offers",
    ("GET", "/api/v1/catalog/gpus/{entry_id}"): "catalog-get_gpu",
    ("GET", "/api/v1/catalog/servers/{entry_id}"): "catalog-get_server",
    ("GET", "/api/v1/catalog/cloud-offers/{entry_id}"): "catalog-get_cloud_offer",
    ("POST", "/api/v1/catalog/gpus"): "catalog-create_gpu",
    ("POST", "/api/v1/catalog/servers"): "catalog-create_server",
    ("POST", "/api/v1/catalog/cloud-offers"): "catalog-create_cloud_offer",
    ("PATCH", "/api/v1/catalog/gpus/{entry_id}"): "catalog-override_gpu",
    ("PATCH", "/api/v1/catalog/servers/{entry_id}"): "catalog-override_server",
    ("PATCH", "/api/v1/catalog/cloud-offers/{entry_id}"): "catalog-override_cloud_offer",
    ("POST", "/api/v1/quotes"): "quotes-create_quote",
    ("GET", "/api/v1/quotes"): "quotes-list_quotes",
    ("GET", "/api/v1/quotes/{item_id}"): "quotes-get_quote",
    ("POST", "/api/v1/quotes/{item_id}/recompute"): "quotes-recompute_quote",
    ("DELETE", "/api/v1/quotes/{item_id}"): "quotes-delete_quote",
    ("GET", "/api/v1/quotes/{item_id}.json"): "quotes-export_quote_json",
    ("GET", "/api/v1/quotes/{item_id}.csv"): "quotes-export_quote_csv",
    ("GET", "/api/v1/quotes/{item_id}.pdf"): "quotes-export_quote_pdf",
    ("POST", "/api/v1/inference-estimates"): "inference-estimates-create_inference_estimates",
    ("GET", "/api/v1/quotes/{item_id}/print"): "quotes-print_quote",
    ("POST", "/api/v1/saved-plans"): "saved-plans-create_saved_plan",
    ("GET", "/api/v1/saved-plans"): "saved-plans-list_saved_plans",
    ("GET", "/api/v1/saved-plans/{item_id}"): "saved-plans-get_saved_plan",
    ("POST", "/api/v1/saved-plans/{item_id}/recompute"): "saved-plans-recompute_saved_plan",
    ("DELETE", "/api/v1/saved-plans/{item_id}"): "saved-plans-delete_saved_plan",
    ("GET", "/api/v1/saved-plans/{item_id}.json"): "saved-plans-export_saved_plan_json",
    ("GET", "/api/v1/saved-plans/{item_id}.csv"): "saved-plans-export_saved_plan_csv",
    ("GET", "/api/v1/saved-plans/{item_id}.pdf"): "saved-plans-export_saved_plan_pdf",
    ("GET", "/api/v1/saved-plans/{item_id}/print"): "saved-plans-print_saved_plan",
    ("POST", "/api/v1/clusters"): "clusters-create_cluster",
    ("POST", "/api/v1/clusters/nccl-checks"): "clusters-create_nccl_check",
    ("GET", "/api/v1/version"): "version-get_version",
    ("POST", "/api/v1/measurements"): "measurements-create_measurement",
    ("GET", "/api/v1/measurements"): "measurements-list_measurements",
    ("GET", "/api/v1/measurements/{measurement_id}"): "measurements-get_measurement",
    ("POST", "/api/v1/imports"): "imports-create_import",
}


def test_operation_ids_are_frozen(client: TestClient) -> None:
    schema = client.get("/api/v1/openapi.json").json()
    actual = {(m.upper(), p): op["operationId"] for p, ops in schema["paths"].items() for m, op in ops.items()}
    renamed = {k: (v, actual.get(k)) for k, v in FROZEN_OPERATION_IDS.items() if actual.get(k) != v}
    assert not renamed, f"operation ids changed or disappeared (frozen, got): {renamed}"
    new = {k: v for k, v in actual.items() if k not in FROZEN_OPERATION_IDS}
    assert not new, f"new operations: add them to FROZEN_OPERATION_IDS and to the README: {new}"


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
    computations = {"/api/v1/estimates", "/api/v1/compare", "/api/v1/plans", "/api/v1/plans/reverse", "/api/v1/tco",
                    "/api/v1/tco/upgrade", "/api/v1/inference-estimates", "/api/v1/clusters",
                    "/api/v1/clusters/nccl-checks", "/api/v1/imports"}
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            writes = method != "get" and path not in computations
            assert ("security" in op) == writes, (method, path)
