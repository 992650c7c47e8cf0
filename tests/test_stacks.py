"""Issue 29: the fine-tuning stacks' request fields, their defaults and refusals (estimator.rules.stacks), the new
optimizer rows (estimator.training.optimizers) and the mechanisms' formulas (estimator.training.mechanisms)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from estimator import estimate
from estimator.errors import UnsupportedCombinationError
from estimator.request import EstimateRequest, Training
from estimator.rules.stacks import MODELLED, STACK_DEFAULTS, stack_assumptions
from estimator.training.mechanisms import (
    liger_norm_bytes,
    liger_swiglu_saving,
    loss_bytes,
    muon_gather_bytes,
    muon_newton_schulz_flops,
    offload_split,
    offload_transfer_seconds,
)
from estimator.training.optimizers import OPTIMIZERS, optimizer_spec

GiB = 1024**3


def test_the_default_stack_is_todays_behaviour() -> None:
    t = Training()
    assert (t.stack, t.loss_kernel, t.fused_kernels, t.activation_offloading) == (
        "transformers", "materialized", "none", "none")
    assert t.activation_checkpointing == "none" and t.method == "full"
    assert stack_assumptions(t) == []


@pytest.mark.parametrize("stack", sorted(STACK_DEFAULTS))
def test_each_stack_fills_what_the_request_leaves_out(stack: str) -> None:
    t = Training(stack=stack)  # type: ignore[arg-type]
    for d in STACK_DEFAULTS[stack]:
        assert getattr(t, d.field) == d.value, d.field
        assert "@" in d.source or ".py" in d.source or ".yaml" in d.source, d.source  # a file (and commit) named
    if stack != "transformers":
        lines = stack_assumptions(t)
        assert len(lines) == len(STACK_DEFAULTS[stack]) and all(line.startswith(f"Stack {stack}:") for line in lines)


def test_explicit_fields_override_the_stack() -> None:
    trl = Training(stack="trl", loss_kernel="materialized", activation_checkpointing="none")
    assert trl.loss_kernel == "materialized" and trl.activation_checkpointing == "none"
    assert not any("loss_kernel" in line for line in stack_assumptions(trl))
    unsloth = Training(stack="unsloth", method="lora")
    assert unsloth.method == "lora" and unsloth.loss_kernel == "fused"
    assert unsloth.activation_offloading == "checkpoints"
    # null is "the stack's default", as a field left out
    assert Training(stack="trl", loss_kernel=None).loss_kernel == "chunked"


def test_liger_turns_the_loss_fused_unless_the_request_names_one() -> None:
    assert Training(stack="trl", fused_kernels="liger").loss_kernel == "fused"
    assert Training(fused_kernels="liger").loss_kernel == "fused"
    assert Training(fused_kernels="liger", loss_kernel="materialized").loss_kernel == "materialized"


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"loss_kernel": "logits"}, "loss_kernel", "materialized"),
    ({"fused_kernels": "unsloth"}, "fused_kernels", "liger"),
    ({"activation_offloading": "disk"}, "activation_offloading", "checkpoints"),
    ({"stack": "nemo"}, "stack", "torchtune"),
    ({"optimizer": "adamw-2bit"}, "optimizer", "muon"),
    ({"stack": "trl", "fused_kernels": "liger", "loss_kernel": "chunked"}, "loss_kernel", "use_liger_kernel"),
])
def test_unknown_values_and_refused_combinations_name_the_field(fields: dict, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        Training(**fields)
    first = err.value.errors()[0]
    assert first["loc"] == (field,) and words in first["msg"]


@pytest.mark.parametrize(("body", "loc", "words"), [
    ({"training": {"stack": "unsloth"}, "parallelism": {"sharding": "fsdp"}}, ("training", "stack"), "FSDP"),
    ({"training": {"stack": "unsloth"}, "parallelism": {"tp": 2}}, ("training", "stack"), "tensor"),
    ({"training": {"loss_kernel": "chunked"}, "parallelism": {"framework": "megatron"}}, ("training", "loss_kernel"),
     "vocab-parallel cross-entropy"),
    ({"training": {"activation_offloading": "all"}, "parallelism": {"sharding": "fsdp", "offload":
      "optimizer+params"}}, ("training", "activation_offloading"), "PCIe"),
    ({"training": {"activation_offloading": "checkpoints"}}, ("training", "activation_offloading"),
     "activation_checkpointing \"full\""),
    ({"training": {"optimizer": "muon", "optimizer_impl": "foreach"}}, ("training", "optimizer_impl"),
     "Foreach is not supported for Muon"),
])
def test_stack_and_parallelism_refusals(body: dict, loc: tuple[str, str], words: str) -> None:
    """Checked with the layout (the planner never proposes them): an unsupported combination naming the field."""
    req = EstimateRequest.model_validate({"model": "llama-3.2-1b", **body})
    with pytest.raises(UnsupportedCombinationError) as err:
        estimate(req)
    assert err.value.field == ".".join(loc) and words in err.value.message


def test_unmodelled_mechanisms_are_warned_not_hidden() -> None:
    base = {"model": "llama-3.1-8b", "training": {"method": "lora", "seq_len": 2048},
            "hardware": {"gpu": "h100-sxm5-80gb", "gpus_per_node": 1}}
    plain = estimate(EstimateRequest.model_validate(base))
    trl = estimate(EstimateRequest.model_validate({**base, "training": {**base["training"], "stack": "trl"}}))
    assert not any("training.loss_kernel" in w for w in plain.warnings)
    if not MODELLED[("loss_kernel", "chunked")]:
        assert any("training.loss_kernel chunked" in w for w in trl.warnings)
    assert any("Stack trl: loss_kernel chunked (trl/trainer/sft_config.py @016013e8" in a for a in trl.assumptions)


# ------------------------------------------------------------------------------------------ optimizer rows


def test_new_optimizer_rows_state_bytes() -> None:
    """bytes per trainable parameter, states in fp32 under mixed precision (dtype 4) and bf16 (dtype 2)."""
    assert optimizer_spec("paged-adamw-8bit").state_bytes(4) == optimizer_spec("adamw-8bit").state_bytes(4)
    assert optimizer_spec("paged-adamw").state_bytes(2) == 8  # bitsandbytes 32-bit states whatever the params
    assert optimizer_spec("adamw-4bit").state_bytes(4) == pytest.approx(2 * (0.5 + 4 / 128))  # 1.0625
    assert optimizer_spec("muon").state_bytes(4) == 4  # one momentum buffer per matrix
    assert optimizer_spec("muon").implementation("fused") == "for-loop"
    assert optimizer_spec("adamw").implementation("foreach") == "foreach"
    for name in ("paged-adamw-8bit", "paged-adamw", "adamw-4bit", "muon"):
        spec = OPTIMIZERS[name]
        assert not spec.memory_measured and spec.cpu_offload_refusal


def test_a_new_optimizer_is_estimated_with_its_measured_bar() -> None:
    """torchao's AdamW4bit: 1.0625 bytes a state element instead of 4, and since its H100 measurements (issue 29)
    the memory bar of its mechanism (estimator/data/accuracy.json), at least the plain class's."""
    import json
    from pathlib import Path

    bars = json.loads((Path(__file__).resolve().parents[1] / "estimator" / "data" / "accuracy.json").read_text())
    body = {"model": "llama-3.1-8b", "training": {"optimizer": "adamw-4bit", "seq_len": 1024},
            "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": 1}}
    four = estimate(EstimateRequest.model_validate(body))
    adamw = estimate(EstimateRequest.model_validate({**body, "training": {"seq_len": 1024}}))
    saved = adamw.memory.breakdown_bytes.optimizer_states - four.memory.breakdown_bytes.optimizer_states
    params = four.model.trainable_params
    assert saved == pytest.approx(params * (8 - 1.0625), rel=0.01)
    assert any("adamw-4bit" in a for a in four.assumptions)
    assert four.memory.error_bar_pct == max(adamw.memory.error_bar_pct,
                                            bars["mechanism_memory_error_bar_pct"]["optimizer:adamw-4bit"])


