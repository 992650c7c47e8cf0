"""Issue 33: GPT-NeoX-style blocks (parallel residual, fused query_key_value, LayerNorm with biases, non-gated GELU
MLP) read from config.json and their saved activations by mechanism.

The expected bytes come from the per-module trace of what autograd saves in a Pythia 1.4B layer
(``tests/data/fidelity_h100_raw/cpu_trace_pythia.json``: traced on the CPU with ``saved_tensors_hooks``, the CPU
trace checked against the H200's for Llama 2 7B LoRA, plus the CUDA autocast rule for ``layer_norm``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from estimator import EstimateRequest
from estimator.job import job_of
from estimator.model.spec import parse_hf_config, shape_for
from estimator.training.activations import activation_rates
from estimator.training.layout import build_layout

TRACE = Path(__file__).parent / "data" / "fidelity_h100_raw" / "cpu_trace_pythia.json"

# EleutherAI/pythia-1.4b config.json (the fields the estimator reads)
PYTHIA_1_4B = {
    "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": 2048,
    "intermediate_size": 8192, "num_attention_heads": 16, "num_hidden_layers": 24, "vocab_size": 50304,
    "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True, "hidden_act": "gelu",
    "tie_word_embeddings": False, "max_position_embeddings": 2048, "layer_norm_eps": 1e-05,
}


def _rates(arch_fields: dict[str, object], method: str, precision: str) -> float:
    training: dict[str, object] = {"method": method, "precision": precision, "micro_batch_size": 1, "seq_len": 1024,
                                   "activation_checkpointing": "none", "optimizer": "adamw",
                                   "optimizer_impl": "fused"}
    if method == "lora":
        training.update(lora_rank=16, lora_targets="all-linear")
    req = EstimateRequest.model_validate({
        "model": arch_fields, "training": training,
        "parallelism": {"sharding": "none", "framework": "pytorch"},
        "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 1}})
    shape = shape_for(req.model)
    job = job_of(req)
    return activation_rates(job, shape, build_layout(job, shape)).per_token


def _pythia(**over: object) -> dict[str, object]:
    arch = parse_hf_config({**PYTHIA_1_4B, **over}).model_dump()
    return arch


def test_config_json_gives_the_neox_mechanisms() -> None:
    arch = parse_hf_config(PYTHIA_1_4B)
    assert (arch.parallel_residual, arch.fused_projections, arch.gated_mlp, arch.norm) == (True, True, False,
                                                                                              "layernorm")
    assert parse_hf_config({**PYTHIA_1_4B, "use_parallel_residual": False}).parallel_residual is False
    llama = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
             "num_hidden_layers": 16, "vocab_size": 128256}
    assert parse_hf_config(llama).parallel_residual is False


@pytest.mark.parametrize(("method", "precision", "key"), [
    ("lora", "bf16-mixed", "pythia_1.4b_lora_bf16_mixed"),
    ("full", "bf16-true", "pythia_1.4b_full_bf16_true"),
])
def test_saved_bytes_per_layer_match_the_trace(method: str, precision: str, key: str) -> None:
    expected = json.loads(TRACE.read_text())["expected_on_cuda_bytes_per_token_per_layer"][key]["value"]
    got = _rates(_pythia(), method, precision)
    assert got == pytest.approx(expected, rel=0.002)


def test_parallel_residual_saves_one_norm_input_without_a_cast() -> None:
    # bf16-true: both LayerNorms read the same bf16 input, one storage; sequential: two inputs of 2 B/element
    h = PYTHIA_1_4B["hidden_size"]
    assert isinstance(h, int)
    parallel = _rates(_pythia(), "full", "bf16-true")
    sequential = _rates(_pythia(use_parallel_residual=False), "full", "bf16-true")
    assert sequential - parallel == pytest.approx(2 * h)
    # under autocast each norm casts its bf16 input to its own fp32 copy: no sharing either way
    assert _rates(_pythia(), "lora", "bf16-mixed") == _rates(_pythia(use_parallel_residual=False), "lora",
                                                             "bf16-mixed")


def test_fused_qkv_is_one_adapter_and_keeps_its_output() -> None:
    fused = _rates(_pythia(), "lora", "bf16-mixed")
    split = _rates({**_pythia(), "fused_projections": False}, "lora", "bf16-mixed")
    h = 2048
    # split q/k/v: three adapters save 2 B/element each (+2 x 2h); fused: the qkv output (v is a view) and the
    # rotated q and k are saved (+2 x 2h) -- with q, k, v all h wide the two mechanisms cancel for Pythia
    assert fused - split == pytest.approx(0, abs=64)
    full_fused = _rates(_pythia(), "full", "bf16-mixed")
    full_split = _rates({**_pythia(), "fused_projections": False}, "full", "bf16-mixed")
    # bf16-mixed full fine-tune: one cast of the qkv input instead of three (-2 x 2h), rotated q, k (+2 x 2h)
    assert full_fused - full_split == pytest.approx(0, abs=64)
    assert full_fused == pytest.approx(8208 + 4096 + 24640 + 4096 + 16384 + 16384, rel=0.001)
    assert h == PYTHIA_1_4B["hidden_size"]


def test_moe_attention_only_lora_frozen_experts_match_the_trace() -> None:
    """Qwen3-30B-A3B, LoRA on q/k/v/o, FSDP2 (bf16, no autocast): the frozen experts save no gathered input and no
    down-projection input; the per-head q/k RMSNorms save their fp32 inputs."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "calibration"))
    import stack_cases

    trace = json.loads((TRACE.parent / "cpu_trace_qwen3_moe.json").read_text())
    expected = trace["expected_on_cuda_bytes_per_token_per_layer"]["qwen3_30b_a3b_lora_attention_fsdp_bf16"]["value"]
    case = stack_cases.by_id("h100-q3a3b-lora16at-fused-b1-s2048-nock-fsdp8")
    req = EstimateRequest.model_validate(case["request"])
    shape = shape_for(req.model)
    job = job_of(req)
    got = activation_rates(job, shape, build_layout(job, shape)).per_token
    assert got == pytest.approx(expected, rel=0.005)
    full = EstimateRequest.model_validate({**case["request"], "training": {
        **case["request"]["training"], "method": "full", "precision": "bf16-true"}})
    # trained experts also keep the gathered input (2h) and the down projection's input (2 x 768) per routed pair
    full_job = job_of(full)
    got_full = activation_rates(full_job, shape, build_layout(full_job, shape)).per_token
    assert got_full > got + 8 * (2 * 2048 + 2 * 768)
