"""``GET /faq``: the source article's questions, answered live with the estimator's own numbers.

Every answer is computed on request from the catalog the app serves (the same calls as ``/estimate``, ``/plan``
and ``/tco``) and says which assumptions it used; each links to the page that shows the details. Answers are
memoised per catalog version (the catalog is the only input that changes between requests).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.core.i18n import current as current_locale
from app.core.i18n import gettext as _
from app.core.i18n import localize_number
from app.deps import CatalogDep
from app.schemas.tco import UpgradeRequest, UpgradeSide
from app.services.plan_rules import usable_plan
from app.services.tco import compute_upgrade
from app.web import backend
from app.web.forms import request_to_query
from app.web.layout_suggestion import layout_words
from app.web.templating import duration, gib, money, num, render
from estimator import EstimateRequest, EstimatorError
from estimator.facility.airflow import DEFAULT_DELTA_T_K, airflow_cfm
from estimator.facility.rack import default_rack_kw, plan_rack_for_server
from estimator.planner.plan import PlanRequest

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["Answer", "answers", "router"]

router = APIRouter()

MODEL = "llama-3.1-70b"
A100 = "a100-sxm4-80gb"
TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022 (Chinchilla): compute-optimal at about 20 tokens per parameter
#: a legacy rack (tco_defaults rack_kw source: "legacy racks 10-15 kW"); the other column is the one default budget
LEGACY_RACK_KW = 15.0
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
    if days >= 365:
        return _("%(years)s years (%(days)s days)") % {"years": num(days / 365.25, 1), "days": num(days)}
    return _("%(days)s days") % {"days": num(days, 1)}


def _scratch(catalog: Catalog) -> Answer:
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
    best = usable_plan(PlanRequest.model_validate({
        "model": MODEL, "training": {"method": "full", "train_tokens": tokens},
        "hardware": {"gpu": A100, "num_nodes": 1, "gpus_per_node": 8}, "top_k": 1}), catalog).plans
    a = Answer("scratch", _("Can 8x A100 80GB train a 70B model from scratch?"), "")
    fits, no_fit = _("fits"), _("does not fit")
    a.facts.append((_("Without offload (ZeRO-3, full checkpointing)"),
                    _("%(used)s per GPU of %(capacity)s: %(verdict)s") % {
                        "used": gib(plain.memory.total_bytes), "capacity": gib(plain.memory.capacity_bytes),
                        "verdict": fits if plain.memory.fits else no_fit}))
    a.facts.append((_("With parameters and optimizer offloaded to the CPU"),
                    _("%(used)s per GPU: %(verdict)s") % {"used": gib(off.memory.total_bytes),
                                                         "verdict": fits if off.memory.fits else no_fit}))
    if off.host is not None:
        a.facts.append((_("Host RAM that offload needs"), _("%(ram)s per node (recommended: %(dimms)s)") % {
            "ram": gib(off.host.ram_bytes_per_node, 0),
            "dimms": off.host.recommended_dimms or off.host.recommended_ram_gib}))
    a.facts.append((_("Compute-optimal tokens"), _("%(tokens)s T (%(per)s per parameter, %(params)s B parameters)") % {
        "tokens": num(tokens / 1e12, 2), "per": TOKENS_PER_PARAM, "params": num(params / 1e9, 1)}))
    if off.train is not None and off.time is not None:
        a.facts.append((_("Time with offload"), _("%(time)s at %(tps)s tokens/s") % {
            "time": _years(off.train.time_to_train_s), "tps": num(off.time.tokens_per_s)}))
    if best and best[0].time_to_train_s:
        p = best[0]
        a.facts.append((_("Time with the planner's fastest layout"),
                        f"{_years(p.time_to_train_s or 0.0)} ({layout_words(p.request)})"))
        a.links.append((_("The planner's layout"), f"/estimate?{request_to_query(p.request)}"))
    verdict = _("It fits only with CPU offload") if off.memory.fits and not plain.memory.fits else (
        _("It fits without offload") if plain.memory.fits else _("It does not fit even with offload"))
    fastest = min([t for t in ((off.train.time_to_train_s if off.train else None),
                               (best[0].time_to_train_s if best else None)) if t], default=None)
    a.short = _("%(verdict)s, but it is not practical: a compute-optimal pretraining run takes %(time)s on one "
                "node.") % {"verdict": verdict, "time": _years(fastest) if fastest else _("too long to estimate")}
    a.links[:0] = [(_("Without offload"), f"/estimate?{request_to_query(plain_req)}"),
                   (_("With offload"), f"/estimate?{request_to_query(off_req)}")]
    a.assumptions = [
        _("Model: Llama 3.1 70B shape, full training (pretraining and full fine-tuning hold the same memory), "
          "bf16-mixed, AdamW, sequence length %(seq)s, micro-batch 1.") % {"seq": plain_req.training.seq_len},
        _("Compute-optimal budget: %(per)s tokens per parameter (Hoffmann et al. 2022, 'Training "
          "Compute-Optimal Large Language Models').") % {"per": TOKENS_PER_PARAM},
        _("Hardware: one node of 8x NVIDIA A100 SXM4 80GB; host RAM as the estimator sizes it (offloaded fp32 "
          "master weights, gradients and Adam states, pinned buffers, data-loader workers, OS)."),
        _("Step time error bar ±%(err)s%% with offload (a kind never measured).") % {
            "err": f"{off.time.error_bar_pct:.0f}"} if off.time else _("No step time model for this job."),
    ]
    return a


def _upgrade(catalog: Catalog) -> Answer:
    body = UpgradeRequest(job=EstimateRequest.model_validate(UPGRADE_JOB),
                          current=UpgradeSide(server=UPGRADE_CURRENT), candidate=UpgradeSide(server=UPGRADE_CANDIDATE))
    up = compute_upgrade(body, catalog)
    u = up.answer
    a = Answer("upgrade", _("When should I move from 8x A100 to 8x H100?"), up.verdict)
    verdicts = {"upgrade": _("upgrade"), "upgrade-if-time-matters": _("upgrade if time matters"),
                "upgrade-if-cost-matters": _("upgrade if cost matters"), "stay": _("stay")}
    a.facts = [
        (_("Time per run"), _("%(a)s on %(name_a)s, %(b)s on %(name_b)s (%(x)sx)") % {
            "a": duration(up.current.time_to_train_s), "name_a": up.current.server_name,
            "b": duration(up.candidate.time_to_train_s), "name_b": up.candidate.server_name,
            "x": num(u.speedup, 2)}),
        (_("Cost per run, owned"), _("%(a)s vs %(b)s") % {"a": money(u.own_a.cost_usd), "b": money(u.own_b.cost_usd)}),
        (_("Payback of buying the H100 server"), _("%(n)s runs") % {"n": num(u.break_even_runs)}
         if u.break_even_runs else _("never (it does not save running cost)")),
        (_("Pays back within the life"), _("yes") if u.pays_back_within_life else _("no")),
        (_("Verdict"), verdicts.get(u.verdict, u.verdict)),
    ]
    a.links = [(_("Own or rent, and the upgrade, on the TCO page"),
                f"/tco?{request_to_query(EstimateRequest.model_validate(UPGRADE_JOB))}")]
    a.assumptions = [
        _("Job: Llama 3.1 70B LoRA, ZeRO-3, full activation checkpointing, 1 B tokens, on all 8 GPUs of each "
          "server."),
        _("Current: %(a)s at %(pa)s; candidate: %(b)s at %(pb)s (catalog prices and dates on the TCO page).") % {
            "a": up.current.server_name, "pa": money(up.current.server_price_usd), "b": up.candidate.server_name,
            "pb": money(up.candidate.server_price_usd)},
        *[f"{row.description}: {row.value} {row.unit}" for row in up.assumptions
          if row.name in ("electricity_usd_per_kwh", "pue", "utilisation", "depreciation_years", "horizon_years")],
        *up.notes,
    ]
    return a


def _rack(catalog: Catalog) -> Answer:
    a = Answer("rack", _("Does one 8-GPU node need a whole rack?"), "")
    rack_kws = (LEGACY_RACK_KW, default_rack_kw(catalog))  # the estimate's and /tco's default budget, 40.8 kW
    a.header = [_("Server"), _("Peak kW"), "BTU/h", _("CFM at %(dt)s K rise") % {"dt": f"{DEFAULT_DELTA_T_K:.0f}"}, "U",
                *[_("Nodes per %(kw)s kW rack") % {"kw": localize_number(f"{kw:g}")} for kw in rack_kws]]
    limits = {"power": _("power"), "space": _("space")}
    kws: list[float] = []
    units: list[int] = []
    per_rack: dict[float, list[int]] = {kw: [] for kw in rack_kws}
    for sid in RACK_SERVERS:
        if sid not in catalog.servers:
            continue
        plans = [plan_rack_for_server(sid, kw, catalog=catalog) for kw in rack_kws]
        p = plans[0]
        kws.append(p.kw_per_node)
        units.append(p.rack_units_per_node)
        for kw, q in zip(rack_kws, plans, strict=True):
            per_rack[kw].append(q.nodes_per_rack)
        a.rows.append([catalog.servers[sid].name, num(p.kw_per_node, 1), num(p.btu_per_hour_per_node),
                       num(airflow_cfm(p.kw_per_node * 1000)), str(p.rack_units_per_node),
                       *[f"{q.nodes_per_rack} ({limits.get(q.limited_by, q.limited_by)})" for q in plans]])
    if kws:
        spans = "; ".join(_("a %(kw)s kW rack holds %(lo)s-%(hi)s of them") % {
                              "kw": localize_number(f"{kw:g}"), "lo": min(n), "hi": max(n)}
                          for kw, n in per_rack.items())
        a.short = _("No. One node takes %(ulo)s-%(uhi)s U of a 42 U rack, but it draws %(klo)s-%(khi)s kW at peak, so "
                    "power, not space, sets how many share a rack: %(spans)s.") % {
            "ulo": min(units), "uhi": max(units), "klo": num(min(kws), 1), "khi": num(max(kws), 1), "spans": spans}
    a.links = [(_("Power and rack per node for your job"), f"/estimate?model={MODEL}&training.method=lora"
                                                         "&hardware.server=nvidia-dgx-a100-640gb")]
    a.assumptions = [
        _("Peak power: the catalog's maximum power of the server (provisioning figure), else 1.82x the GPUs' TDP."),
        _("Heat: 1 W = 3.412 BTU/h."),
        _("Airflow: sensible heat of air at sea level, rho = 1.2 kg/m3, c_p = 1005 J/(kg K), a %(k)s K (%(f)s F) rise "
          "from inlet to exhaust; CFM = BTU/h / (1.08 x rise in F).") % {
            "k": f"{DEFAULT_DELTA_T_K:.0f}", "f": f"{DEFAULT_DELTA_T_K * 1.8:.0f}"},
        _("Nodes per rack: the smaller of rack kW / node kW and the rack's 42 U of space."),
    ]
    return a


def _serving(request_paths: set[str], catalog: Catalog) -> Answer:
    probe = backend.run_estimate(EstimateRequest.model_validate({"model": MODEL, "training": {"method": "lora"}}),
                                 catalog)
    weights = probe.model.total_params * 2
    a = Answer("serve", _("Can the training node serve the model afterwards?"), "")
    # the Serve page is always part of the app (app.web.serve_page): never answer as if it were not
    a.short = _("Yes: the serving estimate sizes it (the weights alone are %(all)s in bf16, %(per)s per GPU on 8 "
                "GPUs with tensor parallelism; the serving page adds the KV cache, batch and latency).") % {
        "all": gib(weights), "per": gib(weights / 8)}
    a.links = [(_("Serving estimate"), f"/serve?model={MODEL}&gpu={A100}&server=nvidia-dgx-a100-640gb")]
    a.assumptions = [_("Weights: the model's parameter count x 2 bytes (bf16); no KV cache, activations or "
                       "serving framework overhead counted.")]
    return a


_CACHE: dict[tuple[str, bool, str], list[Answer]] = {}
_LOCK = threading.Lock()


def answers(catalog: Catalog, request_paths: set[str]) -> list[Answer]:
    key = (str(getattr(catalog, "version", "")) or str(id(catalog)), True, current_locale())
    with _LOCK:
        found = _CACHE.get(key)
    if found is not None:
        return found
    out = []
    for make in (_scratch, _upgrade, _rack):
        try:
            out.append(make(catalog))
        except EstimatorError as exc:  # a catalog edit can remove a server an answer names
            out.append(Answer(make.__name__.strip("_"), make.__name__.strip("_"),
                              _("Cannot answer: %(e)s") % {"e": exc.message}))
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
