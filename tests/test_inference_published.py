"""The serving memory model against what the engines print at start-up in public threads. Each case names its
source, the figure, and the tolerance; the docs/accuracy.md "Serving" table lists the same cases.

Tolerances: 5 % on the KV pool where the engine's accounting is the one modelled (vLLM's profile of weights +
activation peak + non-torch memory); 7 % for vLLM V0 at TP2, whose "non_torch_memory" line counted the CUDA
context and NCCL buffers (1.79 GiB at TP1, 3.58 GiB at TP2) that V1 takes before its first snapshot; 1 % on
weights and on KV bytes per token, which are exact sums."""

from __future__ import annotations

import pytest

from estimator.inference import InferenceRequest, estimate_inference
from estimator.inference.kv import kv_layout
from estimator.model.spec import ModelShape
from estimator.request import ModelArch

GiB = 2**30


def _mem(body: dict) -> object:
    return estimate_inference(InferenceRequest.model_validate(body)).memory


# vllm-project/vllm PR 10511 (youkaichao, 2024-12-14), `vllm serve meta-llama/Meta-Llama-3-8B` on an H100 80GB:
# total_gpu_memory 79.22GiB, gpu_memory_utilization 0.90, model weights take 14.96GiB, PyTorch activation peak
# memory 1.26GiB, available_kv_cache_memory 53.29GiB; with -tp 2: weights 7.48GiB, non_torch 3.58GiB, activation
# 1.26GiB (available KV = 71.29 - 7.48 - 3.58 - 1.26 = 58.97 GiB). V0 profile: 8192 tokens, 256 sequences.
V0 = {"max_num_batched_tokens": 8192, "max_num_seqs": 256}


