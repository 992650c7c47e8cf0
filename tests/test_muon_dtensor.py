"""Muon under FSDP2: what one rank runs for Newton-Schulz on its DTensor shard, from DTensor's own sharding
propagation (benchmarks/check/muon_dtensor.py: PyTorch's fake process group and fake tensors on the CPU), against
what ``estimator.training.timing.muon_parts`` prices (issue 29). The same local GEMM shapes were recorded on the H100
(torch 2.11, tests/data/optimizer_kernels_h100) for Llama 3.1 8B's, Llama 3.2 3B's and Qwen2.5 1.5B's matrices."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from estimator.training.mechanisms import (
    NS_STEPS,
    muon_dtensor_ops,
    muon_newton_schulz_flops,
    muon_newton_schulz_local_flops,
    muon_split_long_side,
)

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "tests" / "data" / "optimizer_kernels_h100" / "kernels.jsonl"
#: decoder matrices (out, in) of Llama 3.1 8B (q/o, k/v, gate/up, down), Llama 3.2 3B and Qwen2.5 1.5B
SHAPES = ["4096x4096", "1024x4096", "14336x4096", "4096x14336", "3072x3072", "8192x3072", "1536x1536", "256x1536",
          "1536x8960"]
#: either side of the split-rule's threshold (mechanisms.MUON_LONG_SPLIT_MIN_ELEMENTS)
EDGES = ["256x1536", "1536x256", "512x512", "256x2048", "512x1024", "128x4096"]


def _probe(world: int) -> list[dict[str, int]]:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "check" / "muon_dtensor.py"), str(world), *SHAPES,
                        *EDGES],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("world", [4, 8])
def test_each_rank_runs_its_share_of_the_long_products_and_the_square_one_whole(world: int) -> None:
    rows = _probe(world)
    assert len(rows) == len(SHAPES) + len(EDGES)
    for r in rows:
        local = muon_newton_schulz_local_flops(r["rows"], r["cols"], world)
        assert r["local_flops"] == local, r
        # a 1/W share of the whole for a small matrix (rows split); more for a large one (A @ A whole on every rank)
        whole = muon_newton_schulz_flops(r["rows"], r["cols"])
        if muon_split_long_side(r["rows"], r["cols"]):
            assert whole / world < local < whole
        else:
            assert local == whole / world
        # Newton-Schulz's operators, plus torch.optim.Muon's lerp_, lerp, mul_ and add_ around it
        assert r["dtensor_ops"] + 4 == muon_dtensor_ops(r["rows"], r["cols"]), r


def test_the_h100_ran_the_same_local_gemms_and_operators() -> None:
    """The H100 micro-benchmark's profile (torch 2.11, CUDA): the local GEMM shapes under DTensor are those the
    formula counts, and a Muon step over one decoder layer dispatched the operators ``muon_dtensor_ops`` counts."""
    data = [json.loads(line) for line in H100.read_text().splitlines()]
    ns = [r for r in data if r["part"] == "muon-ns" and r["world"] > 1]
    assert len(ns) == 24
    for r in ns:
        rows, cols = r["shape"]
        local = {k.split("|")[1]: n for k, n in r["local_gemms"].items() if k.startswith("PythonSubclass|")}
        flops = sum(2 * a * k * b * n for key, n in local.items() for a, k, b in [map(int, key.split("x"))])
        assert flops == muon_newton_schulz_local_flops(rows, cols, r["world"]), r["shape"]
        assert sum(local.values()) == 3 * NS_STEPS
    for r in (r for r in data if r["part"] == "muon-step"):
        expected = sum(muon_dtensor_ops(rows, cols) for rows, cols in r["matrices"])
        assert sum(n for op, n in r["dtensor_op_counts"].items() if op.startswith("aten.")) == expected