# ------------------------------------------------------------------------------------------ mechanisms


def test_loss_kernels_keep_less_than_the_materialised_loss() -> None:
    """Llama 3.1 8B (hidden 4096, vocabulary 128,256) at 16k tokens: the materialised loss keeps 12 bytes per
    logit at backward (23.5 GiB), torchtune's chunked loss 6 + one fp32 chunk, TRL's tiles and Liger's fused loss
    no logits at all."""
    tokens, vocab, hidden = 16384, 128256, 4096
    mat = loss_bytes("materialized", tokens, vocab, hidden, False)
    chunked = loss_bytes("chunked", tokens, vocab, hidden, False)
    trl_lora = loss_bytes("chunked", tokens, vocab, hidden, False, impl="trl")
    trl_full = loss_bytes("chunked", tokens, vocab, hidden, False, impl="trl", head_trainable=True,
                          head_grad_bytes=2 * vocab * hidden)
    fused = loss_bytes("fused", tokens, vocab, hidden, False)
    assert mat[1] / GiB == pytest.approx(12 * tokens * vocab / GiB)
    assert chunked[1] == int(6 * tokens * vocab + tokens * vocab)
    assert fused == (4 * tokens * hidden + 4 * tokens, 2 * tokens * hidden + 4 * tokens)
    tile = 2 * 4096 * 32768  # one [4096, 32768] bf16 tile
    assert trl_lora[0] == 8 * tokens + 2 * tokens * hidden + 20 * tokens + tile + 4 * 4096 * hidden
    assert trl_full[1] == 8 * tokens + tile + 4 * tokens * hidden + 4 * vocab * hidden  # fp32 grad_weight
    assert mat[1] > chunked[1] > max(trl_lora) and mat[1] > max(fused)
    assert loss_bytes("materialized", tokens, vocab, hidden, True)[0] == mat[0] + 2 * tokens * vocab
    # a soft-cap inside a chunked loss acts on the fp32 chunk: tanh keeps 4 bytes per logit
    assert loss_bytes("chunked", tokens, vocab, hidden, True)[0] == chunked[0] + 4 * tokens * vocab
    assert loss_bytes("fused", tokens, vocab, hidden, False, head_trainable=True, head_grad_bytes=10) == \
        (fused[0] + 10, fused[1])


