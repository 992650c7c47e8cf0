"""``capplan check --trace`` (issue 31): the request's model traced on fake tensors, its peak beside the estimate.

Scaled-down configs of four real families (Llama 3.1, Qwen3 MoE, Gemma 2, Phi-3: their config.json fields with
fewer layers and narrower widths) run by default, a few seconds each on the 2-core machine; the full-size ones
are marked ``slow``.

Tolerances. The trace stands in for a GPU measurement, so the estimate must be within its own memory error
bar of the trace (``memory.error_bar_pct``, calibrated on the H200 measurements of ``docs/accuracy.md``) plus
what separates the trace from a real GPU. That second part was measured by
``benchmarks/check/trace_vs_calibration.py`` against ``tests/data/calibration_h200.json`` (traced vs measured
peak allocated on one H200, same requests): see ``TRACE_VS_GPU_PCT``. A few parts are exact and asserted
exactly: the parameters' and the AdamW states' bytes are what their shapes and dtypes say.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch

from app.check.compare import part_rows
from app.check.trace import LiveCounter, TraceResult, TraceUnsupported, hf_config, trace
from app.core.startup import load_source_catalog
from estimator import EstimateRequest, EstimateResponse, estimate

CATALOG = load_source_catalog()
#: largest |traced - measured| / measured of the traced peak against the H200 calibration measurements of the
#: same requests (benchmarks/check/trace_vs_calibration.json, 16 cases: full, LoRA, checkpointing on/off, FSDP2
#: W=8, Gemma 2, Mixtral, Qwen 2.5, Mistral, foreach / SGD / Adafactor / eager): at most 0.4 % (Gemma 2 9B
#: full, +0.4 %), most within 0.3 %, on 2026-12-06; 1 % leaves room for the allocator's rounding of other
#: shapes.
TRACE_VS_GPU_PCT = 1.0

#: each family's real widths from its config.json (Llama 3.1 8B, Qwen3-30B-A3B, Gemma 2 9B, Phi-3 mini) with 2
#: decoder layers: a trace costs per operator, not per byte, so real widths and 4k tokens keep every part in its
#: real proportion (logits against layers, experts against attention) for seconds of tracing
LLAMA_31 = {"name": "Llama 3.1 8B widths, 2 layers", "num_layers": 2, "hidden_size": 4096,
            "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336, "vocab_size": 128256}
QWEN3_MOE = {"hf_config": {
    "model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 2048, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "tie_word_embeddings": False,
    "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "rms_norm_eps": 1e-06}}
GEMMA_2 = {"hf_config": {
    "model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 3584, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
    "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "sliding_window": 4096,
    "query_pre_attn_scalar": 256, "tie_word_embeddings": True}}
PHI_3 = {"hf_config": {
    "model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 3072, "num_attention_heads": 32,
    "num_key_value_heads": 32, "intermediate_size": 8192, "vocab_size": 32064, "tie_word_embeddings": False}}


def _request(model: Any, *, gpus: int = 1, **sections: dict[str, Any]) -> EstimateRequest:
    training = {"seq_len": 4096, "attention": "sdpa", **sections.get("training", {})}
    return EstimateRequest.model_validate({
        "model": model, "training": training, "parallelism": sections.get("parallelism", {}),
        "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": gpus}})


def _traced(request: EstimateRequest) -> tuple[TraceResult, EstimateResponse]:
    result = estimate(request, CATALOG)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' and torch's deprecation notes; not what is tested
        return trace(request, result), result


def _tolerance_pct(result: EstimateResponse) -> float:
    return result.memory.error_bar_pct + TRACE_VS_GPU_PCT


CLASSES = [
    pytest.param(LLAMA_31, {}, 1, id="llama-full-mixed-nock"),
    pytest.param(LLAMA_31, {"training": {"activation_checkpointing": "full"}}, 1, id="llama-full-mixed-ck"),
    pytest.param(LLAMA_31, {"training": {"precision": "bf16-true"}}, 1, id="llama-full-true"),
    pytest.param(LLAMA_31, {"training": {"method": "lora"}}, 1, id="llama-lora"),
    pytest.param(LLAMA_31, {"training": {"precision": "bf16-true", "gradient_accumulation_steps": 4}}, 1,
                 id="llama-full-true-accum4"),
    pytest.param(LLAMA_31, {"training": {"method": "lora", "activation_checkpointing": "full"}}, 1,
                 id="llama-lora-ck"),
    pytest.param(LLAMA_31, {"parallelism": {"sharding": "fsdp"}}, 8, id="llama-fsdp2-w8"),
    pytest.param(LLAMA_31, {"parallelism": {"sharding": "fsdp"}, "training": {"activation_checkpointing": "full"}},
                 8, id="llama-fsdp2-w8-ck"),
    pytest.param(QWEN3_MOE, {"training": {"precision": "bf16-true"}}, 1, id="qwen3moe-full-true"),
    pytest.param(QWEN3_MOE, {"training": {"method": "lora", "lora_targets": "attention"}}, 1, id="qwen3moe-lora"),
    # issue 33 item 2 (the H100's Qwen3-30B-A3B FSDP2 cases, tests/test_moe_fsdp_accuracy.py): while the loss runs
    # FSDP2 holds the root and one layer unsharded, not two (estimator.training.memory._loss_gather_buffers);
    # with two they were +11.0 % (no checkpointing) and +11.7 % (full) above these traces
    pytest.param(QWEN3_MOE, {"training": {"method": "lora", "lora_targets": "attention"},
                             "parallelism": {"sharding": "fsdp"}}, 8, id="qwen3moe-lora-fsdp2-w8"),
    pytest.param(QWEN3_MOE, {"training": {"method": "lora", "lora_targets": "attention",
                                          "activation_checkpointing": "full"},
                             "parallelism": {"sharding": "fsdp"}}, 8, id="qwen3moe-lora-fsdp2-w8-ck"),
    # Gemma 2 asks for eager attention: transformers 5.24 refuses SDPA for it (soft-capped scores) and runs eager,
    # and the estimate counts what the request names (estimator.training.activations._effective_attention)
    pytest.param(GEMMA_2, {"training": {"method": "lora", "activation_checkpointing": "full", "attention": "eager"}},
                 1, id="gemma2-lora-ck"),
    # found by the trace (issue 31): Gemma 2's eager attention keeps, each layer, the tanh output of its soft-capped
    # scores, the fp32 softmax and bf16 probabilities over the whole sequence and repeat_kv's K / V copies, and its
    # four norms each keep their fp32 input (estimator.training.activations._eager_attention_bytes): -5.4 % before
    # they were counted, within 0.5 % now, inside the 3.0 % every class gets (error bar 2.0 % + TRACE_VS_GPU_PCT)
    pytest.param(GEMMA_2, {"training": {"method": "lora", "attention": "eager"}}, 1, id="gemma2-lora-nock"),
    pytest.param(GEMMA_2, {"training": {"precision": "bf16-true", "activation_checkpointing": "full",
                                        "attention": "eager"}}, 1, id="gemma2-full-ck"),
    pytest.param(PHI_3, {"training": {"method": "lora"}}, 1, id="phi3-lora"),
    pytest.param(PHI_3, {"parallelism": {"sharding": "fsdp"}}, 8, id="phi3-fsdp2-w8"),
]


@pytest.mark.parametrize(("model", "sections", "gpus"), CLASSES)
def test_the_traced_peak_is_within_the_estimates_error_bar(model: Any, sections: dict[str, Any],
                                                           gpus: int) -> None:
    t, result = _traced(_request(model, gpus=gpus, **sections))
    est = result.memory.peak_allocated_bytes
    gap = (est - t.peak_allocated_bytes) / t.peak_allocated_bytes * 100
    assert abs(gap) <= _tolerance_pct(result), (
        f"estimate {est / 2**20:.1f} MiB vs traced {t.peak_allocated_bytes / 2**20:.1f} MiB: {gap:+.1f} % "
        f"(tolerance {_tolerance_pct(result):.1f} %); traced parts {t.parts_bytes}")
    assert t.seconds < 60
    assert sum(t.parts_bytes.values()) == pytest.approx(t.peak_allocated_bytes, rel=0.003)


def _param_bytes(model: torch.nn.Module) -> int:
    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[id(p)] = -(-p.numel() * p.element_size() // 512) * 512
    return sum(seen.values())


def test_parameters_and_adamw_states_are_exactly_their_shapes() -> None:
    """Full fine-tune, fp32 master weights, fused AdamW: parameters are every weight in fp32 (the tied ones
    once) and the states twice that (exp_avg, exp_avg_sq), plus AdamW's one-element ``step`` per parameter."""
    from transformers import AutoModelForCausalLM

    request = _request(LLAMA_31, training={"precision": "bf16-mixed"})
    t, _result = _traced(request)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(request), dtype=torch.float32)
    params = _param_bytes(model)
    n = sum(1 for _ in model.parameters())
    assert t.parts_bytes["parameters"] >= params  # + the rotary buffers and the input ids
    assert t.parts_bytes["parameters"] - params < 64 * 1024
    assert t.parts_bytes["optimizer_states"] == 2 * params + n * 512


