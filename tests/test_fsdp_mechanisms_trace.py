"""Issue 29's plain-PyTorch mechanisms (torchtune's chunked loss, Muon) under FSDP2 on 8 ranks: no GPU measured them,
so the estimate is checked against the CPU trace of ``benchmarks/check/trace_fsdp_mechanisms.py``
(``tests/data/cpu_trace_fsdp_mechanisms.json``, ``capplan check --trace``'s machinery: fake tensors, FSDP2 on a fake
process group, rank 0's live storages counted).

The trace is first shown to reproduce the H100 for these mechanisms on one GPU (``tests/data/stacks_h100_raw``, three
cases, two families, full and LoRA): the forward's peak (where the chunked loss peaks) within 1 %; the optimizer
step's within 4 % (Qwen2.5 LoRA's: 120 MB under the H100's, what the backward left); the backward's is one fp32
embedding-sized tensor higher in the trace for full fine-tuning of the tied Llama 3.2 1B (1.05 GB of 128k x 2048: the
tied embedding / LM head's two gradients and their sum, presumably accumulated in place on the GPU; under FSDP2 at
most 1/8 of it), so within 6 %.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from estimator import EstimateRequest, estimate

ROOT = Path(__file__).resolve().parents[1]
DATA = json.loads((ROOT / "tests" / "data" / "cpu_trace_fsdp_mechanisms.json").read_text())
RAW = ROOT / "tests" / "data" / "stacks_h100_raw"
#: the estimate within this of the traced per-rank peak (largest seen: +6.7 %, Qwen2.5 1.5B LoRA with torchtune's
#: loss at 8k; every FSDP2 estimate is above its trace)
TOLERANCE_PCT = 7.0
#: the trace against the H100 by stage: the backward's extra tied-embedding gradient allowed for (module docstring)
STAGE_TOLERANCE_PCT = {"forward": 1.0, "optimizer": 4.0, "backward": 6.0}

FSDP = {cid: c for cid, c in DATA["cases"].items() if c["ranks"] == 8}
ONE = {cid: c for cid, c in DATA["cases"].items() if c["ranks"] == 1}


def _h100(case_id: str) -> dict[str, int]:
    for path in sorted(RAW.glob("call*_results.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r.get("id") == case_id and r.get("status") == "ok":
                step2 = r["measured"]["phase_peaks"][1]  # the steady state (states exist from step 2 on)
                return {s: int(step2[s]) for s in ("forward", "backward", "optimizer")}
    raise AssertionError(f"{case_id} is not in {RAW}")


def test_the_data_covers_each_mechanism_on_eight_ranks_and_one() -> None:
    assert {(c["loss"], c["optimizer"]) for c in FSDP.values()} >= {("torchtune", "adamw"), ("hf", "muon"),
                                                                     ("torchtune", "muon"), ("hf", "adamw")}
    assert {(c["model"], c["method"]) for c in FSDP.values() if c["loss"] == "torchtune"} == {
        ("l1b", "full"), ("q1b5", "full"), ("q1b5", "lora")}
    assert {c["h100_case"] for c in ONE.values()} == {"h100-l1b-full-mixed-fused-b1-s4096-ck-losstorchtune",
                                                      "h100-l1b-full-mixed-fused-b1-s2048-ck-muon",
                                                      "h100-q1b5-lora16al-fused-b1-s8192-ck-losstorchtune"}
    for c in FSDP.values():
        assert c["request"]["parallelism"]["sharding"] == "fsdp"
        assert c["request"]["hardware"]["gpus_per_node"] == 8
        assert "FSDP2 over a fake process group of 8: rank 0 traced" in c["notes"]


@pytest.mark.parametrize("cid", sorted(ONE))
def test_the_trace_reproduces_the_h100_on_one_gpu(cid: str) -> None:
    case = ONE[cid]
    measured = _h100(case["h100_case"])
    for stage, got in measured.items():
        traced = case["traced_stage_peak_bytes"][stage]
        err = 100.0 * (traced - got) / got
        assert abs(err) <= STAGE_TOLERANCE_PCT[stage], (cid, stage, traced, got, err)


@pytest.mark.parametrize("cid", sorted(FSDP))
def test_the_estimate_is_within_tolerance_of_the_fsdp2_trace(cid: str) -> None:
    case = FSDP[cid]
    mem = estimate(EstimateRequest.model_validate(case["request"])).memory
    predicted = mem.peak_allocated_bytes - mem.managed_bytes
    err = 100.0 * (predicted - case["traced_peak_bytes"]) / case["traced_peak_bytes"]
    assert -1.0 <= err <= TOLERANCE_PCT, (cid, predicted, case["traced_peak_bytes"], err)
    # the error bar the estimate carries covers the trace too
    assert abs(err) <= mem.error_bar_pct, (cid, err, mem.error_bar_pct)


def test_muons_gather_under_fsdp2_stays_below_the_peak() -> None:
    """Newton-Schulz on an FSDP2-sharded matrix gathers operands (DTensor's redistributions of ``X @ X.mT`` and
    ``A @ A``): the traced optimizer step holds at most a few full matrices beyond the sharded states, far below the
    step's peak; the estimate adds no memory for it."""
    muon = FSDP["l1b-full-mixed-s2048-ck-muon-fsdp8"]
    adamw = FSDP["l1b-full-mixed-s4096-ck-materialized-fsdp8"]
    stages = muon["traced_stage_peak_bytes"]
    assert stages["optimizer"] < 0.5 * muon["traced_peak_bytes"]
    # sharded parameters + fp32 gradients + states, and the transient: under 4 bf16 copies of the largest matrix
    held = muon["traced_parts_bytes"]["parameters"] + muon["traced_parts_bytes"]["optimizer_states"] \
        + muon["traced_parts_bytes"]["parameters"]
    largest = 8192 * 2048 * 2
    assert 0 < stages["optimizer"] - held < 4 * largest, (stages["optimizer"], held)
    assert adamw["traced_stage_peak_bytes"]["optimizer"] > stages["optimizer"]  # Muon: one state, AdamW two


