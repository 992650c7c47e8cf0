"""Search for the slowest valid request (issue 15: "worst case for any valid request under 5 s").

Starts ``capplan serve`` (default work budget: ``CAPPLAN_MAX_LAYOUTS_PER_REQUEST``, ``CAPPLAN_COMPUTE_TIMEOUT_S``)
on a throwaway SQLite database and times, one request at a time, client side (send to last byte):

1. a seed set of the requests expected to be heaviest: every reverse question and the planner with the
   largest lists (every GPU and server id of the catalog, each repeated), node counts up to 1,024, ``top_k``
   200, the largest models, long sequences, batches with many divisors, ``granularity`` 128; a list of 100
   estimates of the heaviest kind; a comparison over 16 options;
2. random requests drawn from every dimension's extreme values;
3. a greedy climb from the slowest so far: each dimension is moved to each of its values, one at a time,
   keeping any change that makes the request slower, until no single change does.

A request answered 422 by the work budget counts too (its time is the time to say no). The report lists the
slowest requests with their status and the counts by status; ``--out`` writes it as JSON.

    PYTHONPATH=. .venv/bin/python benchmarks/worst_case.py --random 40 --out /tmp/worst.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import _server
from hardware_catalog import load_catalog

CATALOG = load_catalog()
GPUS = sorted(CATALOG.gpus)
SERVERS = sorted(CATALOG.servers)

#: each dimension of a planner request and the values worth trying (None: leave the field out)
DIMENSIONS: dict[str, list[Any]] = {
    "endpoint": ["plans", "fewest-gpus", "largest-model", "longest-sequence"],
    "model": ["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mixtral-8x22b", "deepseek-v3",
              "gpt-3-175b"],
    "method": ["lora", "qlora", "full"],
    "max_nodes": [1, 16, 128, 512, 1024],
    "gpus": [None, "all", "all x10", "1024 ids"],
    "servers": [None, "all", "all x10", "1024 ids"],
    "top_k": [10, 200],
    "seq_len": [512, 4096, 32768, 131072],
    "global_batch_size": [None, 1, 720720, 1 << 20, 1 << 24],
    "objective": ["time", "cost"],
    "pricing": ["on-demand", "reserved", "owned"],
    "granularity": [128, 1024, 65536],
    "family": [True, False],
    "train_tokens": [None, 1e12],
}


def _ids(choice: str | None, ids: list[str]) -> list[str] | None:
    if choice is None:
        return None
    if choice == "1024 ids":  # the most a request may name (MAX_IDS), every catalog id many times over
        return (ids * (1024 // len(ids) + 1))[:1024]
    return ids * (10 if choice == "all x10" else 1)


def build(point: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The path and body of a planner point."""
    training: dict[str, Any] = {"method": point["method"], "seq_len": point["seq_len"]}
    if point["train_tokens"]:
        training["train_tokens"] = point["train_tokens"]
    constraints: dict[str, Any] = {"max_nodes": point["max_nodes"]}
    if (gpus := _ids(point["gpus"], GPUS)) is not None:
        constraints["gpus"] = gpus
    if (servers := _ids(point["servers"], SERVERS)) is not None:
        constraints["servers"] = servers
    body: dict[str, Any] = {"model": point["model"], "training": training, "constraints": constraints,
                            "top_k": point["top_k"], "objective": point["objective"], "pricing": point["pricing"]}
    if point["global_batch_size"] is not None:
        body["global_batch_size"] = point["global_batch_size"]
    if point["endpoint"] == "plans":
        return "/api/v1/plans", body
    body.update(question=point["endpoint"], granularity=point["granularity"], family=point["family"])
    return "/api/v1/plans/reverse", body


