"""Issue 29, "What to build" 4: the planner takes the fine-tuning stacks' memory mechanisms (fused loss, Liger,
activation offloading) as an axis when the request allows it (``vary_mechanisms``), never proposes what the stack
refuses, and says on each plan what it changed, with the GiB saved and the step-time cost."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from estimator.estimate import estimate
from estimator.model.spec import shape_for
from estimator.planner.contract import PlanRequest, PlanResponse
from estimator.planner.mechanisms import variants
from estimator.planner.plan import plan
from estimator.planner.reverse import ReverseRequest
from estimator.request import EstimateRequest
from estimator.training.suggest import apply_changes
from hardware_catalog import load_catalog

CATALOG = load_catalog()
GIB = 2**30
# the case: Llama 3.1 8B LoRA at 16k tokens (full checkpointing) on one A100 40GB
LORA_16K_A100_40 = {"model": "llama-3.1-8b",
                    "training": {"method": "lora", "seq_len": 16384, "activation_checkpointing": "full"},
                    "hardware": {"gpu": "a100-sxm4-40gb", "num_nodes": 1, "gpus_per_node": 1},
                    "global_batch_size": 8}
# Phi-2 (microsoft/phi-2 config.json: model_type "phi", LayerNorm, a plain GELU MLP): nothing for Liger to patch
PHI_2 = {"name": "phi-2-like", "num_layers": 32, "hidden_size": 2560, "num_attention_heads": 32,
         "ffn_hidden_size": 10240, "vocab_size": 51200, "gated_mlp": False, "norm": "layernorm"}
ALL = ["loss_kernel", "fused_kernels", "activation_offloading"]


def _plan(payload: dict[str, Any]) -> PlanResponse:
    return plan(PlanRequest.model_validate(payload), CATALOG)


def _trained(req: Any) -> tuple[str, str, str]:
    t = req.training
    return t.loss_kernel, t.fused_kernels, t.activation_offloading


def _mechanisms(p: Any) -> tuple[str, str, str]:
    return _trained(p.request)


def test_off_no_single_gpu_plan_on_the_fused_loss_fits() -> None:
    """Axis off: nothing fits one A100 40GB (the materialised fp32 logits). Loss kernel allowed: plans on that GPU,
    each with the fused loss, said in mechanism_changes, its estimate fitting."""
    off = _plan(LORA_16K_A100_40)
    assert off.plans == []
    on = _plan({**LORA_16K_A100_40, "vary_mechanisms": ["loss_kernel"]})
    assert on.plans
    for p in on.plans:
        assert p.layout.world_size == 1 and p.estimate.memory.fits
        assert p.mechanism_changes is not None
        assert p.mechanism_changes.changes == {"training.loss_kernel": "fused"}
        assert p.request.training.loss_kernel == "fused" and p.id.endswith("|loss_kernel=fused")
        assert "fused loss" in str(p.mechanism_changes.summary)
        # the launch exports say what to turn on in the training script
        assert any("loss_kernel fused" in str(n) for n in p.exports.notes)
    assert any("variants of the request" in str(n) for n in on.notes)
    assert any(str(e).startswith("It changes the request's fine-tuning stack: A fused loss") for e in on.explanation)


def test_saved_gib_and_time_cost_are_the_estimates_difference_on_the_plans_layout() -> None:
    """saved_bytes and step_time_delta_s: the request's mechanisms against the plan's, on the plan's layout, by the
    full estimate (the same measure as the estimate's ways out)."""
    best = _plan({**LORA_16K_A100_40, "vary_mechanisms": ["loss_kernel"]}).plans[0]
    m = best.mechanism_changes
    assert m is not None and m.saved_bytes is not None and m.step_time_delta_s is not None
    mine = estimate(apply_changes(best.request, {"training.loss_kernel": "materialized"}), CATALOG)
    assert not mine.memory.fits  # the same layout with the materialised loss does not fit: why it is proposed
    assert m.saved_bytes == mine.memory.peak_allocated_bytes - best.estimate.memory.peak_allocated_bytes
    assert m.saved_bytes > 10 * GIB  # the fp32 logits of 2 x 16k tokens x 128k vocabulary and their gradient
    assert mine.time is not None and best.estimate.time is not None
    assert m.step_time_delta_s == pytest.approx(best.estimate.time.step_time_s - mine.time.step_time_s, abs=1e-9)
    assert f"{m.saved_bytes / GIB:.1f} GiB less per GPU" in str(m.summary)


def test_default_off_is_the_plain_search() -> None:
    """No vary_mechanisms (or an empty list): the same plans, ids and times as before the axis, none changed."""
    plain = _plan(LORA_16K_A100_40 | {"hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1}})
    empty = _plan(LORA_16K_A100_40 | {"hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1}, "vary_mechanisms": []})
    assert plain.plans
    assert [(p.id, p.step_time_s) for p in plain.plans] == [(p.id, p.step_time_s) for p in empty.plans]
    assert all(p.mechanism_changes is None for p in plain.plans)
    assert plain.search.space_size == empty.search.space_size


def test_a_family_liger_does_not_patch_is_never_given_liger() -> None:
    """Phi-2 (LayerNorm, no gated MLP): with every mechanism allowed, no plan has Liger, and the notes say why; a
    Llama, which Liger patches, gets the Liger variants."""
    body = {"model": PHI_2, "training": {"method": "full", "seq_len": 4096},
            "hardware": {"gpu": "a100-sxm4-40gb", "num_nodes": 1, "gpus_per_node": 1}, "global_batch_size": 8,
            "vary_mechanisms": ALL}
    r = _plan(body)
    assert r.plans
    assert all(p.request.training.fused_kernels == "none" for p in r.plans)
    assert any("fused_kernels: not varied" in str(n) for n in r.notes)
    phi_req = PlanRequest.model_validate(body)
    phi = variants(phi_req, shape_for(phi_req.model).dims)[0]
    llama = variants(PlanRequest.model_validate({**LORA_16K_A100_40, "vary_mechanisms": ALL}),
                     shape_for("llama-3.1-8b").dims)[0]
    assert [_trained(v) for v in phi] == [("materialized", "none", "none"), ("fused", "none", "none"),
                                             ("fused", "none", "all")]
    assert [_trained(v) for v in llama] == [("materialized", "none", "none"), ("fused", "liger", "none"),
                                               ("fused", "liger", "all")]


def test_each_plan_has_the_fewest_changes_that_fit_its_layout() -> None:
    """The planner searches the request with every no-cost mechanism (fused loss and Liger) and gives each layout
    the fewest changes it needs: for every changed plan, the planner pinned to the same layout with any one change
    undone finds nothing as fast (it does not fit there, or is slower)."""
    r = _plan({**LORA_16K_A100_40, "vary_mechanisms": ALL})
    # Liger's kernels make the step faster (fewer memory passes, measured 15-20 % on the H100: test_stacks_time.py),
    # so no plan drops them: the fewest changes at no more step time keep them beside the fused loss
    assert r.plans and all(p.mechanism_changes and p.mechanism_changes.changes.get("training.fused_kernels") == "liger"
                           for p in r.plans)
    own = {"loss_kernel": "materialized", "fused_kernels": "none", "activation_offloading": "none"}
    for p in r.plans:
        assert p.mechanism_changes is not None  # nothing fits one A100 40GB without a change
        lay = p.layout
        kept = {k.removeprefix("training."): v for k, v in p.mechanism_changes.changes.items()}
        for undone in kept:
            training = {**LORA_16K_A100_40["training"], **kept, undone: own[undone],
                        "micro_batch_size": lay.micro_batch_size,
                        "gradient_accumulation_steps": lay.gradient_accumulation_steps,
                        "activation_checkpointing": lay.activation_checkpointing}
            parallelism = {"framework": lay.framework, "sharding": lay.sharding, "offload": lay.offload, "tp": lay.tp,
                           "pp": lay.pp, "cp": lay.cp}
            try:
                pinned = _plan({**LORA_16K_A100_40, "training": training, "parallelism": parallelism})
            except ValidationError:
                continue  # the stack refuses the smaller set (none here: the request is transformers)
            assert all(q.step_time_s > p.step_time_s for q in pinned.plans), (p.id, undone)


def test_variants_and_the_request_pins_unchanged() -> None:
    req = PlanRequest.model_validate({**LORA_16K_A100_40, "vary_mechanisms": ALL})
    found, notes = variants(req, shape_for("llama-3.1-8b").dims)
    assert found[0] is req and notes == []
    for v in found:  # the planner's pins (micro-batch, accumulation, checkpointing) are the request's
        assert v.training.model_fields_set - {"loss_kernel", "fused_kernels", "activation_offloading"} == \
            req.training.model_fields_set


def test_trl_liger_only_with_its_fused_loss() -> None:
    """TRL: chunked_nll "is not compatible with use_liger_kernel": Liger alone is refused (said in the notes), Liger
    with the fused loss is searched; no plan pairs Liger with the chunked loss."""
    body = {**LORA_16K_A100_40, "training": {**LORA_16K_A100_40["training"], "stack": "trl"},
            "vary_mechanisms": ["fused_kernels", "loss_kernel"]}
    req = PlanRequest.model_validate(body)
    found, notes = variants(req, shape_for("llama-3.1-8b").dims)
    assert [(v.training.loss_kernel, v.training.fused_kernels) for v in found] == [
        ("chunked", "none"), ("fused", "liger")]
    assert any("Not tried, the stack refuses them" in str(n) for n in notes)
    r = plan(req, CATALOG)
    assert all(_mechanisms(p)[:2] != ("chunked", "liger") for p in r.plans)


def test_megatron_is_never_given_liger_or_offloading() -> None:
    """Liger patches Hugging Face classes and the modelled offloading is the Hugging Face stacks': on Megatron-LM
    layouts the stack refuses them (estimator.rules.stacks.request_refusal), so no plan has them there."""
    r = _plan({"model": "llama-3.1-8b", "training": {"method": "full", "seq_len": 8192},
               "parallelism": {"framework": "megatron"},
               "constraints": {"gpus": ["a100-sxm4-40gb"], "max_nodes": 1}, "global_batch_size": 32,
               "vary_mechanisms": ALL})
    assert r.plans
    assert all(p.layout.framework == "megatron" for p in r.plans)
    assert all(_mechanisms(p)[1:] == ("none", "none") for p in r.plans)
    for p in r.plans:  # Megatron's fused cross-entropy is what loss_kernel "fused" sizes: the launch turns it on
        assert p.exports.megatron_args is not None
        fused = p.request.training.loss_kernel == "fused"
        assert ("--cross-entropy-loss-fusion" in p.exports.megatron_args) == fused


def test_offloading_is_named_checkpoints_under_full_checkpointing() -> None:
    """The axis offloads every saved tensor ("all"); on a fully checkpointed layout that is the checkpointed inputs,
    named as the ways out name it ("checkpoints"), which the estimate accepts."""
    r = _plan({**LORA_16K_A100_40, "vary_mechanisms": ["activation_offloading", "loss_kernel"]})
    offloaded = [p for p in r.plans if p.request.training.activation_offloading != "none"]
    assert offloaded
    for p in offloaded:
        expected = "checkpoints" if p.layout.activation_checkpointing == "full" else "all"
        assert p.request.training.activation_offloading == expected
        assert p.mechanism_changes is not None
        assert p.mechanism_changes.changes["training.activation_offloading"] == expected
        assert p.estimate.host.ram_breakdown_bytes.get("offloaded_activations", 0) > 0
    ids = [p.id for p in r.plans]
    assert len(ids) == len(set(ids))


def test_unknown_mechanism_and_reverse_questions_are_refused() -> None:
    with pytest.raises(ValidationError) as bad:
        PlanRequest.model_validate({**LORA_16K_A100_40, "vary_mechanisms": ["muon"]})
    assert bad.value.errors()[0]["loc"][0] == "vary_mechanisms"
    with pytest.raises(ValidationError) as reverse:
        ReverseRequest.model_validate({**LORA_16K_A100_40, "question": "fewest-gpus",
                                       "vary_mechanisms": ["loss_kernel"]})
    assert reverse.value.errors()[0]["loc"][0] == "vary_mechanisms"


def test_the_variants_are_charged_to_the_work_budget_naming_the_field() -> None:
    from estimator.planner import budget

    body = {"model": "llama-3.1-8b", "training": {"method": "lora"},
            "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 2}, "global_batch_size": 64}
    plain = _plan(body)
    with budget.work_budget(max_layouts=plain.search.space_size * 2, seconds=None):
        _plan(body)  # the plain search fits the budget
    with budget.work_budget(max_layouts=plain.search.space_size * 2, seconds=None), \
            pytest.raises(budget.WorkBudgetError) as exc:
        _plan({**body, "vary_mechanisms": ALL})
    assert exc.value.field == "vary_mechanisms"


def test_the_plan_request_reestimates_to_the_plan() -> None:
    """A plan's request (POST it to /estimates) carries the mechanisms the plan was sized with."""
    p = _plan({**LORA_16K_A100_40, "vary_mechanisms": ["loss_kernel"]}).plans[0]
    again = estimate(EstimateRequest.model_validate(p.request.model_dump(mode="json")), CATALOG)
    assert again.memory.peak_allocated_bytes == p.estimate.memory.peak_allocated_bytes and again.memory.fits


def test_the_optimizer_axis_proposes_8bit_adamw_where_adamw_does_not_fit() -> None:
    """Llama 3.2 3B full fine-tune on one A100 40GB, no CPU offload: AdamW's fp32 states do not fit; with the
    optimizer allowed, 8-bit AdamW (bitsandbytes) does, and the plan says so with the GiB saved (the states' 8 of
    their 10 bytes per parameter less, measured by the estimate) and the step-time cost. A request that names
    another optimizer is not varied, and the notes say so."""
    body = {"model": "llama-3.2-3b", "training": {"method": "full", "seq_len": 2048},
            "parallelism": {"offload": "none"},
            "hardware": {"gpu": "a100-sxm4-40gb", "num_nodes": 1, "gpus_per_node": 1}, "global_batch_size": 8}
    assert _plan(body).plans == []
    r = _plan({**body, "vary_mechanisms": ["optimizer"]})
    assert r.plans
    for p in r.plans:
        assert p.estimate.memory.fits and p.request.training.optimizer == "adamw-8bit"
        m = p.mechanism_changes
        assert m is not None and m.changes == {"training.optimizer": "adamw-8bit"}
        assert m.saved_bytes is not None and m.saved_bytes > 0 and "8-bit AdamW" in str(m.summary)
        mine = estimate(apply_changes(p.request, {"training.optimizer": "adamw"}), CATALOG)
        assert m.saved_bytes == mine.memory.peak_allocated_bytes - p.estimate.memory.peak_allocated_bytes
        assert any("AdamW8bit" in str(n) for n in p.exports.notes)
    # Megatron-LM's optimizers (adam, sgd) have no bitsandbytes 8-bit AdamW: never proposed on its layouts (an 8B
    # full fine-tune on A100 40GB nodes, where 8-bit states would otherwise let Megatron layouts fit more GPUs)
    megatron = _plan({"model": "llama-3.1-8b", "training": {"method": "full", "seq_len": 2048},
                      "parallelism": {"framework": "megatron"},
                      "constraints": {"gpus": ["a100-sxm4-40gb"], "max_nodes": 1}, "global_batch_size": 16,
                      "vary_mechanisms": ["optimizer"]})
    assert megatron.plans and all(p.request.training.optimizer == "adamw" for p in megatron.plans)
    lion = _plan({**body, "training": {**body["training"], "optimizer": "lion"}, "vary_mechanisms": ["optimizer"]})
    assert all(p.request.training.optimizer == "lion" for p in lion.plans)
    assert any("optimizer: not varied" in str(n) for n in lion.notes)
