"""Step time against published training throughputs (``tests/data/published-results.csv``).

Which rows, how they become requests and why others are left out: ``tests/test_published_time_cases.py``
(its docstring). Every expressible row is one parametrized case; the error is estimated / published
tokens/s per GPU - 1.

Acceptance (issue #3): median |error| <= 15% over all rows (also held per source). Each row must stay within
its source's stated worst case (``WORST``; ``docs/accuracy-time.md`` lists every row):

- llm-foundry +72% (MPT-760M at 65k tokens on A100): the 2023 stack (PyTorch 1.13/2.0, flash-attn 1/2) ran
  long-sequence attention well below today's kernels; short sequences are within ~15% on A100;
- Megatron-Core +52% (GPT 1.7B on 48 H100: a fixed per-step overhead the model does not see) and -29%
  (32B, TP 8: the README's runs overlap TP communication, which the request cannot say);
- Narayanan 2021 +32% (1.7B, micro-batch unknown), torchtitan +29% (H100 capped at 500 W with HBM2e, priced
  as the catalog's 700 W H100 SXM), Korthikanti 2022 +12%.

The A100 -> H100 speed-up of the same llm-foundry job (same model, sequence length and GPU count on both)
must come out right in sign for every pair and within 15% in size (median over pairs, and the geometric-mean
speed-up); the worst pair is stated in ``WORST_SPEEDUP``.
"""

from __future__ import annotations

import math
import statistics
from functools import cache

import pytest
from test_published_time_cases import PublishedCase, all_cases, foundry

from estimator.layout import build_layout
from estimator.modelspec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.timing import step_time
from hardware_catalog import Catalog, load_catalog

MEDIAN_LIMIT = 0.15
WORST = {"llm-foundry": 0.75, "torchtitan": 0.30, "Korthikanti 2022": 0.15, "Narayanan 2021": 0.35,
         "Megatron-Core": 0.55}
SPEEDUP_LIMIT = 0.15
WORST_SPEEDUP = 0.26


@cache
def catalog() -> Catalog:
    return load_catalog()


@cache
def _cases() -> tuple[PublishedCase, ...]:
    return tuple(all_cases())


def estimated_tokens_per_s_per_gpu(case: PublishedCase) -> float:
    req = EstimateRequest.model_validate(case.request)
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(req, shape)
    c = catalog()
    return step_time(req, shape, layout, c.gpus[case.gpu], None, c).tokens_per_s_per_gpu


_ERRORS: dict[str, float] = {}


def relative_error(case: PublishedCase) -> float:
    if case.id not in _ERRORS:
        _ERRORS[case.id] = estimated_tokens_per_s_per_gpu(case) / case.tokens_per_s_per_gpu - 1.0
    return _ERRORS[case.id]


def test_rows_of_every_source_are_expressed() -> None:
    counts = {s: sum(1 for c in _cases() if c.source == s) for s in WORST}
    assert counts["llm-foundry"] >= 200 and all(n >= 8 for n in counts.values())
    assert len({c.id for c in _cases()}) == len(_cases())


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.id)
def test_published_row_within_its_sources_worst_case(case: PublishedCase) -> None:
    assert abs(relative_error(case)) <= WORST[case.source]


def test_median_error_over_all_rows_within_15_percent() -> None:
    assert statistics.median(abs(relative_error(c)) for c in _cases()) <= MEDIAN_LIMIT


@pytest.mark.parametrize("source", sorted(WORST))
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
    assert max(abs(x) for x in errors) <= WORST_SPEEDUP
