"""The inference estimator's mechanisms: quantized weight bytes, TP/PP sharding, KV layouts (GQA replication,
MLA across ranks, sliding windows, fp8), vLLM's budget and refusals, the speed curve and the cost split."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from estimator.inference import InferenceRequest, estimate_inference
from estimator.inference.kv import kv_layout
from estimator.inference.memory import longest_request
from estimator.inference.weights import linear_bytes, weight_bytes_per_gpu
from estimator.model.spec import ModelShape, preset

GiB = 2**30


def run(**body: object):
    return estimate_inference(InferenceRequest.model_validate(body))


def test_int4_formats_store_packed_weights_scales_and_zero_points() -> None:
    i, o, g = 4096, 14336, 128
    assert linear_bytes(i, o, "bf16", g, True) == 2 * i * o
    assert linear_bytes(i, o, "fp8", g, True) == i * o + 8
    awq = linear_bytes(i, o, "int4-awq", g, True)
    assert awq == i * o // 2 + 2 * (i // g) * o + (i // g) * o // 2
    assert linear_bytes(i, o, "int4-awq", g, False) == awq - (i // g) * o // 2  # symmetric: no qzeros
    assert linear_bytes(i, o, "int4-gptq", g, True) == awq + 4 * i  # + g_idx
    assert linear_bytes(i, o, "int4-awq", 32, True) > awq  # smaller groups, more scales


def test_quantized_70b_keeps_embeddings_in_16_bit() -> None:
    shape = ModelShape(preset("llama-3.1-70b"))
    bf16 = weight_bytes_per_gpu(shape, "bf16", 128, True, 1)
    fp8 = weight_bytes_per_gpu(shape, "fp8", 128, True, 1)
    assert fp8.embedding == bf16.embedding
    assert fp8.linear < bf16.linear / 1.99


def test_tp_splits_weights_and_replicates_kv_heads_past_their_count() -> None:
    shape = ModelShape(preset("llama-3.1-70b"))  # 8 KV heads
    w1 = weight_bytes_per_gpu(shape, "bf16", 128, True, 1).total
    w8 = weight_bytes_per_gpu(shape, "bf16", 128, True, 8).total
    assert w1 / 8 * 0.99 < w8 < w1 / 8 * 1.01
    assert kv_layout(shape, "auto", "bf16", 8).kv_heads_per_gpu == 1
    # TP16 cannot split 8 heads further: each rank keeps one (vLLM replicates), so KV per GPU stops shrinking
    assert kv_layout(shape, "auto", "bf16", 16).bytes_per_token == kv_layout(shape, "auto", "bf16", 8).bytes_per_token


def test_mla_latent_is_not_split_by_tp() -> None:
    shape = ModelShape(preset("deepseek-v3"))
    assert kv_layout(shape, "auto", "bf16", 8).bytes_per_token == kv_layout(shape, "auto", "bf16", 1).bytes_per_token


def test_pp_halves_layers_and_their_kv() -> None:
    shape = ModelShape(preset("llama-3.1-70b"))
    assert weight_bytes_per_gpu(shape, "bf16", 128, True, 1, 2).layers_on_gpu == 40
    half = kv_layout(shape, "auto", "bf16", 1, 2).bytes_per_token
    assert half * 2 == kv_layout(shape, "auto", "bf16", 1).bytes_per_token


def test_gemma2_sliding_layers_hold_only_the_window() -> None:
    shape = ModelShape(preset("gemma-2-9b"))
    kv = kv_layout(shape, "auto", "bf16", 1)
    assert kv.sliding_layers == shape.arch.num_layers // 2 and kv.window == shape.arch.sliding_window
    long = kv.request_bytes(8 * 4096, 16)
    all_full = kv.bytes_per_token_layer * 8 * 4096 * shape.arch.num_layers
    assert long < 0.6 * all_full  # half the layers stop at window + one block
    assert kv_layout(shape, "auto", "bf16", 1, sliding_override=0).sliding_layers == 0


def test_longest_request_is_the_largest_that_fits() -> None:
    kv = kv_layout(ModelShape(preset("llama-3.1-8b")), "auto", "bf16", 1)
    pool = 10 * GiB
    n = longest_request(kv, pool, 16)
    assert kv.request_bytes(n, 16) <= pool < kv.request_bytes(n + 16, 16)


def test_vllm_budget_adds_up() -> None:
    m = run(model="llama-3.1-8b").memory
    assert m.kv_cache_bytes == m.budget_bytes - m.weights_bytes - m.activation_peak_bytes - m.non_torch_bytes
    assert m.budget_bytes == int(m.total_bytes * 0.9)
    assert m.kv_tokens == m.num_blocks * m.block_size
    assert m.max_requests_at_full_context == m.kv_cache_bytes // (m.kv_bytes_per_token * 8192)


def test_fp8_kv_doubles_the_tokens() -> None:
    a = run(model="llama-3.1-70b", serving={"tensor_parallel_size": 2}).memory
    b = run(model="llama-3.1-70b", serving={"tensor_parallel_size": 2, "kv_cache_dtype": "fp8"}).memory
    assert 1.99 < b.kv_tokens / a.kv_tokens < 2.01


def test_engines_budget_differently() -> None:
    v = run(engine="vllm").memory
    s = run(engine="sglang").memory
    t = run(engine="tensorrt-llm").memory
    assert s.fraction == 0.88 and s.block_size == 1
    assert s.kv_cache_bytes == s.budget_bytes - s.weights_bytes  # activations outside SGLang's static fraction
    assert t.block_size == 32 and t.kv_cache_bytes < v.total_bytes - v.weights_bytes
    assert run(engine="sglang", serving={"tensor_parallel_size": 8}).memory.fraction == 0.81


def test_gpu_memory_utilization_above_what_is_free_is_vllms_start_up_error() -> None:
    r = run(serving={"gpu_memory_utilization": 0.999})
    assert not r.starts and r.errors[0].startswith("ValueError: Free memory on device")


def test_weights_larger_than_the_gpu_do_not_load() -> None:
    r = run(model="llama-3.1-405b", serving={"tensor_parallel_size": 2})
    assert not r.starts and "OutOfMemoryError" in r.errors[0]


def test_decode_speed_grows_with_batch_and_latency_with_it() -> None:
    sp = run(model="llama-3.1-8b").speed
    assert sp is not None
    tps = [p.output_tokens_per_s_per_gpu for p in sp.curve]
    tpot = [p.tpot_s for p in sp.curve]
    assert tps == sorted(tps) and tpot == sorted(tpot)
    single = sp.curve[0]
    # batch 1 is bound by reading 15 GB of weights at ~4.3 TB/s: 3.5-6 ms a token on an H200
    assert 0.0035 < single.tpot_s < 0.006


def test_tp_all_reduce_costs_more_over_pcie() -> None:
    nv = run(model="llama-3.1-8b", hardware={"server": "dell-xe9680-h100", "gpu": "h100-sxm5-80gb"},
             serving={"tensor_parallel_size": 4}, workload={"concurrency": 64}).speed
    pcie = run(model="llama-3.1-8b", hardware={"server": "dell-r760xa-h100-pcie", "gpu": "h100-pcie-80gb",
                                               "gpus_per_node": 4},
               serving={"tensor_parallel_size": 4}, workload={"concurrency": 64}).speed
    assert nv is not None and pcie is not None and pcie.decode_step_s > nv.decode_step_s


def test_latency_target_gives_the_concurrency_that_holds_it() -> None:
    r = run(model="llama-3.1-8b", workload={"tpot_target_s": 0.02})
    sp = r.speed
    assert sp is not None and sp.max_concurrency_within_targets is not None
    within = sp.max_concurrency_within_targets
    by_c = {p.concurrency: p for p in sp.curve}
    assert all(p.tpot_s <= 0.02 for c, p in by_c.items() if c <= within)
    assert all(p.tpot_s > 0.02 for c, p in by_c.items() if c > within)


def test_cost_splits_the_node_hour_between_input_and_output() -> None:
    r = run(model="llama-3.1-8b", hardware={"server": "dell-xe9680-h200"})
    c, sp = r.cost, r.speed
    assert c is not None and sp is not None
    node_s = c.node_usd_per_hour / 3600
    spent = (c.usd_per_million_output_tokens * sp.output_tokens_per_s_per_node
             + c.usd_per_million_input_tokens * sp.input_tokens_per_s_per_node) / 1e6
    assert abs(spent - node_s) / node_s < 1e-9
    assert c.yearly_output_tokens == pytest.approx(sp.output_tokens_per_s_per_node * 3600 * 8760 * c.utilisation)
    cloud = run(model="llama-3.1-8b", hardware={"server": "dell-xe9680-h200"}, cost={"basis": "cloud"}).cost
    assert cloud is not None and cloud.basis == "cloud" and cloud.price_date


def test_request_rules_name_the_field() -> None:
    with pytest.raises(ValidationError) as exc:
        InferenceRequest.model_validate({"serving": {"tensor_parallel_size": 16}})
    assert exc.value.errors()[0]["loc"] == ("serving", "tensor_parallel_size")
    with pytest.raises(ValidationError) as exc:
        InferenceRequest.model_validate({"workload": {"input_tokens": 8192}})
    assert exc.value.errors()[0]["loc"] == ("workload", "output_tokens")


def test_moe_decode_reads_more_experts_as_the_batch_grows() -> None:
    shape = ModelShape(preset("mixtral-8x7b"))  # 8 experts, 2 per token
    w = weight_bytes_per_gpu(shape, "bf16", 128, True, 2)
    assert w.read_for_batch(1) == w.read_per_step < w.read_for_batch(4) < w.read_for_batch(64)
    all_experts = w.read_per_step - w.routed_expert_bytes * 2 // 8 + w.routed_expert_bytes
    assert all_experts * 0.999 < w.read_for_batch(64) <= all_experts
    dense = weight_bytes_per_gpu(ModelShape(preset("llama-3.1-8b")), "bf16", 128, True, 1)
    assert dense.read_for_batch(256) == dense.read_per_step


def test_a_request_rate_gives_the_concurrency_that_keeps_up() -> None:
    base = {"model": "llama-3.1-8b", "hardware": {"server": "dell-xe9680-h200"}}
    low = run(**base, workload={"request_rate_per_s": 8.0}).speed
    high = run(**base, workload={"request_rate_per_s": 80.0}).speed
    assert low is not None and high is not None
    assert 1 <= low.concurrency < high.concurrency
    # the node completes at least the arrival rate: output tokens/s >= rate x output tokens
    assert low.output_tokens_per_s_per_node >= 8.0 * 256 * 0.999
    flooded = run(**base, workload={"request_rate_per_s": 1e6})
    assert any("queue grows" in w for w in flooded.warnings)
    with pytest.raises(ValidationError) as exc:
        InferenceRequest.model_validate({"workload": {"concurrency": 4, "request_rate_per_s": 1.0}})
    assert exc.value.errors()[0]["loc"] == ("workload", "request_rate_per_s")


def test_with_latency_targets_the_figures_are_at_the_most_they_allow() -> None:
    sp = run(model="llama-3.1-8b", workload={"tpot_target_s": 0.02, "ttft_target_s": 1.0}).speed
    assert sp is not None and sp.concurrency == sp.max_concurrency_within_targets
    assert sp.tpot_s <= 0.02 and sp.ttft_s <= 1.0
    impossible = run(model="llama-3.1-8b", workload={"tpot_target_s": 0.0001})
    assert impossible.speed is not None and impossible.speed.concurrency == 1
    assert any("no concurrency meets" in w for w in impossible.warnings)
