"""Issue 15, finding 10: strict JSON types on the API, and a ``body`` entry for every body-level error.

Before: ``false`` passed as an integer (fields without the estimator's own bool guard), ``0``/``1`` as
booleans, ``"4096"`` and ``4096.0`` as integers; deep nesting, over-long integers and invalid UTF-8 were 400s
with ``errors: []``. The web forms keep their own (text) parsing: tests/test_pages.py covers them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from tests.api.problems import assert_problem

JOB: dict[str, Any] = {"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm5-80gb"}}
CUSTOM_SERVER = {"id": "acme-8x-h100", "name": "Acme 8x H100", "gpu_id": "h100-sxm5-80gb", "gpu_count": 8,
                 "price_usd": 250000, "sources": ["Acme quote 2026-11"]}


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(base))
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return data


LAX = [  # (path in the request, lax value that JSON mode refuses)
    ("training.seq_len", "4096"),
    ("training.seq_len", 4096.0),
    ("training.micro_batch_size", "1"),
    ("host.async_checkpoint", 0),
    ("host.async_checkpoint", 1),
    ("host.async_checkpoint", "true"),
    ("parallelism.sequence_parallel", 0),
    ("hardware.num_nodes", "2"),
    ("training.train_tokens", "1e9"),
]


@pytest.mark.parametrize(("path", "value"), LAX)
def test_estimates_refuse_lax_types(client: TestClient, path: str, value: Any) -> None:
    assert_problem(client.post("/api/v1/estimates", json=_with(JOB, path, value)), 422, path)
    batch = [JOB, _with(JOB, path, value)]
    assert_problem(client.post("/api/v1/estimates", json=batch), 422, f"1.{path}")


def test_strict_types_still_take_what_json_has(client: TestClient) -> None:
    """An integer for a float field, strings for enumerations and an array for a tuple are JSON's own types."""
    body = _with(_with(JOB, "training.train_tokens", 1000000000), "training.method", "lora")
    assert client.post("/api/v1/estimates", json=body).status_code == 200
    assert client.post("/api/v1/estimates", json=[body, JOB]).status_code == 200


@pytest.mark.parametrize(("url", "body", "field"), [
    ("/api/v1/plans", {**JOB, "top_k": True}, "top_k"),
    ("/api/v1/plans", {**JOB, "top_k": "5"}, "top_k"),
    ("/api/v1/plans", {**JOB, "global_batch_size": 8.0}, "global_batch_size"),
    ("/api/v1/plans/reverse", {**JOB, "question": "fewest-gpus", "top_k": True}, "top_k"),
    ("/api/v1/compare", {"request": _with(JOB, "training.seq_len", "1024"), "options": [{"gpu": "h100-sxm5-80gb"}]},
     "request.training.seq_len"),
    ("/api/v1/tco", {"server": "dgx-a100-80gb", "num_nodes": "2"}, "num_nodes"),
    ("/api/v1/tco", {"server": "dgx-a100-80gb", "num_nodes": True}, "num_nodes"),
    # the schemathesis boundaries phase: the serving cost's TCO assumptions took ``false`` for a number
    ("/api/v1/inference-estimates", {"cost": {"assumptions": {"staff_usd_per_year": False}}},
     "cost.assumptions.staff_usd_per_year"),
    ("/api/v1/inference-estimates", [{"hardware": {"gpus_per_node": "8"}}], "0.hardware.gpus_per_node"),
    ("/api/v1/inference-estimates", {"workload": {"input_tokens": 1024.0}}, "workload.input_tokens"),
])
def test_other_json_bodies_refuse_lax_types(client: TestClient, url: str, body: Any, field: str) -> None:
    assert_problem(client.post(url, json=body), 422, field)


def test_writes_refuse_lax_types(client: TestClient, auth: dict[str, str]) -> None:
    quote = {"name": "q", "customer": "c", "inputs": JOB, "price": 1, "server_count": "2"}
    assert_problem(client.post("/api/v1/quotes", json=quote, headers=auth), 422, "server_count")
    assert_problem(client.post("/api/v1/quotes", json={**quote, "server_count": True}, headers=auth), 422,
                   "server_count")
    servers = "/api/v1/catalog/servers"
    assert_problem(client.post(servers, json={**CUSTOM_SERVER, "gpu_count": "8"}, headers=auth), 422, "gpu_count")
    assert_problem(client.post(servers, json={**CUSTOM_SERVER, "price_usd": "250000"}, headers=auth), 422,
                   "price_usd")
    patch = {"set": {"gpu_count": 8.0}, "reason": "lax"}
    assert_problem(client.patch(f"{servers}/dgx-a100-80gb", json=patch, headers=auth), 422, "set.gpu_count")
    assert client.get(f"{servers}/dgx-a100-80gb").json()["overrides"] == {}
    assert client.post(servers, json=CUSTOM_SERVER, headers=auth).status_code == 201
    assert client.post("/api/v1/quotes", json={**quote, "server_count": 2}, headers=auth).status_code == 201


