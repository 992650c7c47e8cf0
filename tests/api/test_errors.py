"""The error shape: every API error is problem+json with a request id; no tracebacks; HTML elsewhere."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem


def test_unknown_api_path_is_a_problem(client: TestClient) -> None:
    body = assert_problem(client.get("/api/v1/no-such-thing"), 404)
    assert body["instance"] == "/api/v1/no-such-thing"
    assert body["type"].startswith("urn:capplan:problem:")


def test_wrong_method_is_a_problem(client: TestClient) -> None:
    assert_problem(client.put("/api/v1/estimates", json={}), 405)


def test_page_errors_are_html(client: TestClient) -> None:
    r = client.get("/no-such-page", headers={"accept": "text/html"})
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["x-request-id"] in r.text


def test_page_errors_for_json_clients_are_problems(client: TestClient) -> None:
    assert_problem(client.get("/no-such-page", headers={"accept": "application/json"}), 404)


def test_an_unexpected_error_is_a_500_problem_without_traceback(app: FastAPI) -> None:
    @app.get("/api/v1/boom")
    def boom() -> None:
        raise RuntimeError("secret internals")

    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/api/v1/boom")
    body = assert_problem(r, 500)
    assert "secret internals" not in r.text
    assert body["request_id"] in body["detail"]


def test_insane_request_ids_are_replaced(client: TestClient) -> None:
    r = client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert r.headers["x-request-id"] != "bad id with spaces"
    assert len(r.headers["x-request-id"]) == 32


def test_validation_problem_lists_every_field(client: TestClient) -> None:
    r = client.post("/api/v1/estimates", json={"training": {"seq_len": 0, "micro_batch_size": 0}})
    body = assert_problem(r, 422, "training.seq_len", "training.micro_batch_size")
    pointers = {e["pointer"] for e in body["errors"]}
    assert "#/training/seq_len" in pointers