def test_the_script_describes_the_cases_it_wrote() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks" / "check"))
    import trace_fsdp_mechanisms as script

    ids = {c[0] for c in script.CASES}
    assert ids == set(DATA["cases"])
    for cid, _h100, model, method, loss, optimizer, seq, ranks in script.CASES:
        assert DATA["cases"][cid]["request"] == script.request_body(model, method, loss, optimizer, seq, ranks)


@pytest.mark.parametrize("cid", sorted(c for c in FSDP if FSDP[c]["optimizer"] == "muon"))
def test_the_trace_sees_muons_newton_schulz_as_dtensor_operators_on_whole_matrices(cid: str) -> None:
    """The trace's dispatch mode runs above DTensor, so under FSDP2 it sees Muon's Newton-Schulz operators with the
    matrices' global shapes: their FLOPs add up to ``muon_newton_schulz_flops`` of each whole decoder matrix times
    the layers, and ``muon_dtensor_ops`` counts those operators. What each rank runs locally, below DTensor's
    sharding propagation, is ``muon_newton_schulz_local_flops`` (tests/test_muon_dtensor.py)."""
    from estimator.training.mechanisms import muon_newton_schulz_flops

    case = FSDP[cid]
    m = case["request"]["model"]
    h, ffn, layers = m["hidden_size"], m["ffn_hidden_size"], m["num_layers"]
    kv = m["num_kv_heads"] * h // m["num_attention_heads"]
    mats = [(h, h), (kv, h), (kv, h), (h, h), (ffn, h), (ffn, h), (h, ffn)]  # q k v o gate up down
    expected = layers * sum(muon_newton_schulz_flops(r, c) for r, c in mats)
    gemms = case["traced_optimizer_gemms"]
    traced = sum(2 * a * k * b * n for key, n in gemms.items() for a, k, b in [map(int, key.split("x"))])
    assert traced == expected, (traced, expected)
    shard_rows = h // case["ranks"]
    assert not any(shard_rows in tuple(map(int, key.split("x"))) for key in gemms)
