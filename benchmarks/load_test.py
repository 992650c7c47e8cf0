"""Load test of ``POST /api/v1/estimates``: the app runs under uvicorn in a subprocess on a free loopback port;
this process sends a bounded number of requests (bounded in time too) and reports requests/s and latency.

    .venv/bin/python benchmarks/load_test.py --requests 2000 --concurrency 8

Loopback only: the server binds 127.0.0.1 and every request goes there. The server gets a throwaway SQLite
database and a rate limit high enough not to interfere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
REQUEST = {  # the headline job: Llama 3.1 70B LoRA on one 8x H100 server
    "model": "llama-3.1-70b",
    "training": {"method": "lora", "seq_len": 4096, "activation_checkpointing": "full"},
    "hardware": {"server": "dell-xe9680-h100", "gpu": "h100-sxm5-80gb"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def start_server(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CAPPLAN_DATABASE_URL": f"sqlite:///{workdir / 'load.db'}",
           "CAPPLAN_RATE_LIMIT_ANONYMOUS": "10000000/minute"}
    command = [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--host", HOST,
               "--port", str(port), "--log-level", "warning", "--no-access-log"]
    log = (workdir / "server.log").open("wb")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_until_ready(process: subprocess.Popen[bytes], base: str, workdir: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    log = (workdir / "server.log").read_text(errors="replace")
    raise SystemExit(f"the server did not become ready in {timeout_s:.0f} s; its output:\n{log}")


async def fire(base: str, count: int, concurrency: int, max_seconds: float) -> tuple[list[float], int, float]:
    """Send up to ``count`` requests, ``concurrency`` at a time, stopping new ones after ``max_seconds``."""
    latencies: list[float] = []
    errors = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)
    start = time.perf_counter()
    deadline = start + max_seconds

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            try:
                queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            t0 = time.perf_counter()
            try:
                response = await client.post("/api/v1/estimates", json=REQUEST)
                ok = response.status_code == 200
            except httpx.TransportError:
                ok = False
            latencies.append(time.perf_counter() - t0)
            errors += not ok

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return latencies, errors, time.perf_counter() - start


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def report(latencies: list[float], errors: int, elapsed: float, concurrency: int,
           load_before: float) -> dict[str, Any]:
    """The numbers, with the machine's CPU count and 1-minute load average before and after the run (other
    work on the machine shows there: the server and this client alone keep it near 2 on 2 cores)."""
    return {
        "cpus": os.cpu_count(), "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
        "requests": len(latencies), "errors": errors, "concurrency": concurrency, "seconds": round(elapsed, 3),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 50) * 1000, 2), "p90_ms": round(percentile(latencies, 90) * 1000, 2),
        "p99_ms": round(percentile(latencies, 99) * 1000, 2), "max_ms": round(max(latencies) * 1000, 2),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests to send (after a warm-up of 50)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight at once")
    parser.add_argument("--max-seconds", type=float, default=120, help="stop sending after this long")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="capplan-load-") as tmp:
        workdir, port = Path(tmp), free_port()
        base = f"http://{HOST}:{port}"
        server = start_server(port, workdir)
        try:
            wait_until_ready(server, base, workdir)
            check = httpx.post(f"{base}/api/v1/estimates", json=REQUEST, timeout=30)
            check.raise_for_status()
            asyncio.run(fire(base, 50, args.concurrency, args.max_seconds))  # warm-up
            latencies, errors, elapsed = asyncio.run(fire(base, args.requests, args.concurrency, args.max_seconds))
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
    result = report(latencies, errors, elapsed, args.concurrency, load_before)
    if args.json:
        print(json.dumps(result))
        return
    print(f"POST /api/v1/estimates x {result['requests']} ({result['errors']} errors), "
          f"concurrency {args.concurrency}, {result['seconds']} s")
    print(f"  {result['requests_per_s']} requests/s; latency p50 {result['p50_ms']} ms, "
          f"p90 {result['p90_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms")
    print(f"  {result['cpus']} CPUs; 1-minute load average {result['load_before']} before, "
          f"{result['load_after']} after")


if __name__ == "__main__":
    main()
