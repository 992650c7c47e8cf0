"""``capplan serve`` closes connections whose headers never finish (issue 15, finding 4: partial requests stayed
open for over 100 s). A real server in a subprocess, a raw socket, and a 1 s header timeout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = _free_port()
    workdir = tmp_path_factory.mktemp("serve")
    env = {**os.environ, "CAPPLAN_DATABASE_URL": f"sqlite:///{workdir / 'serve.db'}", "CAPPLAN_PORT": str(port),
           "CAPPLAN_HEADER_TIMEOUT_S": "1", "PYTHONPATH": str(ROOT)}
    log = (workdir / "server.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "app", "serve"], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail((workdir / "server.log").read_text(errors="replace"))
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


@pytest.mark.parametrize("sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"], ids=["nothing", "half the headers"])
def test_a_connection_without_complete_headers_is_closed_with_408(server: int, sent: bytes) -> None:
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.settimeout(20)  # without the header timeout, recv would wait the whole 20 s and fail
        sock.sendall(sent)
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408 ")


def test_complete_requests_on_a_kept_alive_connection_are_unaffected(server: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{server}") as client:
        for _ in range(3):
            assert client.get("/healthz").status_code == 200
            time.sleep(0.6)  # idle between requests: the keep-alive timeout (5 s) applies, not the header one


def test_serve_runs_the_httptools_protocol_with_the_header_timeout() -> None:
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from app.core.serve import uvicorn_options
    from app.core.settings import Settings

    protocol = uvicorn_options(Settings(header_timeout_s=3))["http"]
    assert issubclass(protocol.func, HttpToolsProtocol)
    assert protocol.keywords == {"header_timeout_s": 3}
    fallback = uvicorn_options(Settings(header_timeout_s=3), h11=True)["http"]
    assert issubclass(fallback.func, H11Protocol) and fallback.keywords == {"header_timeout_s": 3}


def test_the_uvicorn_options_pickle_for_spawned_workers() -> None:
    """`capplan serve --workers 2` died with "_pickle.PicklingError: Can't pickle <class
    'app.core.serve.CapplanHttpToolsHeaderTimeoutProtocol'>" (issue 27): uvicorn pickles its config into each
    spawned worker, and the protocol class was built at run time."""
    import pickle

    from app.core.serve import uvicorn_options
    from app.core.settings import Settings

    for h11 in (False, True):
        options = uvicorn_options(Settings(header_timeout_s=4), h11=h11)
        again = pickle.loads(pickle.dumps(options))
        assert again["http"].func is options["http"].func and again["http"].keywords == {"header_timeout_s": 4}
        assert {k: v for k, v in again.items() if k != "http"} == {k: v for k, v in options.items() if k != "http"}


def test_the_heap_is_frozen_while_serving_and_unfrozen_after() -> None:
    import gc

    from app.core.startup import frozen_heap

    before = gc.get_freeze_count()
    with frozen_heap():
        assert gc.get_freeze_count() > before
    assert gc.get_freeze_count() == 0
    with frozen_heap(False):
        assert gc.get_freeze_count() == 0