def test_liger_kernels_and_offloading() -> None:
    assert liger_swiglu_saving(14336) == 2 * 14336
    assert liger_norm_bytes(4096, 2) == 2 * 4096 + 4
    assert offload_split("none", 1000, 10, 100) == (1000, 0)
    assert offload_split("all", 1000, 10, 100) == (200, 800)
    assert offload_split("checkpoints", 1000, 10, 100) == (920, 80)
    assert offload_transfer_seconds(0, 25e9, 1.0) == 0.0
    # the layers' 0.8 s of PCIe (both ways) hide behind 1 s of compute; 2 s shows its 1 s excess
    assert offload_transfer_seconds(10 * 10**9, 25e9, 1.0) == 0.0
    assert offload_transfer_seconds(25 * 10**9, 25e9, 1.0) == pytest.approx(1.0)
    # the loss's bytes at the forward/backward boundary have no compute beside them: serial both ways
    assert offload_transfer_seconds(10 * 10**9, 25e9, 1.0, boundary_bytes=5 * 10**9) == pytest.approx(0.4)
    assert offload_transfer_seconds(10 * 10**9, 25e9, 1.0, boundary_bytes=10 * 10**9) == pytest.approx(0.8)


def test_muon_newton_schulz_and_gather() -> None:
    # a 4096 x 14336 matrix: m = 4096, n = 14336, five steps of 4 m^2 n + 2 m^3
    assert muon_newton_schulz_flops(14336, 4096) == pytest.approx(5 * (4 * 4096**2 * 14336 + 2 * 4096**3))
    assert muon_newton_schulz_flops(4096, 14336) == muon_newton_schulz_flops(14336, 4096)
    assert muon_gather_bytes(4096, 4096, 1) == 0
    assert muon_gather_bytes(4096, 4096, 8) == int(2 * 4096 * 4096 * 4 * 7 / 8)


