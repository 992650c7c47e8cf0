"""``capplan serve --workers 2`` on the shared stores the README tells an operator to use (issue 27): a real Redis
for the rate limits and a real PostgreSQL database, two spawned uvicorn workers.

It died at start with "_pickle.PicklingError: Can't pickle <class 'app.core.serve.
CapplanHttpToolsHeaderTimeoutProtocol'>" (uvicorn pickles its config into each spawned worker). Here both workers
must answer, one API key's limit must hold across them (exactly the limit passes, the rest are 429), and what one
worker writes the other reads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import fresh_postgres_database

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 12  # requests per minute for the test's key


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _workers(server_pid: int) -> list[int]:
    """uvicorn's spawned worker processes (multiprocessing's resource tracker is not one)."""
    found = []
    for pid in _children(server_pid):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        spawned = b"multiprocessing.spawn" in cmdline or b"spawn_main" in cmdline
        if spawned and b"resource_tracker" not in cmdline:
            found.append(pid)
    return found


def _written(pid: int) -> int:
    """Bytes the process has passed to write/send (its answers, its Redis and database traffic, its logs)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/io has no wchar")


@pytest.fixture
def two_workers(tmp_path: Path, postgres_server_url: str, redis_url: str) -> Iterator[tuple[str, str, int]]:
    import redis

    redis.Redis.from_url(redis_url.replace("redis+unix://", "unix://")).flushdb()
    with fresh_postgres_database(postgres_server_url) as db_url:
        env = {**os.environ, "CAPPLAN_DATABASE_URL": db_url, "CAPPLAN_RATE_LIMIT_STORAGE": redis_url,
               "PYTHONPATH": str(ROOT)}
        made = subprocess.run([sys.executable, "-m", "app", "api-keys", "create", "--name", "workers-test",
                               "--rate-limit", f"{LIMIT}/minute"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        key = made.stdout.strip()
        port = _free_port()
        log_path = tmp_path / "server.log"
        with log_path.open("wb") as log:
            server = subprocess.Popen([sys.executable, "-m", "app", "serve", "--workers", "2", "--port", str(port),
                                       "--no-access-log"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                base = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + 120
                while len(_workers(server.pid)) < 2 or not _ready(base):
                    if server.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(log_path.read_text(errors="replace"))
                    time.sleep(0.3)
                yield base, key, server.pid
            finally:
                server.terminate()
                server.wait(timeout=60)
        text = log_path.read_text(errors="replace")
        assert "PicklingError" not in text and "Traceback" not in text, text


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _get_fresh(url: str, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(timeout=30) as c:  # a new connection each time: the kernel hands it to either worker
        return c.get(url, headers=headers)


def test_two_workers_share_one_keys_rate_limit_and_one_database(two_workers: tuple[str, str, int]) -> None:
    base, key, server_pid = two_workers
    workers = _workers(server_pid)
    assert len(workers) == 2
    before = {pid: _written(pid) for pid in workers}
    headers = {"X-API-Key": key}
    with ThreadPoolExecutor(max_workers=8) as pool:
        codes = [r.status_code for r in pool.map(lambda _: _get_fresh(f"{base}/api/v1/version", headers),
                                                   range(3 * LIMIT))]
    # one moving window in Redis for the key: exactly LIMIT pass whichever worker answers (per-worker counting in
    # memory:// would let up to 2 * LIMIT through)
    assert codes.count(200) == LIMIT and codes.count(429) == 2 * LIMIT, codes
    assert all(_written(pid) > before[pid] for pid in workers), "a worker answered nothing"
    version = _get_fresh(f"{base}/api/v1/version", {}).json()
    assert version["estimator_build"] in ("compiled", "python")
    # one database: quotes written through any worker are all listed through every worker
    inputs = {"model": "llama-3.2-1b", "hardware": {"server": "dell-xe9680-a100", "gpu": "a100-sxm4-80gb"}}
    other = subprocess.run([sys.executable, "-m", "app", "api-keys", "create", "--name", "writer"], cwd=ROOT,
                           env={**os.environ, "CAPPLAN_DATABASE_URL": _database_url(server_pid),
                                "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert other.returncode == 0, other.stderr
    writer = {"X-API-Key": other.stdout.strip()}

    def save(i: int) -> str:
        with httpx.Client(timeout=60) as c:
            r = c.post(f"{base}/api/v1/quotes", headers=writer,
                          json={"name": f"q{i}", "customer": "Acme", "inputs": inputs,
                                "chosen_option": "dell-xe9680-a100", "server_count": 1,
                                "price": "1000"})
            return str(r.status_code) if r.status_code == 201 else r.text

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(save, range(6))) == ["201"] * 6
    totals = {_get_fresh(f"{base}/api/v1/quotes?limit=100", writer).json()["total"] for _ in range(6)}
    assert totals == {6}


def _database_url(server_pid: int) -> str:
    env = Path(f"/proc/{server_pid}/environ").read_bytes().split(b"\0")
    for item in env:
        if item.startswith(b"CAPPLAN_DATABASE_URL="):
            return item.split(b"=", 1)[1].decode()
    raise AssertionError("the server has no CAPPLAN_DATABASE_URL")
