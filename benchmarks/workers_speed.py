"""``capplan serve`` with one worker and with two, on the shared stores several workers need (issue 27).

    PYTHONPATH=. .venv/bin/python -m benchmarks.workers_speed --rounds 3 --seconds 5 --connections 8 --distinct 3000

Both servers run at once, each as ``capplan serve --workers N --no-access-log`` (what ``scripts/serve`` runs, with
the estimator build it finds: printed from ``GET /api/v1/version``), on one throwaway Redis for their rate limits
(``redis-server`` on a unix socket in a temporary directory, stopped at the end; each server its own key prefix is
not needed: the benchmark's anonymous limit is out of the way) and their own SQLite databases, or one PostgreSQL
server with ``--database-url`` (a database each is not needed: they only read). ``wrk`` drives ``POST
/api/v1/estimates`` with ``--distinct`` requests round robin (more than the app keeps answers for, so every request
is estimated afresh: the estimator's work, which a second worker can share out, rather than a replayed answer).
Rounds alternate one and two workers so that machine load hits both; the figures are medians over rounds and the
ratio two/one is computed per round. On a machine of C cores, wrk itself takes one: two workers can add at most
what the remaining cores give."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.api_speed import lua_script, run_wrk, start, stop
from benchmarks.load_test import HOST, free_port, wait_until_ready


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    sock = workdir / "redis.sock"
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
                              "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while not sock.exists():
        if redis.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("redis-server did not start")
        time.sleep(0.05)
    return redis, f"redis+unix://{sock}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5, help="length of each wrk run")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--distinct", type=int, default=3000, help="distinct requests cycled (see api_speed)")
    parser.add_argument("--database-url", default=None, help="a PostgreSQL URL both servers use (default: SQLite)")
    args = parser.parse_args()
    for tool in ("wrk", "redis-server"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed: apt-get install -y {tool}")
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="capplan-workers-") as tmp:
        workdir = Path(tmp)
        redis, store = start_redis(workdir)
        servers: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
        try:
            for workers in (1, 2):
                sub = workdir / f"w{workers}"
                sub.mkdir()
                env = {"CAPPLAN_RATE_LIMIT_STORAGE": store}
                if args.database_url:
                    env["CAPPLAN_DATABASE_URL"] = args.database_url
                port = free_port()
                process = start(None, port, sub, "server", env, workers)
                base = f"http://{HOST}:{port}"
                wait_until_ready(process, base, sub, timeout_s=120)
                servers[workers] = (process, base)
                version = httpx.get(base + "/api/v1/version").json()
                print(f"{workers} worker(s): estimator {version['estimator_build']} "
                      f"({version['estimator_build_detail']})", flush=True)
            script = workdir / "post.lua"
            script.write_text(lua_script(args.distinct))
            for _, base in servers.values():
                run_wrk(base, script, 1, args.connections)  # warm-up
            load_before = os.getloadavg()[0]
            for _ in range(args.rounds):
                one = run_wrk(servers[1][1], script, args.seconds, args.connections)
                two = run_wrk(servers[2][1], script, args.seconds, args.connections)
                rows.append({"one": one["rps"], "two": two["rps"], "ratio": two["rps"] / one["rps"],
                             "p99_one": one["p99_ms"], "p99_two": two["p99_ms"],
                             "errors": one["errors"] + two["errors"]})
            load_after = os.getloadavg()[0]
        finally:
            for process, _ in servers.values():
                stop(process)
            redis.terminate()
            redis.wait(timeout=10)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"POST /api/v1/estimates, {args.distinct} distinct requests, {args.connections} connections, "
          f"{args.rounds} rounds x {args.seconds} s, {os.cpu_count()} CPUs, "
          f"load {load_before:.2f} -> {load_after:.2f}, "
          f"rate limits in Redis, database {'PostgreSQL' if args.database_url else 'SQLite'}")
    print(f"one worker  {med['one']:8.0f} req/s  p99 {med['p99_one']:6.1f} ms")
    print(f"two workers {med['two']:8.0f} req/s  p99 {med['p99_two']:6.1f} ms")
    ratios = ", ".join(f"{r['ratio']:.2f}" for r in rows)
    print(f"two/one: median {med['ratio']:.2f} (rounds: {ratios}); "
          f"errors {sum(r['errors'] for r in rows):.0f}")


if __name__ == "__main__":
    main()
