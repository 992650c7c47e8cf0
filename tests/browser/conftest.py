"""Browser tests: a real uvicorn server on a free port (temp SQLite) and Debian's chromium via Playwright.

Every test gets a fresh browser context that records each request; a request to any host other than the
test server fails the test. A failing test leaves a screenshot and the server's log in ``test-artifacts/``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path(os.environ.get("CAPPLAN_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def find_free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def wait_for_server(server: LiveServer, timeout: float = 60) -> None:
    """Poll ``/readyz`` until it answers 200; on timeout or exit, fail showing the server's output."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"server exited with {server.process.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(f"{server.url}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    server.process.kill()
    pytest.fail(f"server not ready after {timeout:.0f} s:\n{server.log()}")


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    workdir = tmp_path_factory.mktemp("server")
    port = find_free_port()
    env = {
        **os.environ,
        "CAPPLAN_DATABASE_URL": f"sqlite:///{workdir / 'capplan.db'}",
        "CAPPLAN_RATE_LIMIT_ANONYMOUS": "10000/minute",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DATABASE_URL", None)
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_for_server(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@dataclass
class Traffic:
    """Every URL the page asked for; ``foreign`` holds those for any other host (they are aborted)."""

    requests: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def traffic() -> Traffic:
    return Traffic()


def _route(traffic: Traffic):  # type: ignore[no-untyped-def]
    def handle(route, request) -> None:  # type: ignore[no-untyped-def]
        url = request.url
        traffic.requests.append(url)
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in LOCAL_HOSTS:
            traffic.foreign.append(url)
            route.abort()
        else:
            route.continue_()

    return handle


@pytest.fixture
def make_context(browser, live_server: LiveServer, traffic: Traffic, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A factory of browser contexts on the test server whose every request is recorded (and aborted
    when it is for another host). At teardown: screenshots of every open page when the test failed, then
    the checks that nothing left localhost and no page raised a JavaScript error."""
    contexts = []

    def make(**options):  # type: ignore[no-untyped-def]
        context = browser.new_context(base_url=live_server.url, **{"viewport": {"width": 1400, "height": 1000},
                                                                   **options})
        context.route("**/*", _route(traffic))
        context.on("page", lambda p: p.on("pageerror", lambda exc: traffic.errors.append(str(exc))))
        context.set_default_timeout(20_000)
        contexts.append(context)
        return context

    yield make
    failed = any(getattr(getattr(request.node, f"report_{w}", None), "failed", False) for w in ("setup", "call"))
    if failed:
        ARTIFACTS.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
        pages = [p for c in contexts for p in c.pages]
        for i, p in enumerate(pages):
            p.screenshot(path=str(ARTIFACTS / f"{name}-{i}.png"), full_page=True)
        (ARTIFACTS / f"{name}.server.log").write_text(live_server.log())
    for context in contexts:
        context.close()
    assert traffic.foreign == [], f"requests left localhost: {traffic.foreign}"
    assert traffic.errors == [], f"JavaScript errors: {traffic.errors}"


@pytest.fixture
def page(make_context):  # type: ignore[no-untyped-def]
    return make_context().new_page()