def test_fsdp2_holds_one_shard_of_the_states_per_rank() -> None:
    """At W = 8 each rank keeps 1/8 of the fp32 weights and of the AdamW states (FSDP2 pads each to a multiple
    of W): within a few blocks of 1/8 of the unsharded ones."""
    one, _ = _traced(_request(LLAMA_31, training={"activation_checkpointing": "full"}))
    eight, _ = _traced(_request(LLAMA_31, gpus=8, parallelism={"sharding": "fsdp"},
                                training={"activation_checkpointing": "full"}))
    assert eight.sharded and eight.world_size == 8
    assert eight.parts_bytes["optimizer_states"] == pytest.approx(one.parts_bytes["optimizer_states"] / 8, rel=0.02)


def test_accumulation_holds_the_gradients_through_the_next_micro_batch() -> None:
    """With 4 micro-batches a step, micro-batch 2 onwards runs with the full gradients held: the peak grows by
    about one gradient of every trainable weight (bf16-true: 2 bytes a weight)."""
    one, _ = _traced(_request(LLAMA_31, training={"precision": "bf16-true"}))
    four, result = _traced(_request(LLAMA_31, training={"precision": "bf16-true", "gradient_accumulation_steps": 4}))
    grads = result.model.trainable_params * 2  # bf16-true: bf16 gradients
    assert four.peak_allocated_bytes - one.peak_allocated_bytes == pytest.approx(grads, rel=0.1)


