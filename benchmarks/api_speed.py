"""``POST /api/v1/estimates`` under ``wrk``, side by side with a bare FastAPI endpoint that returns the same bytes.

    PYTHONPATH=. .venv/bin/python -m benchmarks.api_speed --rounds 3 --seconds 5 --connections 8

The app runs as ``capplan serve --no-access-log`` (uvicorn; ``--workers`` as given, 1 by default), the bare
app under uvicorn (one worker, ``--no-access-log``), with the same loop and HTTP implementation (uvloop and
httptools when installed), on free loopback ports; the app gets a throwaway SQLite database and a rate limit out of
the way. The bare app (:mod:`benchmarks.bare_app`) answers ``POST /api/v1/estimates`` with the very bytes the
app answered for the headline request (Llama 3.1 70B LoRA, seq 4096, full checkpointing, one Dell XE9680),
from an ``async`` route that reads the body and returns a ``Response``: the floor of any FastAPI endpoint on
this machine. The rounds alternate app and bare, so machine load (other work on a shared machine) hits both;
each figure is the median over rounds, and the ratio app / bare is computed per round, then its median.

``wrk`` (Debian package ``wrk``) is the load generator: one thread, ``--connections`` keep-alive connections,
``--latency`` percentiles; any non-2xx response or socket error counts as an error. With ``--workers N`` the app
runs N workers, which needs ``--rate-limit-storage`` (a store they share, e.g. ``redis://127.0.0.1:6379``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.load_test import HOST, REQUEST, free_port, wait_until_ready

ROOT = Path(__file__).resolve().parents[1]
PATH = "/api/v1/estimates"

_LUA = """wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
"""

#: ``--distinct N``: each request the next of N bodies (sequence lengths 1024, 1025, ...), round robin
_LUA_DISTINCT = """local bodies = {{{bodies}}}
local i = 0
request = function()
  i = i + 1
  return wrk.format("POST", nil, {{["Content-Type"] = "application/json"}}, bodies[(i % #bodies) + 1])
end
"""


def lua_script(distinct: int) -> str:
    if distinct <= 1:
        return _LUA.format(body=json.dumps(json.dumps(REQUEST)))
    bodies = []
    for n in range(distinct):
        training: dict[str, Any] = {**REQUEST["training"], "seq_len": 1024 + n}  # type: ignore[dict-item]
        body = {**REQUEST, "training": training}
        bodies.append(json.dumps(json.dumps(body)))
    return _LUA_DISTINCT.format(bodies=", ".join(bodies))


def start(app_spec: str | None, port: int, workdir: Path, name: str, env_extra: dict[str, str],
          workers: int = 1) -> subprocess.Popen[bytes]:
    """``app_spec`` under uvicorn, or (``None``) the app as ``capplan serve --workers N --no-access-log``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CAPPLAN_DATABASE_URL": f"sqlite:///{workdir / 'load.db'}",
           "CAPPLAN_RATE_LIMIT_ANONYMOUS": "100000000/minute", **env_extra}
    if app_spec is None:
        command = [sys.executable, "-m", "app", "serve", "--host", HOST, "--port", str(port), "--workers",
                   str(workers), "--no-access-log"]
    else:
        command = [sys.executable, "-m", "uvicorn", app_spec, "--factory", "--host", HOST, "--port", str(port),
                   "--log-level", "warning", "--no-access-log"]
    log = (workdir / f"{name}.log").open("wb")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def parse_wrk(out: str) -> dict[str, float]:
    """requests/s, p50/p90/p99 latency (ms) and errors (non-2xx/3xx plus socket errors) from ``wrk --latency``."""
    result: dict[str, float] = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}  # type: ignore[union-attr]
    for pct in ("50", "90", "99"):
        result[f"p{pct}_ms"] = _ms(re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    result["requests"] = float(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = 0
    if m := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        errors += int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        errors += sum(int(g) for g in m.groups())
    result["errors"] = float(errors)
    return result


def run_wrk(base: str, script: Path, seconds: float, connections: int) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), base + PATH],
        capture_output=True, text=True, check=True, timeout=seconds + 60,
    ).stdout
    return parse_wrk(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="app/bare pairs to run (median over them)")
    parser.add_argument("--seconds", type=int, default=5, help="length of each wrk run")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections (concurrency)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers of the app (the bare app: 1)")
    parser.add_argument("--rate-limit-storage", default=None, help="CAPPLAN_RATE_LIMIT_STORAGE for the app")
    parser.add_argument("--distinct", type=int, default=1,
                        help="cycle through this many distinct requests (sequence lengths 1024 + i) instead of "
                             "repeating the headline one; more than the app keeps answers for (1,024) means "
                             "every request is estimated afresh")
    parser.add_argument("--json", action="store_true", help="print the rounds as JSON")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    load_before = os.getloadavg()[0]
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="capplan-api-speed-") as tmp:
        workdir = Path(tmp)
        app_port, bare_port = free_port(), free_port()
        app_base, bare_base = f"http://{HOST}:{app_port}", f"http://{HOST}:{bare_port}"
        env = {"CAPPLAN_RATE_LIMIT_STORAGE": args.rate_limit_storage} if args.rate_limit_storage else {}
        app = start(None, app_port, workdir, "app", env, args.workers)
        bare = None
        try:
            wait_until_ready(app, app_base, workdir)
            compiled = re.search(r"^capplan_estimator_compiled (\S+)", httpx.get(app_base + "/metrics").text, re.M)
            print(f"app's estimator: {'compiled' if compiled and float(compiled.group(1)) else 'plain Python'} "
                  "(/metrics capplan_estimator_compiled)", flush=True)
            reply = httpx.post(app_base + PATH, json=REQUEST, timeout=30)
            reply.raise_for_status()
            (workdir / "body.json").write_bytes(reply.content)
            bare = start("benchmarks.bare_app:create_app", bare_port, workdir, "bare",
                         {"CAPPLAN_BARE_BODY": str(workdir / "body.json")})
            wait_until_ready(bare, bare_base, workdir)
            check = httpx.post(bare_base + PATH, json=REQUEST, timeout=30)
            if check.content != reply.content:
                raise SystemExit("the bare app does not answer the same bytes")
            script = workdir / "post.lua"
            script.write_text(lua_script(args.distinct))
            for base in (app_base, bare_base):  # warm-up
                run_wrk(base, script, 1, args.connections)
            for _ in range(args.rounds):
                a = run_wrk(app_base, script, args.seconds, args.connections)
                b = run_wrk(bare_base, script, args.seconds, args.connections)
                rounds.append({"app": a, "bare": b, "ratio": b["rps"] / a["rps"]})
        finally:
            stop(app)
            if bare is not None:
                stop(bare)
    load_after = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"rounds": rounds, "load_before": load_before, "load_after": load_after}))
        return

    def med(side: str, key: str) -> float:
        return float(statistics.median(r[side][key] for r in rounds))

    what = "the headline request repeated" if args.distinct <= 1 else f"{args.distinct} distinct requests"
    print(f"POST {PATH} ({what}), {args.connections} connections, {args.rounds} rounds x {args.seconds:g} s, "
          f"app workers {args.workers}, {os.cpu_count()} CPUs, load {load_before:.2f} -> {load_after:.2f}")
    print(f"{'':>6} {'req/s':>9} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for side in ("app", "bare"):
        print(f"{side:>6} {med(side, 'rps'):9.0f} {med(side, 'p50_ms'):8.2f} {med(side, 'p90_ms'):8.2f} "
              f"{med(side, 'p99_ms'):8.2f} {sum(r[side]['errors'] for r in rounds):7.0f}")
    ratios = [r["ratio"] for r in rounds]
    print(f"bare/app throughput ratio: median {statistics.median(ratios):.2f} "
          f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)}); app req/s per round: "
          + ", ".join(f"{r['app']['rps']:.0f}" for r in rounds))


if __name__ == "__main__":
    main()