def test_vllm_pr10511_llama3_8b_h100_tp1() -> None:
    m = _mem({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm5-80gb"}, "serving": V0})
    assert abs(m.total_bytes / GiB - 79.22) / 79.22 < 0.01
    assert abs(m.budget_bytes / GiB - 71.29) / 71.29 < 0.01
    assert abs(m.weights_bytes / GiB - 14.96) / 14.96 < 0.01
    assert abs(m.kv_cache_bytes / GiB - 53.29) / 53.29 < 0.05


def test_vllm_pr10511_llama3_8b_h100_tp2() -> None:
    m = _mem({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm5-80gb"},
              "serving": {**V0, "tensor_parallel_size": 2}})
    assert abs(m.weights_bytes / GiB - 7.48) / 7.48 < 0.01
    assert abs(m.kv_cache_bytes / GiB - 58.97) / 58.97 < 0.07


def test_vllm_pr2031_llama2_7b_a100_blocks() -> None:
    """vllm-project/vllm PR 2031 (WoosukKwon, 2023-12-11): Llama2-7B, TP=1, 1x A100-80GB, "# GPU blocks: 7351"
    after the profiling fix (blocks of 16 tokens; max_model_len 4096, the profile at 4096 tokens, 256 seqs)."""
    m = _mem({"model": "llama-2-7b", "hardware": {"gpu": "a100-sxm4-80gb"},
              "serving": {"max_model_len": 4096, "max_num_batched_tokens": 4096, "max_num_seqs": 256},
              "workload": {"input_tokens": 512, "output_tokens": 128}})
    assert abs(m.num_blocks - 7351) / 7351 < 0.05


QWEN3_235B = ModelArch(name="Qwen3-235B-A22B", num_layers=94, hidden_size=4096, num_attention_heads=64,
                       num_kv_heads=4, head_dim=128, ffn_hidden_size=12288, moe_ffn_hidden_size=1536,
                       num_experts=128, experts_per_token=8, vocab_size=151936)


def test_vllm_issue21348_qwen3_235b_tp4_kv_tokens() -> None:
    """vllm-project/vllm issue 21348 (2025-07-22), Qwen3-235B-A22B-FP8 on 4x H100, `--tensor-parallel-size 4`:
    "Available KV cache memory: 8.11 GiB", "GPU KV cache size: 178,880 tokens" (94 layers, 4 KV heads of 128:
    one head per rank, 512 bytes a token a layer)."""
    kv = kv_layout(ModelShape(QWEN3_235B), "auto", "fp8", 4)
    assert kv.bytes_per_token == 94 * 2 * 1 * 128 * 2
    tokens = int(8.11 * GiB) // (kv.bytes_per_token * 16) * 16
    assert abs(tokens - 178_880) / 178_880 < 0.02  # 8.11 is rounded to 0.01 GiB in the log


def test_sglang_issue21348_qwen3_235b_tp4_pool_bytes_per_token() -> None:
    """Same thread, SGLang `--tp 4 --mem-fraction-static 0.93`: "KV Cache is allocated. #tokens: 367404, K size:
    8.23 GB, V size: 8.23 GB" (SGLang's GB are GiB): bytes a token = 16.46 GiB / 367,404."""
    kv = kv_layout(ModelShape(QWEN3_235B), "auto", "fp8", 4)
    per_token = 16.46 * GiB / 367_404
    assert abs(kv.bytes_per_token - per_token) / per_token < 0.01


@pytest.mark.parametrize(("model", "dtype", "expected"), [
    ("llama-3.1-70b", "auto", 80 * 2 * 8 * 128 * 2),   # GQA: 327,680 bytes a token at TP1
    ("llama-3.1-70b", "fp8", 80 * 2 * 8 * 128 * 1),    # fp8 KV halves it
    ("deepseek-v3", "auto", 61 * (512 + 64) * 2),      # MLA latent: kv_lora_rank + rope dim, no separate V
])
def test_kv_bytes_per_token_by_attention_kind(model: str, dtype: str, expected: int) -> None:
    from estimator.model.spec import preset

    assert kv_layout(ModelShape(preset(model)), dtype, "bf16", 1).bytes_per_token == expected


# NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md (release 0.14.0 table, "Throughput Measurements":
# trtllm-bench throughput, requests fed at an infinite rate, total output tokens/s, FP8 weights and FP8 KV cache
# on H100 / H200, uniform ISL/OSL). (model, GPU, TP, ISL, OSL, published output tokens/s over the TP group)
TRTLLM_0_14 = [
    ("llama-3.1-8b", "h200-sxm-141gb", 1, 1000, 1000, 16414.6988),
    ("llama-3.1-8b", "h200-sxm-141gb", 1, 128, 2048, 22948.5383),
    ("llama-3.1-8b", "h200-sxm-141gb", 1, 2048, 128, 3619.4309),
    ("llama-3.1-8b", "h200-sxm-141gb", 1, 500, 2000, 19510.4015),
    ("llama-3.1-8b", "h200-sxm-141gb", 1, 5000, 500, 3787.6721),
    ("llama-3.1-8b", "h200-sxm-141gb", 1, 128, 128, 27778.8885),
    ("llama-3.1-8b", "h100-sxm5-80gb", 1, 1000, 1000, 14108.0361),
    ("llama-3.1-8b", "h100-sxm5-80gb", 1, 2048, 128, 3460.3545),
    ("llama-3.1-70b", "h200-sxm-141gb", 1, 1000, 1000, 2585.0953),
    ("llama-3.1-70b", "h200-sxm-141gb", 2, 1000, 1000, 4600.9616),
    ("llama-3.1-70b", "h200-sxm-141gb", 4, 1000, 1000, 7607.5304),
    ("llama-3.1-70b", "h200-sxm-141gb", 8, 1000, 1000, 13081.434),
    ("llama-3.1-70b", "h200-sxm-141gb", 4, 128, 2048, 12763.4114),
    ("llama-3.1-70b", "h200-sxm-141gb", 4, 2048, 128, 1034.5773),
    ("llama-3.1-70b", "h100-sxm5-80gb", 4, 1000, 1000, 6932.8808),
    ("llama-3.1-70b", "h100-sxm5-80gb", 2, 1000, 1000, 4116.4444),
]
TRTLLM_TOLERANCE = 0.40  # per row; the model is optimistic here (median +28 %), docs/accuracy.md "Serving"


def trtllm_error(model: str, gpu: str, tp: int, isl: int, osl: int, published: float) -> float:
    r = estimate_inference(InferenceRequest.model_validate({
        "model": model, "engine": "tensorrt-llm", "hardware": {"gpu": gpu},
        "serving": {"tensor_parallel_size": tp, "weights": "fp8", "kv_cache_dtype": "fp8", "max_model_len": isl + osl},
        "workload": {"input_tokens": isl, "output_tokens": osl}}))
    assert r.starts and r.speed is not None
    return (r.speed.output_tokens_per_s_per_gpu * tp - published) / published


@pytest.mark.parametrize(("model", "gpu", "tp", "isl", "osl", "published"), TRTLLM_0_14)
def test_tensorrt_llm_0_14_throughput(model: str, gpu: str, tp: int, isl: int, osl: int, published: float) -> None:
    assert abs(trtllm_error(model, gpu, tp, isl, osl, published)) < TRTLLM_TOLERANCE


def test_speed_error_bar_covers_the_published_throughput_p90() -> None:
    from estimator.inference.estimate import SPEED_ERROR_BAR_PCT
    from estimator.training.accuracy import p90

    errors = [abs(trtllm_error(*row)) * 100 for row in TRTLLM_0_14]
    assert p90(errors) <= SPEED_ERROR_BAR_PCT


# --- held out: nothing below was used to set any constant (the engine constants come from the H200 kernel
# measurements, tests/test_inference_measured.py). docs/accuracy.md "Serving" lists every row and its error. ---

# NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md at 00f37686 (the v1.0 table: trtllm-bench
# throughput, PyTorch backend, CUDA graphs up to batch 8192, FP8 weights and FP8 KV cache, uniform ISL/OSL; "In
# many cases ... kv_cache_free_gpu_mem_fraction 0.95"). Llama 3.3 70B has Llama 3.1 70B's shape.
_V1_LENGTHS = [(128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (1000, 2000), (2048, 128),
               (2048, 2048), (5000, 500), (20000, 2000)]
_V1_COLUMNS = {
    ("llama-3.1-8b", "h200-sxm-141gb", 1): [27911, 26221, 18027, 20770, 17744, 16828, 3538, 12194, 3902, 1804],
    ("llama-3.1-8b", "h100-sxm5-80gb", 1): [28312, 22714, 14325, 17660, 15220, 13899, 3450, 9305, 3459, 1351],
    ("llama-3.1-70b", "h200-sxm-141gb", 1): [3803, 4336, 2872, 3666, 2909, 2994, 442, 2003, 566, 283],
    ("llama-3.1-70b", "h100-sxm5-80gb", 2): [6378, 6651, 4199, 5222, 4205, 4146, 762, 3082, 898, 437],
}
TRTLLM_1_0 = [(m, g, tp, i, o, float(v)) for (m, g, tp), vals in _V1_COLUMNS.items()
              for (i, o), v in zip(_V1_LENGTHS, vals, strict=True)]
TRTLLM_1_0_TOLERANCE = 0.30  # measured: median 12.7 %, worst 24.3 % (40 rows)


@pytest.mark.parametrize(("model", "gpu", "tp", "isl", "osl", "published"), TRTLLM_1_0)
def test_tensorrt_llm_1_0_throughput(model: str, gpu: str, tp: int, isl: int, osl: int, published: float) -> None:
    assert abs(trtllm_error(model, gpu, tp, isl, osl, published)) < TRTLLM_1_0_TOLERANCE


# MLPerf Inference, closed division, NVIDIA, benchmark llama2-70b (-99.9, or -99 where named; NVIDIA registers one
# configuration for both: configs/llama2-70b/Offline/__init__.py, the *_HighAccuracy classes are `pass`), read from
# {Offline,Server}/performance/run_1/mlperf_log_summary.txt of each system ("Tokens per second" / "Completed tokens
# per second"):
#   v4.0: mlcommons/inference_results_v4.0 at 3c4a1cf, closed/NVIDIA/results/{DGX-H100_H100-SXM-80GBx8_TRT,
#         H200-SXM-141GBx8_TRT}/llama2-70b-99.9/...
#   v4.1: mlcommons/inference_results_v4.1 at a2f5d66, closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/
#         llama2-70b-99.9/... (its -99 summaries are not in the stored copy) and H200-SXM-141GBx8_TRT/llama2-70b-99/...
#   v5.0: ntuhpc/mlperf_inference_results_v5.0 at cf35411, a third-party repository carrying the v5.0 results tree,
#         not checked against MLCommons' own (mlcommons/inference_results_v5.0 could not be brought here, too many
#         files, and its stored index has no result logs): closed/NVIDIA/results/H200-SXM-141GBx8_TRT/
#         llama2-70b-99/ Offline summary and Server mlperf_log_detail.txt ("result_completed_tokens_per_second":
#         33071.5 at 113.045 samples/s); DGX-H100_H100-SXM-80GBx8_TRT/llama2-70b-99/Offline and
#         llama2-70b-99.9/Server summaries.
# Server: TTFT <= 2 s and TPOT <= 200 ms at p99 (the logs' ttft_latency / tpot_latency). Output tokens a sample =
# tokens/s over samples/s of the same log: 290.3-293.1 in all twelve. The mean input length is in none of the logs,
# nor in mlcommons/inference language/llama2-70b/README.md (at b66003e: its "Tokens per sample: 294.45" is the
# fp16 reference's *output* length; the dataset is 24,576 OpenOrca GPT-4 samples with input and output under 1024
# tokens, processorca.py): taken equal to the output. The absolute check leans on that (at 150 / 600 input tokens
# the v4.1 H200 offline error is +33 % / -29 %); the H200 / H100 ratio check below does not (-8.0 .. +5.5 %
# over that range).
# Modelled as NVIDIA ran it (configs/llama2-70b/Offline/__init__.py, v4.1 at a2f5d66, v5.0 in
# mlcommons/inference_results_v5.0 at 6069beb): TensorRT-LLM, FP8 weights and KV cache, context 2048; H200 TP1 x 8
# replicas in every round; H100 TP2 x 4 in v4.0 / v4.1, TP1 PP2 x 4 in v5.0 (H100_SXM_80GB_PP2x4).
# Tolerance per round: v4.1 25 %. v4.0 30 %, one round older: the same two systems ran 12.5 % (H100) and 12.9 %
# (H200) faster offline in v4.1 on the same hardware (the rows below), a software gain the model (a current
# engine, no per-version term) cannot see; 25 % would fail both v4.0 server rows (+27.4 %, +27.3 %). v5.0 25 %.
MLPERF_OUTPUT_TOKENS = 291  # 290.3-293.1 in the twelve logs
MLPERF_INPUT_TOKENS = MLPERF_OUTPUT_TOKENS  # assumed: no published mean (above)
H100, H200 = ("h100-sxm5-80gb", 2, 1), ("h200-sxm-141gb", 1, 1)  # (gpu, TP, PP)
H100_PP2 = ("h100-sxm5-80gb", 1, 2)
SERVER = {"ttft_target_s": 2.0, "tpot_target_s": 0.2}
MLPERF = [  # (round, (gpu, TP, PP), scenario, published tokens/s over the 8 GPUs)
    ("v4.0", H100, "offline", 21805.8), ("v4.0", H100, "server", 20556.40),
    ("v4.0", H200, "offline", 27738.3), ("v4.0", H200, "server", 26485.43),
    ("v4.1", H100, "offline", 24524.9), ("v4.1", H100, "server", 21605.79),
    ("v4.1", H200, "offline", 31302.7), ("v4.1", H200, "server", 29228.22),
    ("v5.0", H200, "offline", 34988.2), ("v5.0", H200, "server", 33071.5),
]
# v5.0 on 8x H100 as NVIDIA ran it, pipeline-parallel: the engine keeps both stages busy with micro-batches of the
# running batch (speed.py, step_s); before the model did that (stages one after another) it read -42.8 / -42.5 %.
MLPERF_PP2 = [("v5.0", H100_PP2, "offline", 31306.8), ("v5.0", H100_PP2, "server", 31106.28)]
MLPERF_TOLERANCE = {"v4.0": 0.30, "v4.1": 0.25, "v5.0": 0.25}
MLPERF_RATIO_TOLERANCE = 0.10  # H200 over H100, same round and scenario; measured within 5 %


def mlperf_model(system: tuple[str, int, int], scenario: str) -> float:
    gpu, tp, pp = system
    r = estimate_inference(InferenceRequest.model_validate({
        "model": "llama-2-70b", "engine": "tensorrt-llm", "hardware": {"gpu": gpu, "gpus_per_node": 8},
        "serving": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "weights": "fp8", "kv_cache_dtype": "fp8",
                    "max_model_len": 2048},
        "workload": {"input_tokens": MLPERF_INPUT_TOKENS, "output_tokens": MLPERF_OUTPUT_TOKENS,
                     **(SERVER if scenario == "server" else {})}}))
    assert r.starts and r.speed is not None
    return r.speed.output_tokens_per_s_per_node


def mlperf_error(system: tuple[str, int, int], scenario: str, published: float) -> float:
    return (mlperf_model(system, scenario) - published) / published


@pytest.mark.parametrize(("round_", "system", "scenario", "published"), MLPERF)
def test_mlperf_llama2_70b_8x_h100_and_h200(round_: str, system: tuple[str, int, int], scenario: str,
                                           published: float) -> None:
    assert abs(mlperf_error(system, scenario, published)) < MLPERF_TOLERANCE[round_]


@pytest.mark.parametrize(("round_", "system", "scenario", "published"), MLPERF_PP2)
def test_mlperf_v5_0_llama2_70b_8x_h100_pipeline_parallel(round_: str, system: tuple[str, int, int], scenario: str,
                                                          published: float) -> None:
    assert abs(mlperf_error(system, scenario, published)) < MLPERF_TOLERANCE[round_]


@pytest.mark.parametrize(("round_", "scenario"), [(r, s) for r in ("v4.0", "v4.1") for s in ("offline", "server")])
def test_mlperf_llama2_70b_h200_over_h100(round_: str, scenario: str) -> None:
    """The H200 / H100 ratio of one round and scenario: same software, same dataset, so neither the engine version
    nor the unknown input length enters (the model moves both systems together)."""
    pub = {s[0]: p for r, s, sc, p in MLPERF if r == round_ and sc == scenario}
    published = pub[H200[0]] / pub[H100[0]]
    model = mlperf_model(H200, scenario) / mlperf_model(H100, scenario)
    assert abs(model / published - 1) < MLPERF_RATIO_TOLERANCE


# sgl-project/sglang benchmark/benchmark_vllm_060/README.md (SGLang v0.3.0 against vLLM v0.6.0, "Offline benchmark
# results": sglang.bench_serving, ShareGPT, 5000 prompts, request rate inf, bf16): Llama 3.1 8B Instruct on 1x
# A100 80G, SGLang 4281.51 / vLLM 4132.37 output tokens/s (22.03 / 21.27 requests/s); Llama 3.1 70B Instruct on 4x
# H100 80G (TP4), SGLang 3856.01 / vLLM 3700.64 (19.84 / 19.04 requests/s). Output tokens a request = 194
# (4281.51 / 22.03); the ShareGPT input mean is not in the table: taken equal to the output. vLLM 0.6.0's
# max_num_seqs default was 256 (EngineArgs); the model uses that for both; max_model_len 4096 as launched.
# Tolerance 45 %: ShareGPT's lengths are spread (the model takes their mean), and these 2024 engines, like
# TensorRT-LLM 0.14, run below their kernels (docs/accuracy.md).
ENGINE_BENCH = [
    ("sglang", "llama-3.1-8b", "a100-sxm4-80gb", 1, 4281.51),
    ("vllm", "llama-3.1-8b", "a100-sxm4-80gb", 1, 4132.37),
    ("sglang", "llama-3.1-70b", "h100-sxm5-80gb", 4, 3856.01),
    ("vllm", "llama-3.1-70b", "h100-sxm5-80gb", 4, 3700.64),
]
ENGINE_BENCH_TOLERANCE = 0.45
SHAREGPT_TOKENS = 194


def engine_bench_error(engine: str, model: str, gpu: str, tp: int, published: float) -> float:
    r = estimate_inference(InferenceRequest.model_validate({
        "model": model, "engine": engine, "hardware": {"gpu": gpu, "gpus_per_node": tp},
        "serving": {"tensor_parallel_size": tp, "max_model_len": 4096, "max_num_seqs": 256},
        "workload": {"input_tokens": SHAREGPT_TOKENS, "output_tokens": SHAREGPT_TOKENS}}))
    assert r.starts and r.speed is not None
    return (r.speed.output_tokens_per_s_per_node - published) / published


@pytest.mark.parametrize(("engine", "model", "gpu", "tp", "published"), ENGINE_BENCH)
def test_sglang_and_vllm_published_offline_throughput(engine: str, model: str, gpu: str, tp: int,
                                                      published: float) -> None:
    assert abs(engine_bench_error(engine, model, gpu, tp, published)) < ENGINE_BENCH_TOLERANCE


def test_the_speed_error_bar_covers_the_held_out_published_throughput() -> None:
    """At least 80 % of every held-out published figure (TensorRT-LLM 1.0's table, MLPerf v4.0,
    v4.1 and v5.0 on 8x H100 and 8x H200, SGLang / vLLM) within the bar each response carries."""
    from estimator.inference.estimate import SPEED_ERROR_BAR_PCT

    errors = [trtllm_error(*row) for row in TRTLLM_1_0]
    errors += [mlperf_error(system, scenario, published) for _, system, scenario, published in MLPERF + MLPERF_PP2]
    errors += [engine_bench_error(*row) for row in ENGINE_BENCH]
    covered = sum(abs(e) * 100 <= SPEED_ERROR_BAR_PCT for e in errors)
    assert covered >= 0.8 * len(errors)
