"""``GET /estimate/layout``: the planner's best layout that fits, for the job and hardware of an estimate.

A first estimate on several GPUs starts from the request's defaults (plain data parallelism, no
checkpointing), which a 70B job does not fit. The page asks this fragment (htmx, after the result has shown)
for the planner's fastest plan on the *same* hardware (GPU, server, nodes and GPUs per node pinned), the *same*
job (model, method, sequence length, precision, optimizer, tokens) and the same global batch in sequences;
everything else (sharding, offload, tensor/pipeline parallelism, checkpointing, micro-batch) is the planner's
to choose. It is shown as a suggestion with a link to its estimate; the API defaults do not change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.core.i18n import gettext as _
from app.deps import CatalogDep
from app.web.costing import cost_to_train
from app.web.forms import parse_form, request_to_query
from app.web.templating import render
from estimator import EstimateRequest, EstimatorError
from estimator.planner.contract import Constraints
from estimator.planner.plan import Plan, PlanRequest
from estimator.request import Hardware, Training
from estimator.tco.run_cost import CostChoice

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["LAYOUT_KEYS", "adopt_layout", "best_plan", "global_batch", "layout_words", "plan_pricing",
           "plan_request_for", "plan_url_for", "router", "same_hardware", "same_job", "same_layout"]

router = APIRouter()

#: Training fields the planner chooses (not pinned when asking it for a layout).
_CHOSEN = {"micro_batch_size", "gradient_accumulation_steps", "activation_checkpointing", "virtual_stages",
           "pipeline_schedule"}
#: What makes two layouts the same, in EstimateRequest terms.
LAYOUT_KEYS = (("parallelism", ("sharding", "offload", "tp", "pp", "cp", "ep", "framework", "sequence_parallel")),
               ("training", ("activation_checkpointing", "micro_batch_size", "gradient_accumulation_steps")))


def global_batch(req: EstimateRequest) -> int:
    """The global batch in sequences of an estimate request: micro-batch x accumulation x data-parallel
    replicas. The one definition the estimate page shows and the suggested layout and ``/plan`` search with."""
    t = req.training
    return int(t.micro_batch_size * t.gradient_accumulation_steps * max(1, req.dp))


def same_hardware(a: EstimateRequest, b: EstimateRequest) -> bool:
    """Same GPU, server, node count and GPUs per node."""
    ha, hb = a.hardware, b.hardware
    return (ha.gpu, ha.server, ha.num_nodes, ha.gpus_per_node) == (hb.gpu, hb.server, hb.num_nodes, hb.gpus_per_node)


def adopt_layout(user: EstimateRequest, chosen: EstimateRequest) -> EstimateRequest:
    """``user``'s request with only the layout of ``chosen`` (its parallelism and the training fields the
    planner chooses): the model, the job, the hardware, the host and the cost basis stay the user's."""
    training = user.training.model_copy(update={k: getattr(chosen.training, k) for k in _CHOSEN})
    return user.model_copy(update={"training": training, "parallelism": chosen.parallelism})


def plan_request_for(req: EstimateRequest, top_k: int = 1) -> PlanRequest:
    """The planner question "best layout for this job on this hardware", for an estimate request."""
    training = Training.model_validate(req.training.model_dump(exclude=_CHOSEN, exclude_defaults=True))
    hw = req.hardware
    hardware = Hardware.model_validate({"gpu": hw.gpu, "num_nodes": hw.num_nodes, "gpus_per_node": hw.gpus_per_node,
                                        **({"server": hw.server} if hw.server else {})})
    gbs = global_batch(req)
    return PlanRequest(model=req.model, training=training, hardware=hardware, host=req.host,
                       constraints=Constraints(max_nodes=hw.num_nodes), global_batch_size=gbs, objective="time",
                       top_k=top_k)


def best_plan(req: EstimateRequest, catalog: Catalog) -> Plan | None:
    from app.services.plan_rules import usable_plan

    response = usable_plan(plan_request_for(req), catalog)
    return response.plans[0] if response.plans else None


def _norm(section: str, key: str, value: Any) -> Any:
    return "zero3" if (section, key, value) == ("parallelism", "sharding", "fsdp") else value


def same_layout(a: EstimateRequest, b: EstimateRequest) -> bool:
    return all(_norm(s, k, getattr(getattr(a, s), k)) == _norm(s, k, getattr(getattr(b, s), k))
               for s, keys in LAYOUT_KEYS for k in keys)


def layout_words(req: EstimateRequest) -> str:
    """``FSDP (zero3), offload none, tp 1, pp 1, checkpointing full, micro-batch 1 x 8``."""
    p, t = req.parallelism, req.training
    parts = [f"{p.framework} {p.sharding}"]
    if p.offload != "none":
        parts.append(_("offload %(what)s") % {"what": p.offload})
    for name in ("tp", "pp", "cp", "ep"):
        if getattr(p, name) > 1:
            parts.append(f"{name} {getattr(p, name)}")
    parts.append(_("checkpointing %(level)s") % {"level": t.activation_checkpointing})
    parts.append(_("micro-batch %(mbs)s x %(gas)s accumulation") % {"mbs": t.micro_batch_size,
                                                                    "gas": t.gradient_accumulation_steps})
    return ", ".join(parts)