def test_checkpointing_lowers_the_traced_activations() -> None:
    off, _ = _traced(_request(LLAMA_31, training={"precision": "bf16-true"}))
    on, _ = _traced(_request(LLAMA_31, training={"precision": "bf16-true", "activation_checkpointing": "full"}))
    assert on.peak_allocated_bytes < off.peak_allocated_bytes


def test_lora_has_no_gradients_or_states_for_the_frozen_weights() -> None:
    full, _ = _traced(_request(LLAMA_31, training={"precision": "bf16-true"}))
    lora, _ = _traced(_request(LLAMA_31, training={"method": "lora"}))
    assert lora.parts_bytes["optimizer_states"] < full.parts_bytes["optimizer_states"] / 10


def test_what_the_trace_cannot_represent_is_said_not_counted() -> None:
    t, result = _traced(_request(LLAMA_31, gpus=8))  # DDP over 8: buckets not traced
    assert "overhead" in t.unrepresented and "ddp_buckets" in t.unrepresented
    rows = {r.part: r for r in part_rows({"peak_allocated_bytes": t.peak_allocated_bytes,
                                          "parts_bytes": t.parts_bytes, "unrepresented": t.unrepresented},
                                         {"peak_allocated_bytes": result.memory.peak_allocated_bytes,
                                          "parts_bytes": result.memory.breakdown_bytes.model_dump()})}
    assert rows["overhead"].measured is None and rows["overhead"].estimated == result.memory.breakdown_bytes.overhead
    assert rows["overhead"].unrepresented


@pytest.mark.parametrize(("sections", "gpus", "field"), [
    ({"training": {"method": "qlora"}}, 1, "training.method"),
    ({"training": {"optimizer": "adamw-8bit"}}, 1, "training.optimizer"),
    ({"parallelism": {"tp": 2}}, 2, "parallelism"),
])
def test_what_the_trace_cannot_build_is_refused_by_name(sections: dict[str, Any], gpus: int, field: str) -> None:
    with pytest.raises(TraceUnsupported, match=field):
        _traced(_request(LLAMA_31, gpus=gpus, **sections))


def test_the_counter_uncounts_what_python_frees() -> None:
    counter = LiveCounter()
    with counter:
        a = torch.empty(1000)  # 4,000 bytes, rounded up to 4,096
        b = a.view(10, 100)  # the same storage: not counted twice
        assert counter.current == 4096
        c = torch.empty(10)
        assert counter.current == 4096 + 512
        del a, b
        assert counter.current == 512
    assert counter.peak == 4096 + 512
    del c


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["l8b-full-mixed-fused-b1-s4096-ck", "l8b-lora16al-fused-b1-s4096-ck",
                                     "l8b-full-mixed-fused-b1-s4096-ck-fsdp8", "g9b-lora16al-fused-b1-s4096-ck"])
def test_full_size_traces_match_the_h200_measurements(case_id: str) -> None:
    """Full-size models (Llama 3.1 8B, Gemma 2 9B): the trace against the measured H200 peak of the same
    request, within ``TRACE_VS_GPU_PCT``."""
    data = json.loads((Path(__file__).parent / "data" / "calibration_h200.json").read_text())
    case = next(c for c in data["cases"] if c["id"] == case_id)
    t, _result = _traced(EstimateRequest.model_validate(case["request"]))
    measured = case["measured"]["peak_allocated_bytes"]
    assert abs(t.peak_allocated_bytes - measured) / measured * 100 <= TRACE_VS_GPU_PCT


def test_the_counter_agrees_with_pytorchs_memtracker_where_the_tracker_works() -> None:
    """A trainable MLP (no frozen parameters, one iteration: what ``MemTracker`` accepts), forward, backward
    and a foreach AdamW step on fake tensors, under both: the same peak within a few 512-byte blocks."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode(allow_non_fake_inputs=True):
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
        opt = torch.optim.AdamW(model.parameters(), foreach=True)
        x = torch.randn(512, 1024)
        tracker = MemTracker()
        tracker.track_external(model, opt, x)
        counter = LiveCounter()
        with tracker, counter:
            for t in [*model.parameters(), x]:
                counter.add(t, "parameters")
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    theirs = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    assert theirs > 100 * 2**20
    assert abs(counter.peak - theirs) <= 8 * 512
