"""Issue 15, finding 9: security headers on every response, the allowed-host list, and forwarded headers
trusted only from the proxies named in ``CAPPLAN_FORWARDED_ALLOW_IPS`` (none by default)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from app.core.settings import Settings, get_settings
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.main import create_app
from tests.api.fake_catalog import fake_catalog
from tests.api.problems import assert_problem

ROOT = Path(__file__).resolve().parents[2]
JOB = {"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm5-80gb"}}
HEADERS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "same-origin"}


def _csp(response: httpx2.Response) -> dict[str, str]:
    policy = response.headers["content-security-policy"]
    return {d.split(" ", 1)[0]: d.split(" ", 1)[1] if " " in d else "" for d in policy.split("; ")}


def _nonce(response: httpx2.Response) -> str:
    match = re.search(r"'nonce-([^']+)'", _csp(response)["script-src"])
    assert match, response.headers["content-security-policy"]
    return match.group(1)


@pytest.mark.parametrize(("method", "path", "kwargs", "status"), [
    ("GET", "/api/v1/catalog/gpus", {}, 200),
    ("POST", "/api/v1/estimates", {"json": JOB}, 200),
    ("POST", "/api/v1/estimates", {"json": {"model": 1}}, 422),
    ("GET", "/api/v1/quotes/999", {}, 404),
    ("POST", "/api/v1/quotes", {"json": {}}, 401),
    ("GET", "/healthz", {}, 200),
    ("GET", "/metrics", {}, 200),
    ("GET", "/api/v1/docs", {}, 200),
    ("GET", "/api/v1/redoc", {}, 200),
    ("GET", "/api/v1/openapi.json", {}, 200),
    ("GET", "/static/js/app.js", {}, 200),
    ("GET", "/no/such/page", {}, 404),
])
def test_every_response_carries_the_security_headers(
    client: TestClient, method: str, path: str, kwargs: dict[str, Any], status: int
) -> None:
    r = client.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    for name, value in HEADERS.items():
        assert r.headers[name] == value, name
    csp = _csp(r)
    assert csp["frame-ancestors"] == "'none'"
    assert csp["default-src"] == "'self'"
    assert csp["script-src"].split() == ["'self'", f"'nonce-{_nonce(r)}'"], "no unsafe-inline, no unsafe-eval"
    assert csp["object-src"] == "'none'" and csp["form-action"] == "'self'" and csp["base-uri"] == "'self'"


def test_the_nonce_is_fresh_per_response_and_on_the_swagger_script(client: TestClient) -> None:
    first, second = client.get("/api/v1/docs"), client.get("/api/v1/docs")
    assert _nonce(first) != _nonce(second) and len(_nonce(first)) >= 22
    scripts = re.findall(r"<script([^>]*)>", first.text)
    inline = [attrs for attrs in scripts if "src=" not in attrs]
    assert inline == [f' nonce="{_nonce(first)}"'], scripts
    assert all(re.search(r'src="/static/', attrs) for attrs in scripts if "src=" in attrs), "no CDN"
    redoc = client.get("/api/v1/redoc").text
    assert [a for a in re.findall(r"<script([^>]*)>", redoc) if "src=" not in a] == []


def test_a_host_not_allowed_is_refused(client: TestClient) -> None:
    """A DNS-rebinding page sends ``Host`` and ``Origin`` of its own name; the same-origin check of the forms
    passes for it (they agree), the allowed-host list does not."""
    rebinding = {"Host": "rebind.evil.example", "Origin": "http://rebind.evil.example"}
    r = client.post("/quotes", data={"query": "model=llama-3.2-1b", "name": "x", "customer": "y", "price": "1"},
                    headers=rebinding, follow_redirects=False)
    assert r.status_code == 400
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["content-type"].startswith("text/html") and "Host not allowed" in r.text
    assert client.get("/quotes", headers={"Host": "rebind.evil.example"}).status_code == 400
    problem = assert_problem(client.get("/api/v1/catalog/gpus", headers={"Host": "rebind.evil.example"}), 400,
                             "header.host")
    assert problem["type"] == "urn:capplan:problem:host-not-allowed" and "rebind.evil.example" in problem["detail"]
    for host in ("testserver", "localhost:8000", "127.0.0.1:8000", "[::1]:8000"):
        assert client.get("/healthz", headers={"Host": host}).status_code == 200, host


def test_the_allowed_hosts_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(database_url="sqlite://", allowed_hosts="capplan.example.com, *.corp.example")
    with TestClient(create_app(settings, catalog=fake_catalog())) as client:
        for host, status in [("capplan.example.com", 200), ("a.corp.example", 200), ("testserver", 400),
                             ("localhost", 400), ("capplan.example.com.evil.example", 400)]:
            assert client.get("/healthz", headers={"Host": host}).status_code == status, host
    monkeypatch.delenv("CAPPLAN_ALLOWED_HOSTS", raising=False)
    assert Settings().allowed_hosts == "localhost,127.0.0.1,[::1]", "the default is loopback only"


@pytest.mark.parametrize("value", ["", " , ", "foo*.example.com", "*example.com"])
def test_a_bad_allowed_hosts_setting_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="allowed_hosts"):
        Settings(database_url="sqlite://", allowed_hosts=value if value else " ")


def test_an_unexpected_error_carries_the_headers_too() -> None:
    """Starlette answers an unhandled exception outside every middleware: the handler adds the headers."""
    app = create_app(Settings(database_url="sqlite://"), catalog=fake_catalog())

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    with TestClient(app, raise_server_exceptions=False) as client:
        for accept in ("text/html", "application/json"):
            r = client.get("/boom", headers={"Accept": accept})
            assert r.status_code == 500
            assert r.headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in r.headers[
                "content-security-policy"]


@pytest.fixture
def serve_kwargs(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    import uvicorn

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw))
    get_settings.cache_clear()
    yield seen
    get_settings.cache_clear()


def test_serve_trusts_no_forwarded_headers_by_default(
    serve_kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CAPPLAN_FORWARDED_ALLOW_IPS", raising=False)
    assert CliRunner().invoke(cli, ["serve"]).exit_code == 0
    assert (serve_kwargs["proxy_headers"], serve_kwargs["forwarded_allow_ips"]) == (False, None)


def test_serve_trusts_the_named_proxies(serve_kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_FORWARDED_ALLOW_IPS", "10.0.0.5,10.0.0.6")
    assert CliRunner().invoke(cli, ["serve"]).exit_code == 0
    assert (serve_kwargs["proxy_headers"], serve_kwargs["forwarded_allow_ips"]) == (True, "10.0.0.5,10.0.0.6")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_forged_x_forwarded_for_does_not_dodge_the_rate_limit(tmp_path: Path) -> None:
    """A real ``capplan serve`` on loopback: before, uvicorn trusted ``X-Forwarded-For`` from 127.0.0.1, so a
    client sending a new address each time got a fresh anonymous rate-limit counter each time."""
    port = _free_port()
    env = {**os.environ, "CAPPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}", "CAPPLAN_PORT": str(port),
           "CAPPLAN_RATE_LIMIT_ANONYMOUS": "3/minute", "PYTHONPATH": str(ROOT)}
    env.pop("CAPPLAN_FORWARDED_ALLOW_IPS", None)
    server = subprocess.Popen([sys.executable, "-m", "app", "serve"], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                time.sleep(0.1)
        statuses = [httpx2.get(f"{base}/api/v1/catalog/models", headers={"X-Forwarded-For": f"203.0.113.{i}"},
                               timeout=10).status_code for i in range(5)]
        assert statuses == [200, 200, 200, 429, 429]
    finally:
        server.terminate()
        server.wait(timeout=20)