def plan_url_for(req: EstimateRequest) -> str:
    """``/plan`` for the same job on the same hardware, carrying the estimate it came from (``from_estimate``),
    so the plan page can say how its winner differs from that estimate and link both."""
    q = parse_qsl(request_to_query(req), keep_blank_values=True)
    job = {k: v for k, v in q if k in ("model", "model_json", "training.method", "training.seq_len",
                                       "training.train_tokens")}
    hw = req.hardware
    gbs = global_batch(req)
    pairs = [
        *job.items(),
        ("global_batch_size", str(gbs)),
        ("constraints.max_nodes", str(hw.num_nodes)),
        ("constraints.servers" if hw.server else "constraints.gpus", hw.server or hw.gpu),
        *plan_pricing(req),
        ("from_estimate", request_to_query(req)),
    ]
    if "training.method" not in job:
        pairs.append(("training.method", req.training.method))
    if "training.train_tokens" not in job:  # sent empty: the plan form's "none", not its 1e9 default
        pairs.append(("training.train_tokens", ""))
    return "/plan?" + urlencode(pairs)


def plan_pricing(req: EstimateRequest) -> list[tuple[str, str]]:
    """The plan form's ``pricing`` and ``cost.*`` that price a plan on the estimate's own cost basis: owned when
    the estimate owns its server (a chosen server, or ``cost.basis=own``), else the cloud at the estimate's
    on-demand or reserved price; the utilisation, $/kWh, PUE and provider class go along."""
    cost = req.cost or CostChoice()
    own = cost.basis == "own" or (cost.basis == "auto" and cost.offer_id is None and req.hardware.server is not None)
    pricing = "owned" if own else ("reserved" if cost.pricing == "reserved" else "on-demand")
    refine = [(f"cost.{k}", str(getattr(cost, k))) for k in ("utilisation", "electricity_usd_per_kwh", "pue")
              if getattr(cost, k) is not None]
    if "provider_class" in cost.model_fields_set:
        refine.append(("cost.provider_class", cost.provider_class))
    return [("pricing", pricing), *refine]


@router.get("/estimate/layout", response_class=HTMLResponse, name="estimate_layout")
def estimate_layout(request: Request, catalog: CatalogDep) -> HTMLResponse:
    """The suggestion card (or nothing to say) for the estimate whose query this is."""
    form = parse_form(request.query_params)
    context: dict[str, Any] = {"suggestion": None, "same": False, "error": None}
    if form.request is not None and form.request.hardware.world_size > 1:
        try:
            best = best_plan(form.request, catalog)
        except EstimatorError as exc:
            context["error"] = exc.message
        else:
            if best is not None:
                context.update(_suggestion(form.request, best, catalog))
    return render(request, "_layout_suggestion.html", context)


def _suggestion(user: EstimateRequest, best: Plan, catalog: Catalog) -> dict[str, Any]:
    """What the card says: the layout adopted on the user's own hardware and cost basis, with the figures of
    the very estimate "Use this layout" opens; a plan on other hardware only as a separate, labelled link."""
    from app.web import backend

    out: dict[str, Any] = {"current_words": layout_words(user), "plan_url": plan_url_for(user),
                           "batch": global_batch(user), "other_url": None, "other_words": None}
    if not same_hardware(user, best.request):
        hw = best.request.hardware
        out.update(other_url=f"/estimate?{request_to_query(best.request)}",
                   other_words=f"{hw.num_nodes * hw.gpus_per_node}x {backend.gpu_name(catalog, hw.gpu)}"
                               + (f" ({backend.server_name(catalog, hw.server)})" if hw.server else ""))
    adopted = adopt_layout(user, best.request)
    try:
        mine = backend.run_estimate(adopted, catalog)
    except EstimatorError as exc:
        out["error"] = exc.message
        return out
    out.update(suggestion=best, same=same_layout(user, adopted), words=layout_words(adopted),
               url=f"/estimate?{request_to_query(adopted)}", adopted=mine, fits=mine.memory.fits,
               adopted_cost=cost_to_train(catalog, mine))
    return out


def same_job(estimate: EstimateRequest, search: PlanRequest) -> bool:
    """The plan searches the estimate's own job (model, method, sequence length, tokens): the user may have
    changed the job on /plan since, and then the estimate is no longer "your layout" of it."""
    a, b = estimate.training, search.training
    return estimate.model == search.model and (a.method, a.seq_len, a.train_tokens) == (
        b.method, b.seq_len, b.train_tokens)


def plan_vs_estimate(params: Any, response: Any, catalog: Catalog, search: PlanRequest | None = None
                     ) -> dict[str, Any]:
    """For ``/plan?...&from_estimate=<estimate query>``: how the planner's winner differs from that estimate
    (layout, global batch, time to train, cost on the same basis), with the estimate of each. Empty without
    ``from_estimate``, when that query is not a valid estimate, or when ``search`` is no longer its job."""
    text = params.get("from_estimate") if hasattr(params, "get") else None
    if not text or not response.plans:
        return {}
    form = parse_form(dict(parse_qsl(str(text), keep_blank_values=True)))
    if form.request is None or (search is not None and not same_job(form.request, search)):
        return {}
    from app.web import backend

    try:
        mine = backend.run_estimate(form.request, catalog)
    except EstimatorError:
        return {}
    winner = response.plans[0]
    req = form.request
    return {"versus": {
        "same": same_layout(req, winner.request),
        "estimate_words": layout_words(req), "plan_words": layout_words(winner.request),
        "estimate_url": f"/estimate?{request_to_query(req)}",
        "plan_url": f"/estimate?{request_to_query(winner.request)}",
        "estimate_ttt": mine.train.time_to_train_s if mine.train else None,
        "estimate_step": mine.time.step_time_s if mine.time else None,
        "estimate_fits": mine.memory.fits,
        "estimate_batch": global_batch(req),
        "plan_batch": winner.layout.global_batch_size,
        "plan_ttt": winner.time_to_train_s, "plan_step": winner.step_time_s,
        "estimate_cost": cost_to_train(catalog, mine), "plan_cost": winner.cost,
    }}