def fixed_cases() -> list[tuple[str, str, Any]]:
    """The non-planner endpoints at their largest: 100 estimates, 16 compared options."""
    heavy = {"model": "deepseek-v3", "training": {"method": "full", "seq_len": 131072, "train_tokens": 1e12},
             "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1024}}
    options = [{"gpu": g, "num_nodes": n} for n in (1024, 1) for g in GPUS]
    return [("estimates x100", "/api/v1/estimates", [heavy] * 100),
            ("compare x16", "/api/v1/compare", {"request": {**heavy, "hardware": {"gpu": GPUS[0]}},
                                                "options": options[:16]})]


def seeds() -> list[dict[str, Any]]:
    base = {k: v[0] for k, v in DIMENSIONS.items()}
    out = []
    for endpoint in DIMENSIONS["endpoint"]:
        for model in ("llama-3.1-70b", "llama-3.1-405b", "deepseek-v3"):
            out.append({**base, "endpoint": endpoint, "model": model, "method": "full", "max_nodes": 1024,
                        "gpus": "1024 ids", "servers": "1024 ids", "top_k": 200, "granularity": 128,
                        "global_batch_size": 720720, "train_tokens": 1e12})
            out.append({**base, "endpoint": endpoint, "model": model, "method": "lora", "max_nodes": 1024,
                        "gpus": None, "servers": "all", "top_k": 200})
    return out


class Timer:
    def __init__(self, base: str) -> None:
        self.client = httpx.Client(base_url=base, timeout=120)
        self.results: list[dict[str, Any]] = []

    def time(self, label: str, path: str, body: Any) -> float:
        t0 = time.perf_counter()
        response = self.client.post(path, json=body)
        elapsed = time.perf_counter() - t0
        field = None
        if response.status_code >= 400 and "json" in response.headers.get("content-type", ""):
            errors = response.json().get("errors") or []
            field = errors[0]["field"] if errors else None
        layouts = None
        if response.status_code == 200 and path == "/api/v1/plans":
            layouts = response.json()["search"]["space_size"]
        self.results.append({"label": label, "path": path, "status": response.status_code, "seconds": elapsed,
                             "bytes": len(response.content), "field": field, "layouts": layouts,
                             "body_bytes": len(json.dumps(body))})
        print(f"{elapsed:7.2f} s  {response.status_code}  {len(response.content):>10,} B  {label}", flush=True)
        return elapsed


def label_of(point: dict[str, Any]) -> str:
    return json.dumps(point, sort_keys=True)


def climb(timer: Timer, start: dict[str, Any], rng: random.Random, rounds: int) -> dict[str, Any]:
    """Greedy: move one dimension at a time to the value that makes the request slowest."""
    best, best_t = start, timer.time(label_of(start), *build(start))
    for _ in range(rounds):
        improved = False
        names = list(DIMENSIONS)
        rng.shuffle(names)
        for name in names:
            for value in DIMENSIONS[name]:
                if value == best[name]:
                    continue
                trial = {**best, name: value}
                t = timer.time(label_of(trial), *build(trial))
                if t > best_t:
                    best, best_t, improved = trial, t, True
        if not improved:
            break
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--random", type=int, default=40, help="random points after the seeds")
    parser.add_argument("--climb-rounds", type=int, default=2, help="greedy rounds from the slowest point")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="capplan-worst-"))
    port = _server.free_port()
    log = workdir / "server.log"
    process = _server.start(f"sqlite:///{workdir / 'worst.db'}", port, log)
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    load_before = os.getloadavg()[0]
    try:
        _server.wait_ready(process, port, log)
        timer = Timer(f"http://{_server.HOST}:{port}")
        for label, path, body in fixed_cases():
            timer.time(label, path, body)
        points = seeds() + [{k: rng.choice(v) for k, v in DIMENSIONS.items()} for _ in range(args.random)]
        timed = [(timer.time(label_of(p), *build(p)), p) for p in points]
        slowest = max(timed, key=lambda t: t[0])[1]
        climb(timer, slowest, rng, args.climb_rounds)
    finally:
        process.terminate()
        process.wait(timeout=30)
    results = sorted(timer.results, key=lambda r: -r["seconds"])
    by_status: dict[str, int] = {}
    for r in results:
        by_status[str(r["status"])] = by_status.get(str(r["status"]), 0) + 1
    report = {"date_utc": started, "cpus": os.cpu_count(), "load_before": round(load_before, 2),
              "load_after": round(os.getloadavg()[0], 2), "requests": len(results), "by_status": by_status,
              "worst_seconds": round(results[0]["seconds"], 3), "worst": results[:10],
              "worst_200": next((r for r in results if r["status"] == 200), None)}
    print(json.dumps({k: v for k, v in report.items() if k != "worst"}, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
