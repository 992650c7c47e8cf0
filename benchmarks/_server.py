"""Start ``capplan serve`` (the production entry point: uvicorn with app.serve's timeouts) on a free loopback
port for a benchmark, and wait until it is ready. Loopback only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"

__all__ = ["HOST", "ROOT", "free_port", "make_key", "start", "wait_ready"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _env(database_url: str, port: int, extra: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CAPPLAN_DATABASE_URL": database_url, "CAPPLAN_HOST": HOST,
            "CAPPLAN_PORT": str(port), "CAPPLAN_RATE_LIMIT_ANONYMOUS": "100000000/minute",
            "CAPPLAN_RATE_LIMIT_PER_KEY": "100000000/minute", **(extra or {})}


def start(database_url: str, port: int, log_path: Path, extra_env: dict[str, str] | None = None,
          ) -> subprocess.Popen[bytes]:
    """``python -m app serve`` with the benchmark's database and rate limits out of the way."""
    log = log_path.open("ab")
    return subprocess.Popen([sys.executable, "-m", "app", "serve"], cwd=ROOT, env=_env(database_url, port, extra_env),
                            stdout=log, stderr=subprocess.STDOUT)


def wait_ready(process: subprocess.Popen[bytes], port: int, log_path: Path, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://{HOST}:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the server did not become ready; its log:\n{log_path.read_text(errors='replace')[-4000:]}")


def make_key(database_url: str, name: str) -> str:
    """A fresh API key (``capplan api-keys create``, which also migrates and seeds the database)."""
    out = subprocess.run([sys.executable, "-m", "app", "api-keys", "create", "--name", name], cwd=ROOT,
                         env=_env(database_url, 8000, None), capture_output=True, text=True, check=True)
    key = next(word for word in out.stdout.split() if word.startswith("cpk_"))
    return key
