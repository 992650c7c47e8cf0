"""Cluster design speed (issue 32): the fabric of N nodes and the scaling curve up to N, median wall time.

Run: ``.venv/bin/python benchmarks/cluster_bench.py [--runs 7]``. Prints figures only (no pass/fail; the target is
an answer in under 200 ms for 4,096 nodes on the 2-core development machine):

* per node count (16, 256, 1,024, 4,096) and server (DGX H100, HGX B200, GB200 NVL72 tray):
  ``estimator.cluster.design_cluster`` without a job (topology, parts, power, racks, cost, TCO) and with a Llama
  3.1 70B job (plus the scaling curve: one ``estimator.estimate`` per size, 1 to N nodes doubling), warm (catalog
  loaded, estimator memos as they are after one call) and cold (``memo.clear_all`` and ``modelspec.clear_shapes``
  before each call, the first request after start-up for that model);
* the API's extra work, the SVG drawing (``app.charts.topology``).

Median of ``--runs`` calls each, after one warm-up call.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from estimator import memo, native
from estimator.cluster import ClusterRequest, design_cluster
from estimator.model.spec import clear_shapes
from hardware_catalog import load_catalog

JOB = {"model": "llama-3.1-70b",
       "training": {"train_tokens": 1e11, "gradient_accumulation_steps": 8, "activation_checkpointing": "full"},
       "parallelism": {"tp": 8, "sharding": "zero1", "framework": "megatron"}}
NODES = (16, 256, 1024, 4096)
SERVERS = ("nvidia-dgx-h100", "hgx-b200-8gpu-cx7", "gb200-nvl72-tray")


def _median_ms(fn: Callable[[], object], runs: int, before: Callable[[], None] | None = None) -> float:
    fn()
    times = []
    for _ in range(runs):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def _cold() -> None:
    memo.clear_all()
    clear_shapes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    catalog = load_catalog()
    from app.charts.topology import topology_svg

    print(f"estimator: {native.describe()}")
    print(f"{'server':20} {'nodes':>6} {'fabric ms':>10} {'+curve warm':>12} {'+curve cold':>12} {'svg ms':>8}  design")
    for server in SERVERS:
        for nodes in NODES:
            bare = ClusterRequest.model_validate({"server": server, "num_nodes": nodes})
            job = ClusterRequest.model_validate({"server": server, "num_nodes": nodes, "job": JOB})
            fabric = _median_ms(lambda r=bare: design_cluster(r, catalog), args.runs)
            warm = _median_ms(lambda r=job: design_cluster(r, catalog), args.runs)
            cold = _median_ms(lambda r=job: design_cluster(r, catalog), args.runs, before=_cold)
            d = design_cluster(bare, catalog).design
            svg = _median_ms(lambda d=d, n=nodes, s=server: topology_svg(d, s, n), args.runs)
            print(f"{server:20} {nodes:>6} {fabric:>10.2f} {warm:>12.1f} {cold:>12.1f} {svg:>8.2f}  "
                  f"{d.tiers} tiers, {d.leaves} leaf / {d.spines} spine / {d.cores} core")


if __name__ == "__main__":
    main()
