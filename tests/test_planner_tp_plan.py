"""The planner and the exports follow ``parallelism.tp_plan``: a pinned plan is used for every searched layout
(so its memory is the plan's), shown in each plan's layout, and the exports say which launcher applies it."""

from __future__ import annotations

from typing import Any

from estimator import EstimateRequest, estimate
from estimator.planner.contract import PlanRequest, PlanResponse
from estimator.planner.plan import plan
from hardware_catalog import load_catalog

CATALOG = load_catalog()
BASE = {"model": "llama-3.1-8b", "training": {"method": "full", "train_tokens": 1e9},
        "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 1, "gpus_per_node": 4}, "top_k": 5}


def _plan(parallelism: dict[str, Any]) -> PlanResponse:
    return plan(PlanRequest.model_validate({**BASE, "parallelism": parallelism}), CATALOG)


def test_a_pinned_plan_is_searched_reported_and_exported() -> None:
    hf = _plan({"framework": "pytorch", "tp": 4, "tp_plan": "replicated-embeddings"})
    vocab = _plan({"framework": "pytorch", "tp": 4})
    assert hf.plans and vocab.plans
    for p in hf.plans:
        assert p.layout.tp_plan == "replicated-embeddings"
        assert any(n.startswith("TP plan replicated-embeddings") for n in p.exports.notes)
        req = EstimateRequest.model_validate({"model": BASE["model"], "training": {
            **BASE["training"], "micro_batch_size": p.layout.micro_batch_size,
            "gradient_accumulation_steps": p.layout.gradient_accumulation_steps,
            "activation_checkpointing": p.layout.activation_checkpointing},
            "parallelism": {"framework": "pytorch", "tp": 4, "sharding": p.layout.sharding, "offload": p.layout.offload,
                            "sequence_parallel": p.layout.sequence_parallel, "tp_plan": "replicated-embeddings"},
            "hardware": BASE["hardware"]})
        assert p.estimate.memory.peak_allocated_bytes == estimate(req).memory.peak_allocated_bytes
        assert not p.layout.sequence_parallel  # HF's plan has no sequence parallelism
    for p in vocab.plans:
        assert p.layout.tp_plan == "vocab-parallel"
        assert any(n.startswith("TP plan vocab-parallel") for n in p.exports.notes)
    def key(p: Any) -> tuple[object, ...]:
        return (p.layout.sharding, p.layout.offload, p.layout.activation_checkpointing, p.layout.micro_batch_size)

    vocab_by = {key(p): p for p in vocab.plans}
    hf_by = {key(p): p for p in hf.plans}
    both = set(vocab_by) & set(hf_by)
    if not both:  # compare on one layout directly: the same plan with the other TP plan
        p = hf.plans[0]
        twin = estimate(EstimateRequest.model_validate({
            "model": BASE["model"], "training": {**BASE["training"], "micro_batch_size": p.layout.micro_batch_size,
                                                 "activation_checkpointing": p.layout.activation_checkpointing},
            "parallelism": {"framework": "pytorch", "tp": 4, "sharding": p.layout.sharding,
                            "offload": p.layout.offload, "sequence_parallel": False},
            "hardware": BASE["hardware"]}))
        assert p.estimate.memory.peak_allocated_bytes > twin.memory.peak_allocated_bytes
    for k in both:
        assert hf_by[k].estimate.memory.peak_allocated_bytes > vocab_by[k].estimate.memory.peak_allocated_bytes


def test_without_tp_the_layout_names_no_plan() -> None:
    single = _plan({"framework": "pytorch", "tp": 1})
    assert single.plans and all(p.layout.tp_plan is None for p in single.plans)


def test_the_exports_name_the_lora_dropout_the_plan_was_sized_for() -> None:
    lora = plan(PlanRequest.model_validate({**BASE, "training": {"method": "lora", "lora_dropout": 0.05,
                                                                  "train_tokens": 1e9},
                                            "parallelism": {"framework": "pytorch"}}), CATALOG)
    peft_plans = [p for p in lora.plans if p.layout.framework != "megatron"]  # NeMo's PEFT has its own config
    assert peft_plans
    for p in peft_plans:
        assert any('LoraConfig(r=16, target_modules="all-linear", lora_dropout=0.05)' in n for n in p.exports.notes)