# ------------------------------------------------------------------------------------------ wired into the estimate


def _run(gpu: str = "a100-sxm4-40gb", **training: object):  # type: ignore[no-untyped-def]
    body = {"model": "llama-3.1-8b", "training": {"method": "lora", "seq_len": 16384,
                                                  "activation_checkpointing": "full", **training},
            "hardware": {"gpu": gpu, "gpus_per_node": 1}}
    return estimate(EstimateRequest.model_validate(body))


def test_the_loss_kernel_changes_the_peak_at_its_mechanism() -> None:
    """Llama 3.1 8B LoRA, 16k tokens, full checkpointing, one A100 40GB: the materialised loss's 12 bytes per
    logit (23.5 GiB) do not fit; torchtune's chunked loss and the fused loss do."""
    mat, chunked, fused = _run(), _run(loss_kernel="chunked"), _run(loss_kernel="fused")
    assert not mat.memory.fits and chunked.memory.fits and fused.memory.fits
    logits = 16384 * 128256
    assert mat.memory.breakdown_bytes.logits == 12 * logits
    saved = mat.memory.peak_allocated_bytes - fused.memory.peak_allocated_bytes
    assert saved / GiB > 12  # the logits gone, less whatever else sets the new peak
    # without Liger's kernels the fused loss is Cut Cross-Entropy: 30 bytes per logit fewer, one more head GEMM (the
    # logits recomputed in backward); measured within 3 % of the materialised loss on the H100 (test_stacks_time.py)
    assert fused.time.step_time_s != mat.time.step_time_s
    assert fused.time.step_time_s == pytest.approx(mat.time.step_time_s, rel=0.02)


def test_liger_kernels_save_the_swiglu_activation() -> None:
    """Without checkpointing every layer keeps its MLP tensors: Liger's SwiGLU drops silu(gate), 2 x 14,336 bytes
    per token and layer (Llama 3.1 8B: 32 layers), 28 GiB at 16k tokens."""
    plain = _run("h200-sxm-141gb", activation_checkpointing="none", loss_kernel="fused")
    liger = _run("h200-sxm-141gb", activation_checkpointing="none", fused_kernels="liger")
    saved = plain.memory.breakdown_bytes.activations - liger.memory.breakdown_bytes.activations
    assert saved >= 2 * 14336 * 16384 * 32


def test_offloading_moves_activations_to_host_ram_and_pcie_time_into_the_step() -> None:
    kept = _run("h200-sxm-141gb", activation_checkpointing="none")
    off = _run("h200-sxm-141gb", activation_checkpointing="none", activation_offloading="all")
    assert off.memory.breakdown_bytes.activations < kept.memory.breakdown_bytes.activations / 10
    host = off.host.ram_breakdown_bytes["offloaded_activations"]
    # every layer's copy lives on the host until backward reads it (the 2 layers in flight too), with autocast's
    # bf16 weight copies and what is saved outside the layers (tests/test_offload_host.py: measured on an H100)
    assert host > kept.memory.breakdown_bytes.activations * 30 / 32
    assert host == off.host.pinned_offload_bytes
    assert "offloaded_activations" not in kept.host.ram_breakdown_bytes
    assert off.time.step_time_s > kept.time.step_time_s  # ~100 GB each way does not hide behind the compute


