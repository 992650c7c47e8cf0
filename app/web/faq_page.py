"""``GET /faq``: the source article's questions, answered live with the estimator's own numbers.

Every answer is computed on request from the catalog the app serves (the same calls as ``/estimate``, ``/plan``
and ``/tco``) and says which assumptions it used; each links to the page that shows the details. Answers are
memoised per catalog version (the catalog is the only input that changes between requests).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.deps import CatalogDep
from app.schemas.tco import UpgradeRequest, UpgradeSide
from app.services.tco import compute_upgrade
from app.web import backend
from app.web.forms import request_to_query
from app.web.layout_suggestion import layout_words
from app.web.templating import duration, gib, render
from estimator import EstimateRequest, EstimatorError
from estimator.airflow import DEFAULT_DELTA_T_K, airflow_cfm
from estimator.planner import PlanRequest, plan
from estimator.rack import plan_rack_for_server

__all__ = ["Answer", "answers", "router"]

router = APIRouter()

MODEL = "llama-3.1-70b"
A100 = "a100-sxm4-80gb"
TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022 (Chinchilla): compute-optimal at about 20 tokens per parameter
RACK_KW = (15.0, 40.0)
RACK_SERVERS = ("nvidia-dgx-a100-640gb", "dell-xe9680-a100", "nvidia-dgx-h100", "dell-xe9680-h100")
UPGRADE_CURRENT, UPGRADE_CANDIDATE = "dell-xe9680-a100", "dell-xe9680-h100"
#: the fine-tune of the upgrade answer: 70B LoRA, ZeRO-3, full checkpointing, 1B tokens
UPGRADE_JOB = {"model": MODEL, "training": {"method": "lora", "activation_checkpointing": "full",
                                            "train_tokens": 1_000_000_000},
               "parallelism": {"sharding": "zero3"}}


@dataclass
class Answer:
    key: str
    question: str
    short: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    header: list[str] = field(default_factory=list)


def _years(seconds: float) -> str:
    days = seconds / 86400
    return f"{days / 365.25:,.1f} years ({days:,.0f} days)" if days >= 365 else f"{days:,.1f} days"


def _scratch(catalog: Any) -> Answer:
    base = {"model": MODEL, "training": {"method": "full", "activation_checkpointing": "full"},
            "hardware": {"gpu": A100, "num_nodes": 1, "gpus_per_node": 8}}
    probe = backend.run_estimate(EstimateRequest.model_validate({**base, "parallelism": {"sharding": "zero3"}}),
                                 catalog)
    params = probe.model.total_params
    tokens = TOKENS_PER_PARAM * params
    train = {**base["training"], "train_tokens": tokens}  # type: ignore[dict-item]
    plain_req = EstimateRequest.model_validate({**base, "training": train, "parallelism": {"sharding": "zero3"}})
    off_req = EstimateRequest.model_validate({**base, "training": train,
                                              "parallelism": {"sharding": "zero3", "offload": "optimizer+params"}})
    plain, off = backend.run_estimate(plain_req, catalog), backend.run_estimate(off_req, catalog)
    best = plan(PlanRequest.model_validate({"model": MODEL, "training": {"method": "full", "train_tokens": tokens},
                                            "hardware": {"gpu": A100, "num_nodes": 1, "gpus_per_node": 8},
                                            "top_k": 1}), catalog).plans
    a = Answer("scratch", "Can 8x A100 80GB train a 70B model from scratch?", "")
    a.facts.append(("Without offload (ZeRO-3, full checkpointing)",
                    f"{gib(plain.memory.total_bytes)} per GPU of {gib(plain.memory.capacity_bytes)}: "
                    f"{'fits' if plain.memory.fits else 'does not fit'}"))
    a.facts.append(("With parameters and optimizer offloaded to the CPU",
                    f"{gib(off.memory.total_bytes)} per GPU: {'fits' if off.memory.fits else 'does not fit'}"))
    if off.host is not None:
        a.facts.append(("Host RAM that offload needs", f"{gib(off.host.ram_bytes_per_node, 0)} per node"
                        f" (recommended: {off.host.recommended_dimms or off.host.recommended_ram_gib})"))
    a.facts.append(("Compute-optimal tokens", f"{tokens / 1e12:,.2f} T ({TOKENS_PER_PARAM} per parameter, "
                    f"{params / 1e9:,.1f} B parameters)"))
    if off.train is not None and off.time is not None:
        a.facts.append(("Time with offload", f"{_years(off.train.time_to_train_s)} at "
                        f"{off.time.tokens_per_s:,.0f} tokens/s"))
    if best and best[0].time_to_train_s:
        p = best[0]
        a.facts.append(("Time with the planner's fastest layout",
                        f"{_years(p.time_to_train_s or 0.0)} ({layout_words(p.request)})"))
        a.links.append(("The planner's layout", f"/estimate?{request_to_query(p.request)}"))
    verdict = "fits only with CPU offload" if off.memory.fits and not plain.memory.fits else (
        "fits without offload" if plain.memory.fits else "does not fit even with offload")
    fastest = min([t for t in ((off.train.time_to_train_s if off.train else None),
                               (best[0].time_to_train_s if best else None)) if t], default=None)
    a.short = (f"It {verdict}, but it is not practical: a compute-optimal pretraining run takes "
               f"{_years(fastest) if fastest else 'too long to estimate'} on one node.")
    a.links[:0] = [("Without offload", f"/estimate?{request_to_query(plain_req)}"),
                   ("With offload", f"/estimate?{request_to_query(off_req)}")]
    a.assumptions = [
        f"Model: Llama 3.1 70B shape, full training (pretraining and full fine-tuning hold the same memory), "
        f"bf16-mixed, AdamW, sequence length {plain_req.training.seq_len}, micro-batch 1.",
        f"Compute-optimal budget: {TOKENS_PER_PARAM} tokens per parameter (Hoffmann et al. 2022, 'Training "
        "Compute-Optimal Large Language Models').",
        "Hardware: one node of 8x NVIDIA A100 SXM4 80GB; host RAM as the estimator sizes it (offloaded fp32 "
        "master weights, gradients and Adam states, pinned buffers, data-loader workers, OS).",
        f"Step time error bar ±{off.time.error_bar_pct:.0f}% with offload (a kind never measured)."
        if off.time else "No step time model for this job.",
    ]
    return a


def _upgrade(catalog: Any) -> Answer:
    body = UpgradeRequest(job=EstimateRequest.model_validate(UPGRADE_JOB),
                          current=UpgradeSide(server=UPGRADE_CURRENT), candidate=UpgradeSide(server=UPGRADE_CANDIDATE))
    up = compute_upgrade(body, catalog)
    u = up.answer
    a = Answer("upgrade", "When should I move from 8x A100 to 8x H100?", up.verdict)
    a.facts = [
        ("Time per run", f"{duration(up.current.time_to_train_s)} on {up.current.server_name}, "
                         f"{duration(up.candidate.time_to_train_s)} on {up.candidate.server_name} "
                         f"({u.speedup:,.2f}x)"),
        ("Cost per run, owned", f"${u.own_a.cost_usd:,.0f} vs ${u.own_b.cost_usd:,.0f}"),
        ("Payback of buying the H100 server", f"{u.break_even_runs:,.0f} runs" if u.break_even_runs else
         "never (it does not save running cost)"),
        ("Pays back within the life", "yes" if u.pays_back_within_life else "no"),
        ("Verdict", u.verdict.replace("-", " ")),
    ]
    a.links = [("Own or rent, and the upgrade, on the TCO page",
                f"/tco?{request_to_query(EstimateRequest.model_validate(UPGRADE_JOB))}")]
    a.assumptions = [
        "Job: Llama 3.1 70B LoRA, ZeRO-3, full activation checkpointing, 1 B tokens, on all 8 GPUs of each server.",
        f"Current: {up.current.server_name} at ${up.current.server_price_usd:,.0f}; candidate: "
        f"{up.candidate.server_name} at ${up.candidate.server_price_usd:,.0f} (catalog prices and dates on the "
        "TCO page).",
        *[f"{row.description}: {row.value} {row.unit}" for row in up.assumptions
          if row.name in ("electricity_usd_per_kwh", "pue", "utilisation", "depreciation_years", "horizon_years")],
        *up.notes,
    ]
    return a


def _rack(catalog: Any) -> Answer:
    a = Answer("rack", "Does one 8-GPU node need a whole rack?", "")
    a.header = ["Server", "Peak kW", "BTU/h", f"CFM at {DEFAULT_DELTA_T_K:.0f} K rise", "U",
                *[f"Nodes per {kw:g} kW rack" for kw in RACK_KW]]
    kws: list[float] = []
    units: list[int] = []
    per_rack: dict[float, list[int]] = {kw: [] for kw in RACK_KW}
    for sid in RACK_SERVERS:
        if sid not in catalog.servers:
            continue
        plans = [plan_rack_for_server(sid, kw, catalog=catalog) for kw in RACK_KW]
        p = plans[0]
        kws.append(p.kw_per_node)
        units.append(p.rack_units_per_node)
        for kw, q in zip(RACK_KW, plans, strict=True):
            per_rack[kw].append(q.nodes_per_rack)
        a.rows.append([catalog.servers[sid].name, f"{p.kw_per_node:,.1f}", f"{p.btu_per_hour_per_node:,.0f}",
                       f"{airflow_cfm(p.kw_per_node * 1000):,.0f}", str(p.rack_units_per_node),
                       *[f"{q.nodes_per_rack} ({q.limited_by})" for q in plans]])
    if kws:
        spans = "; ".join(f"a {kw:g} kW rack holds {min(n)}-{max(n)} of them" for kw, n in per_rack.items())
        a.short = (f"No. One node takes {min(units)}-{max(units)} U of a 42 U rack, but it draws {min(kws):,.1f}-"
                   f"{max(kws):,.1f} kW at peak, so power, not space, sets how many share a rack: {spans}.")
    a.links = [("Power and rack per node for your job", f"/estimate?model={MODEL}&training.method=lora"
                                                         "&hardware.server=nvidia-dgx-a100-640gb")]
    a.assumptions = [
        "Peak power: the catalog's maximum power of the server (provisioning figure), else 1.82x the GPUs' TDP.",
        "Heat: 1 W = 3.412 BTU/h.",
        f"Airflow: sensible heat of air at sea level, rho = 1.2 kg/m3, c_p = 1005 J/(kg K), a {DEFAULT_DELTA_T_K:.0f} K"
        f" ({DEFAULT_DELTA_T_K * 1.8:.0f} F) rise from inlet to exhaust; CFM = BTU/h / (1.08 x rise in F).",
        "Nodes per rack: the smaller of rack kW / node kW and the rack's 42 U of space.",
    ]
    return a


def _serving(request_paths: set[str], catalog: Any) -> Answer:
    probe = backend.run_estimate(EstimateRequest.model_validate({"model": MODEL, "training": {"method": "lora"}}),
                                 catalog)
    weights = probe.model.total_params * 2
    a = Answer("serve", "Can the training node serve the model afterwards?", "")
    if "/serve" in request_paths:
        a.short = "Yes: the serving estimate sizes it."
        a.links = [("Serving estimate", f"/serve?model={MODEL}")]
    else:
        a.short = ("Not estimated yet: capplan has no serving estimator. The weights alone are "
                   f"{gib(weights)} in bf16, {gib(weights / 8)} per GPU on 8 GPUs with tensor parallelism; the KV "
                   "cache, batch and latency are not sized.")
    a.assumptions = ["Weights: the model's parameter count x 2 bytes (bf16); no KV cache, activations or "
                     "serving framework overhead counted."]
    return a


_CACHE: dict[tuple[str, bool], list[Answer]] = {}
_LOCK = threading.Lock()


def answers(catalog: Any, request_paths: set[str]) -> list[Answer]:
    key = (str(getattr(catalog, "version", "")) or str(id(catalog)), "/serve" in request_paths)
    with _LOCK:
        found = _CACHE.get(key)
    if found is not None:
        return found
    out = []
    for make in (_scratch, _upgrade, _rack):
        try:
            out.append(make(catalog))
        except EstimatorError as exc:  # a catalog edit can remove a server an answer names
            out.append(Answer(make.__name__.strip("_"), make.__name__.strip("_"), f"Cannot answer: {exc.message}"))
    out.append(_serving(request_paths, catalog))
    with _LOCK:
        if len(_CACHE) > 16:
            _CACHE.clear()
        _CACHE[key] = out
    return out


@router.get("/faq", response_class=HTMLResponse, name="faq_page")
def faq_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    paths = {getattr(r, "path", "") for r in request.app.routes}
    return render(request, "faq.html", {"answers": answers(catalog, paths), "active": "faq"})
