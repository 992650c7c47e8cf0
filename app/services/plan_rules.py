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


class _Offset:
    """One progress callback across several searches: each reports on top of the ones before it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.done, self.screened, self.exact = inner, 0, 0, 0

    def __call__(self, done: int, total: int) -> None:
        if self.inner is not None:
            self.inner(self.done + done, self.done + total)

    def detail(self, screened: int, exact: int) -> None:
        if self.inner is not None and hasattr(self.inner, "detail"):
            self.inner.detail(self.screened + screened, self.exact + exact)

    def finished(self, response: PlanResponse) -> None:
        st = response.search
        self.done += st.space_size
        self.screened += st.layouts_screened
        self.exact += st.memory_checks + st.time_evaluations


_SUMMED = ("space_size", "structures", "structures_evaluated", "pruned_by_bound", "pruned_by_dominance",
           "memory_checks", "time_evaluations", "full_estimates", "layouts_screened", "screened_out", "elapsed_s")


def _front(plans: list[Plan]) -> list[Plan]:
    """The estimator's own rule (estimator.planner.plan.pareto_front) over the plans shown: those no other
    beats on both time and cost, fastest first."""
    def t(p: Plan) -> float:
        return p.time_to_train_s if p.time_to_train_s is not None else p.step_time_s

    def c(p: Plan) -> float:
        return p.cost.cost_usd if p.cost is not None and p.cost.cost_usd is not None else float("inf")

    if plans and all(c(p) == float("inf") for p in plans):
        return [min(plans, key=t)]
    front, best = [], float("inf")
    for p in sorted(plans, key=lambda p: (t(p), c(p))):
        if c(p) < best:
            front.append(p)
            best = c(p)
    return front


def _with_front(plans: list[Plan]) -> tuple[list[Plan], list[str]]:
    """The plans renumbered by rank, each flagged on the front or not, and the front's ids (fastest first)."""
    front = [p.id for p in _front([p for p in plans if p.pareto])]
    return [p.model_copy(update={"rank": i + 1, "pareto": p.id in front}) for i, p in enumerate(plans)], front


def _merge(responses: list[PlanResponse], top_k: int) -> PlanResponse:
    key = (lambda p: (p.cost.cost_usd if p.cost and p.cost.cost_usd is not None else float("inf"),
                      p.step_time_s)) if responses[0].objective == "cost" else (
        lambda p: (p.time_to_train_s if p.time_to_train_s is not None else p.step_time_s,
                   p.cost.cost_usd if p.cost and p.cost.cost_usd is not None else float("inf")))
    plans, front = _with_front(sorted((p for r in responses for p in r.plans), key=key)[:top_k])
    first = next((r for r in responses if plans and r.plans and r.plans[0].id == plans[0].id), responses[0])
    notes = list(dict.fromkeys(n for r in responses for n in r.notes))
    stats = {k: sum(getattr(r.search, k) for r in responses) for k in _SUMMED}
    search = first.search.model_copy(update={**stats, "candidates_per_s": stats["space_size"] / stats["elapsed_s"]
                                             if stats["elapsed_s"] else first.search.candidates_per_s})
    return first.model_copy(update={"plans": plans, "notes": notes, "search": search, "pareto_front": front})


def usable_plan(req: PlanRequest, catalog: Catalog, progress: Any = None) -> PlanResponse:
    """``plan(req)`` with only plans that can be run as shown (module docstring)."""
    pinned = req.parallelism is not None and "framework" in req.parallelism.model_fields_set
    top_k = req.top_k
    req = req.model_copy(update={"top_k": min(30, max(top_k, 3 * top_k))})  # room for what is left out
    if req.training.method in ("lora", "qlora") and not pinned:
        base = req.parallelism.model_dump(exclude_unset=True) if req.parallelism is not None else {}
        report = _Offset(progress)
        responses = []
        for fw in LORA_FRAMEWORKS:
            pinned_req = req.model_copy(update={"parallelism": Parallelism.model_validate({**base, "framework": fw})})
            responses.append(plan(pinned_req, catalog, report))
            report.finished(responses[-1])
        response = _merge(responses, req.top_k)
        response = response.model_copy(update={"notes": [*response.notes, "LoRA: PyTorch and DeepSpeed layouts "
                                                          "only (Megatron-LM itself has no LoRA)."]})
    else:
        response = plan(req, catalog, progress)
    problems = {p.id: plan_problem(p, catalog) for p in response.plans}
    kept, front = _with_front([p for p in response.plans if not problems[p.id]][:top_k])
    if not any(problems.values()):
        return response.model_copy(update={"plans": kept, "pareto_front": front})
    dropped = sorted({w for w in problems.values() if w})
    notes = [*response.notes, *(f"Left out: {w}." for w in dropped)]
    update: dict[str, Any] = {"plans": kept, "notes": notes, "pareto_front": front}
    if response.plans and problems[response.plans[0].id]:
        update["explanation"] = [f"The planner's first pick was left out ({problems[response.plans[0].id]}); "
                                 "the plans below are the rest of its ranking."]
    return response.model_copy(update=update)