def test_a_write_without_a_key_is_still_a_401_first(client: TestClient) -> None:
    r = client.post("/api/v1/quotes", json={"name": "q", "customer": "c", "inputs": JOB, "price": 1,
                                            "server_count": "2"})
    assert_problem(r, 401)


@pytest.mark.parametrize(("body", "reason"), [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"model": "llama-3.2-1b", "training": {"seq_len": ' + b"9" * 5000 + b"}}", "too many digits"),
    (b'{"model": "llama-3.2-1b\xff\xfe"}', "not UTF-8"),
    (b'{"model": "\xc3"}', "not UTF-8"),
])
def test_unreadable_bodies_name_the_body(client: TestClient, body: bytes, reason: str) -> None:
    for url in ("/api/v1/estimates", "/api/v1/plans", "/api/v1/tco"):
        r = client.post(url, content=body, headers={"Content-Type": "application/json"})
        problem = assert_problem(r, 400, "body")
        assert reason in problem["detail"]
        assert problem["errors"] == [{"field": "body", "pointer": "#", "detail": problem["detail"],
                                      "type": "json_invalid"}]


@pytest.mark.parametrize("url", ["/api/v1/estimates", "/api/v1/plans"])
def test_nesting_past_the_validators_limit_names_the_body(client: TestClient, url: str) -> None:
    """300 levels: Python's json reads them (it stops near 1,000), pydantic-core's parser stops at 200: a 422 at
    body, without a line and column (for the estimates list, they would be in the text re-made for strict mode)."""
    deep = "[" * 300 + "]" * 300
    body = '{"model": {"hf_config": {"x": ' + deep + "}}}"
    problem = assert_problem(client.post(url, content=body, headers={"Content-Type": "application/json"}), 422,
                             "body")
    assert "recursion limit exceeded" in problem["errors"][0]["detail"]
    if url.endswith("estimates"):
        assert "column" not in problem["errors"][0]["detail"]


@pytest.mark.parametrize("url", ["/api/v1/estimates", "/api/v1/catalog/servers", "/api/v1/plans"])
def test_a_body_not_sent_as_json_is_a_422(client: TestClient, auth: dict[str, str], url: str) -> None:
    """Found by the coverage phase with strict mode on: a JSON text sent as ``text/plain`` reaches a route whose
    body is typed ``Any`` as bytes; it is a type error at ``body``, never a 500."""
    r = client.post(url, content=json.dumps(JOB).encode(), headers={"Content-Type": "text/plain", **auth})
    assert_problem(r, 422, "body")


def test_a_syntax_error_still_names_the_body_with_the_character(client: TestClient) -> None:
    problem = assert_problem(client.post("/api/v1/estimates", content=b'{"model":',
                                         headers={"Content-Type": "application/json"}), 422, "body")
    assert "at character" in problem["errors"][0]["detail"]


runner = CliRunner()


@pytest.fixture
def cli_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from app.core.settings import get_settings

    monkeypatch.setenv("CAPPLAN_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    get_settings.cache_clear()
    return tmp_path


@pytest.mark.parametrize(("command", "content", "message"), [
    ("estimate", json.dumps(_with(JOB, "training.seq_len", "4096")),
     "training.seq_len: Input should be a valid integer"),
    ("estimate", json.dumps([JOB, _with(JOB, "host.async_checkpoint", 1)]),
     "1.host.async_checkpoint: Input should be a valid boolean"),
    ("plan", json.dumps({**JOB, "top_k": False}), "top_k: Input should be a valid integer"),
    ("estimate", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("estimate", '{"training": {"seq_len": ' + "9" * 5000 + "}}", "is not valid JSON"),
])
def test_the_cli_is_strict_too(cli_db: Path, command: str, content: str, message: str) -> None:
    path = cli_db / "in.json"
    path.write_text(content)
    result = runner.invoke(cli, [command, "--input", str(path)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
