"""What the app asks the planner, and which of its plans it may show (issue 28): a plan the user cannot run is never
ranked on a page.

- LoRA / QLoRA with Megatron-LM: Megatron-LM itself has no LoRA (its PEFT lives in Megatron-Bridge / NeMo, which
  the exported configs do not target). A LoRA search that does not pin a framework is asked twice, PyTorch and
  DeepSpeed pinned (``parallelism.framework``, the planner's own pin), and the two answers merged by the objective;
  the explanation is that of the search whose plan won.
- A rented cloud offer rents whole instances (``gpus_per_instance``, e.g. AWS p5.48xlarge = 8 GPUs): a plan on part
  of one (1, 2 or 4 GPUs of an 8-GPU instance) is left out, with a note saying so.

The estimator's planner is unchanged (benchmarks/guard.py); this is the app's reading of its answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from estimator.planner.plan import Plan, PlanRequest, PlanResponse, plan
from estimator.request import Parallelism

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["LORA_FRAMEWORKS", "plan_problem", "usable_plan"]

#: the frameworks whose exported configs run LoRA (PEFT on PyTorch FSDP / DeepSpeed)
LORA_FRAMEWORKS = ("pytorch", "deepspeed")


def _offer(catalog: Catalog, label: str | None) -> Any:
    if not label:
        return None
    for offer in getattr(catalog, "cloud_offers", []):
        if label.startswith(f"{offer.provider} {offer.instance}"):
            return offer
    return None


def plan_problem(p: Plan, catalog: Catalog) -> str | None:
    """Why this plan cannot be run as shown, or ``None``."""
    if p.request.training.method in ("lora", "qlora") and p.request.parallelism.framework == "megatron":
        return "Megatron-LM itself has no LoRA"
    cost = p.cost
    if cost is not None and cost.basis == "rent":
        offer = _offer(catalog, cost.label)
        whole = int(getattr(offer, "gpus_per_instance", 0) or 0)
        if whole > 1 and p.layout.gpus_per_node % whole != 0:
            return f"{offer.provider} {offer.instance} is rented whole ({whole} GPUs), not {p.layout.gpus_per_node}"
    return None


def _merge(responses: list[PlanResponse], top_k: int) -> PlanResponse:
    key = (lambda p: (p.cost.cost_usd if p.cost and p.cost.cost_usd is not None else float("inf"),
                      p.step_time_s)) if responses[0].objective == "cost" else (
        lambda p: (p.time_to_train_s if p.time_to_train_s is not None else p.step_time_s,
                   p.cost.cost_usd if p.cost and p.cost.cost_usd is not None else float("inf")))
    plans = sorted((p for r in responses for p in r.plans), key=key)[:top_k]
    first = next((r for r in responses if plans and r.plans and r.plans[0].id == plans[0].id), responses[0])
    notes = list(dict.fromkeys(n for r in responses for n in r.notes))
    return first.model_copy(update={"plans": plans, "notes": notes,
                                    "pareto_front": [i for i in first.pareto_front if i in {p.id for p in plans}]})


def usable_plan(req: PlanRequest, catalog: Catalog, progress: Any = None) -> PlanResponse:
    """``plan(req)`` with only plans that can be run as shown (module docstring)."""
    pinned = req.parallelism is not None and "framework" in req.parallelism.model_fields_set
    top_k = req.top_k
    req = req.model_copy(update={"top_k": min(30, max(top_k, 3 * top_k))})  # room for what is left out
    if req.training.method in ("lora", "qlora") and not pinned:
        base = req.parallelism.model_dump(exclude_unset=True) if req.parallelism is not None else {}
        responses = [plan(req.model_copy(update={"parallelism": Parallelism.model_validate({**base,
                                                                                           "framework": fw})}),
                          catalog, progress) for fw in LORA_FRAMEWORKS]
        response = _merge(responses, req.top_k)
        response = response.model_copy(update={"notes": [*response.notes, "LoRA: PyTorch and DeepSpeed layouts "
                                                          "only (Megatron-LM itself has no LoRA)."]})
    else:
        response = plan(req, catalog, progress)
    problems = {p.id: plan_problem(p, catalog) for p in response.plans}
    kept = [p for p in response.plans if not problems[p.id]][:top_k]
    if not any(problems.values()):
        return response.model_copy(update={"plans": kept, "pareto_front": [
            i for i in response.pareto_front if i in {p.id for p in kept}]})
    dropped = sorted({w for w in problems.values() if w})
    notes = [*response.notes, *(f"Left out: {w}." for w in dropped)]
    update: dict[str, Any] = {"plans": kept, "notes": notes,
                              "pareto_front": [i for i in response.pareto_front if i in {p.id for p in kept}]}
    if response.plans and problems[response.plans[0].id]:
        update["explanation"] = [f"The planner's first pick was left out ({problems[response.plans[0].id]}); "
                                 "the plans below are the rest of its ranking."]
    return response.model_copy(update=update)
