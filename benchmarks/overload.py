"""Overload run (issue 15): ``POST /api/v1/estimates`` from wrk at high concurrency against ``capplan serve``.

Starts the production entry point (``python -m app serve``: one uvicorn worker, the admission queue and the
timeouts of app.serve / app.admission at their defaults) on a throwaway SQLite database with the rate limits
out of the way, then runs wrk (Debian's ``wrk``: ``apt-get install wrk``) with benchmarks/wrk/estimate.lua,
which counts every response status. Reports, per concurrency: requests, requests/s, p50/p90/p99/max latency,
the statuses, 5xx and socket errors. Benchmarks do not run in CI.

    PYTHONPATH=. .venv/bin/python benchmarks/overload.py --concurrency 64 256 --seconds 60 --out /tmp/o.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import _server

LUA = Path(__file__).resolve().parent / "wrk" / "estimate.lua"


def run_wrk(base: str, concurrency: int, seconds: int, threads: int) -> dict[str, Any]:
    command = ["wrk", f"-t{threads}", f"-c{concurrency}", f"-d{seconds}s", "--timeout", "60s", "-s", str(LUA),
               f"{base}/api/v1/estimates"]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=seconds + 120).stdout
    line = next(x for x in out.splitlines() if x.startswith("WRK_JSON "))
    result: dict[str, Any] = json.loads(line[len("WRK_JSON "):])
    statuses = {int(k): v for k, v in result["statuses"].items()}
    result["statuses"] = statuses
    result["5xx"] = sum(v for k, v in statuses.items() if k >= 500)
    result["requests_per_s"] = round(result["requests"] / result["duration_s"], 1)
    result["socket_errors"] = sum(result[k] for k in ("connect_errors", "read_errors", "write_errors", "timeouts"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (the machine has 2 cores)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    workdir = Path(tempfile.mkdtemp(prefix="capplan-overload-"))
    port = _server.free_port()
    log = workdir / "server.log"
    process = _server.start(f"sqlite:///{workdir / 'overload.db'}", port, log)
    base = f"http://{_server.HOST}:{port}"
    runs = []
    try:
        _server.wait_ready(process, port, log)
        body = json.loads(LUA.read_text().split("wrk.body = '")[1].split("'\n")[0])
        assert httpx.post(f"{base}/api/v1/estimates", json=body, timeout=30).status_code == 200
        for concurrency in args.concurrency:
            load_before = os.getloadavg()[0]
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
            result = run_wrk(base, concurrency, args.seconds, args.threads)
            result.update(concurrency=concurrency, seconds=args.seconds, date_utc=started, cpus=os.cpu_count(),
                          load_before=round(load_before, 2), load_after=round(os.getloadavg()[0], 2))
            metrics = httpx.get(f"{base}/metrics", timeout=30).text
            result["server_alive"] = process.poll() is None and "capplan_http_requests_total" in metrics
            print(json.dumps(result), flush=True)
            runs.append(result)
    finally:
        process.terminate()
        process.wait(timeout=30)
    if args.out:
        args.out.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