def test_muon_keeps_one_state_per_matrix_and_adamw_for_the_rest() -> None:
    """Llama 3.2 1B full fine-tune: Muon's momentum (4 bytes per parameter) plus AdamW's second state for the
    tied embedding (128,256 x 2,048) and the norms; its Newton-Schulz makes the step longer than SGD's (one state
    too)."""
    def run(opt: str):  # type: ignore[no-untyped-def]
        return estimate(EstimateRequest.model_validate({
            "model": "llama-3.2-1b", "training": {"optimizer": opt, "optimizer_impl": "for-loop", "seq_len": 2048,
                                                  "activation_checkpointing": "full"},
            "hardware": {"gpu": "h100-sxm5-80gb", "gpus_per_node": 1}}))
    adamw, muon, sgd = run("adamw"), run("muon"), run("sgd")
    states = {k: r.memory.breakdown_bytes.optimizer_states for k, r in (("a", adamw), ("m", muon), ("s", sgd))}
    embedding = 128256 * 2048
    assert states["m"] - states["s"] == pytest.approx(4 * embedding, rel=0.01)  # + the norms' few thousand
    assert states["s"] < states["m"] < states["a"]
    assert muon.time.step_time_s > sgd.time.step_time_s


def test_a_fused_loss_is_suggested_with_what_it_saves_and_costs() -> None:
    """The issue's case (Llama 3.1 8B LoRA, 16k tokens, full checkpointing, one A100 40GB): the first way out is
    the fused loss alone, it fits, and its summary gives the allocated GiB it saves (the 12-byte logits less the
    fused kernel's own) and its step-time cost (the estimate's step time with it, less without)."""
    r = _run()
    first = r.suggestions[0]
    assert first.changes == {"training.loss_kernel": "fused"} and first.fits
    words = str(first.summary)
    fused = _run(loss_kernel="fused")
    cost = fused.time.step_time_s - r.time.step_time_s  # Cut Cross-Entropy's recomputed head GEMM, a few 0.01 s
    assert f"GiB less per GPU, step time {cost:+.2f} s" in words and abs(cost) < 0.02 * r.time.step_time_s
    saved = float(words.split(": ")[-1].split(" GiB")[0])
    assert saved == pytest.approx((r.memory.peak_allocated_bytes - fused.memory.peak_allocated_bytes) / GiB, abs=0.05)
    assert "fused loss" in r.warnings[0]  # the verdict names the way out


def test_liger_on_a_family_it_does_not_patch_is_said() -> None:
    """GPT-2-style blocks (LayerNorm, a plain GELU MLP): Liger has nothing to patch there; the estimate warns and
    sizes the activations as without it."""
    body = {"model": {"name": "gpt2-like", "num_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
                      "ffn_hidden_size": 3072, "vocab_size": 50257, "gated_mlp": False, "norm": "layernorm"},
            "training": {"seq_len": 1024, "fused_kernels": "liger", "loss_kernel": "materialized"},
            "hardware": {"gpus_per_node": 1}}
    liger = estimate(EstimateRequest.model_validate(body))
    plain = estimate(EstimateRequest.model_validate({**body, "training": {"seq_len": 1024}}))
    assert sum("fused_kernels liger" in w for w in liger.warnings) == 2
    assert liger.memory.breakdown_bytes.activations == plain.memory.breakdown_bytes.activations


def test_torchtune_gemma2_caps_no_logit() -> None:
    """torchtune's Gemma 2 applies its final soft-cap to the normed hidden state (``Gemma2FinalNorm``,
    pytorch/torchtune ``torchtune/models/gemma2/_component_builders.py``), so a torchtune request keeps no soft-cap
    tensor per logit; the same chunked loss on Hugging Face's Gemma 2 does (4 bytes per logit, fp32 chunk)."""
    from estimator import EstimateRequest, estimate

    body = {"model": "gemma-2-9b", "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": 1},
            "training": {"method": "lora", "seq_len": 4096, "micro_batch_size": 1, "loss_kernel": "chunked",
                         "activation_checkpointing": "full", "attention": "eager"}}
    hf = estimate(EstimateRequest.model_validate(body)).memory.peak_allocated_bytes
    body["training"]["stack"] = "torchtune"
    tt = estimate(EstimateRequest.model_validate(body)).memory.peak_allocated_bytes
    assert hf - tt == pytest.approx(4 * 4096 * 256000, rel=0.02)
