"""Prefill and decode time of one engine replica (a TP x PP group of GPUs).

Decode is bandwidth-bound (Pope et al. 2022, "Efficiently Scaling Transformer Inference", Sec. 3.1): a step
reads every weight the tokens touch once and each request's KV cache once, so::

    t_step(B, c) = smooth(weights read by B tokens / (HBM x eff), 2 x active params x B / tp / (peak x GEMM eff))
                 + B x KV bytes(c) x (1 + a x g) / (HBM x eff x attention fraction)
                 + layers x per-layer fixed time + 2 x layers x all-reduce(B x hidden x 2 bytes) + step overhead

with g the GQA group size and a the engine's KV read amplification (0 for paged-attention kernels that read
GQA heads natively; 2 for HF's repeat_kv + SDPA, see engines.py). Tensor parallelism all-reduces twice a layer
(after attention and after the MLP, Megatron-LM, Shoeybi et al. 2019, Sec. 3); a ring all-reduce moves
2 (tp - 1) / tp x the message over the link (NVLink or PCIe, per direction) plus a fixed latency.

``smooth(a, b) = (a^p + b^p)^(1/p)`` is a roofline with a soft corner; p = 2.5 and the large-M GEMM efficiency
(bf16 0.772, fp8 0.681 of the dense peak) are measured on the H200 at the Llama projection shapes, M = 1 to
8192 (tests/data/serving_h200_raw/kernels_gemm.json, benchmarks/serving/fit_gemm.py: median error 3.8 % over
80 GEMMs). All linears of a step share M, so the smooth roofline of their sums equals the sum of theirs.

Prefill is compute-bound: 2 x active params x T FLOPs in GEMMs at the measured GEMM rate of the weights' dtype,
plus 2 x layers x T^2 x q-heads x head_dim (causal attention, half of the 4 T^2 d of a full square) at
``FLASH_ATTENTION_EFFICIENCY`` of the bf16 peak; the measured HF reference instead uses its measured overall
fraction (``EngineProfile.prefill_mfu``).

A workload of B requests in flight, each I prompt and O output tokens, under continuous batching: every decode
step carries B requests at mean context I + O / 2; each request's prefill interrupts the others once, so per
cycle of O steps the replica spends O x t_step + B x t_prefill, and::

    output tokens/s = B x O / (O x t_step + B x t_prefill)
    TPOT            = t_step + (B - 1) x t_prefill / O           TTFT = t_prefill + t_step
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from estimator.inference.engines import EngineProfile
from estimator.inference.kv import KvLayout
from estimator.inference.weights import WeightBytes
from estimator.model.spec import ModelShape

__all__ = ["DECODE_GEMM_EFFICIENCY", "GEMM_EFFICIENCY", "Link", "SpeedModel", "WorkloadPoint", "smooth"]

GEMM_EFFICIENCY: Final = {"bf16": 0.772, "fp8": 0.681}  # measured, M >= 1024 (module docstring)
DECODE_GEMM_EFFICIENCY = GEMM_EFFICIENCY["bf16"]
ROOFLINE_P: Final = 2.5
# FlashAttention-2/3 forward on Hopper: 0.35-0.75 of the bf16 peak (Shah et al. 2024)
FLASH_ATTENTION_EFFICIENCY: Final = 0.5
ALLREDUCE_EFFICIENCY: Final = 0.7


def smooth(a: float, b: float) -> float:
    """Roofline with a soft corner (module docstring)."""
    return float((a**ROOFLINE_P + b**ROOFLINE_P) ** (1 / ROOFLINE_P))


@dataclass(frozen=True)
class Link:
    """The TP link: per-direction bandwidth (bytes/s) and a fixed latency per all-reduce (s)."""

    bytes_per_s: float
    latency_s: float
    name: str


@dataclass(frozen=True)
class WorkloadPoint:
    concurrency: int
    step_s: float
    prefill_s: float
    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    prefill_share: float


@dataclass(frozen=True)
class SpeedModel:
    engine: EngineProfile
    shape: ModelShape
    weights: WeightBytes
    kv: KvLayout
    hbm_bytes_per_s: float
    peak_flops: float
    tp: int
    pp: int
    link: Link | None
    block_size: int
    gemm_efficiency: float = DECODE_GEMM_EFFICIENCY
    attention_peak_flops: float | None = None

    @property
    def group(self) -> int:
        s = self.shape
        return 1 if s.is_mla else max(1, s.arch.num_attention_heads // s.kv_heads)

    def _allreduce(self, message_bytes: float) -> float:
        if self.tp == 1 or self.link is None:
            return 0.0
        return (self.link.latency_s + 2 * (self.tp - 1) / self.tp * message_bytes
                / (self.link.bytes_per_s * ALLREDUCE_EFFICIENCY))

    def stage_step_s(self, batch: int, context: int) -> float:
        """One decode step of one pipeline stage (module docstring)."""
        e, s = self.engine, self.shape
        layers = self.weights.layers_on_gpu
        bw = self.hbm_bytes_per_s * e.hbm_efficiency
        t_w = self.weights.read_for_batch(batch) / bw
        t_c = 2 * s.active_params() / self.pp * batch / self.tp / (self.peak_flops * self.gemm_efficiency)
        kv_bytes = batch * self.kv.request_bytes(context, self.block_size)
        t_kv = kv_bytes * (1 + e.kv_amplification_per_group * self.group) / (bw * e.attention_bandwidth_fraction)
        t_ar = 2 * layers * self._allreduce(batch * s.arch.hidden_size * 2)
        return smooth(t_w, t_c) + t_kv + layers * e.layer_overhead_s + t_ar

    def step_s(self, batch: int, context: int) -> float:
        """A decode step of every request in flight, through every stage.

        With pipeline parallelism the engines split the running batch into ``pp`` micro-batches that occupy
        the stages at once (vLLM's one scheduler per virtual engine, ``vllm/engine/llm_engine.py``
        ``parallel_config.pipeline_parallel_size`` schedulers; TensorRT-LLM's pipelined micro-batches): in the
        steady state each stage runs each micro-batch once per token, so every request advances one token in
        ``pp`` stage steps of ``batch / pp`` requests each. A batch smaller than ``pp`` leaves stages idle: its
        requests go through the stages one after another."""
        micro = -(-batch // self.pp)
        return self.pp * self.stage_step_s(micro, context) + self.engine.step_overhead_s

    def prefill_s(self, tokens: int) -> float:
        e, s, a = self.engine, self.shape, self.shape.dims
        linear = 2 * s.active_params() * tokens / (self.tp * self.pp)
        attention = 2 * a.num_layers * tokens**2 * a.num_attention_heads * s.head_dim / (self.tp * self.pp)
        t_w = self.pp * self.weights.read_for_batch(tokens) / (self.hbm_bytes_per_s * e.hbm_efficiency)
        t_ar = 2 * a.num_layers * self._allreduce(tokens * a.hidden_size * 2)
        if e.prefill_mfu is not None:  # the measured reference: one overall fraction of the peak
            t_c = max((linear + attention) / (self.peak_flops * e.prefill_mfu), t_w)
        else:
            attn_peak = self.attention_peak_flops or self.peak_flops
            t_c = (smooth(t_w, linear / (self.peak_flops * self.gemm_efficiency))
                   + attention / (attn_peak * FLASH_ATTENTION_EFFICIENCY))
        return t_c + a.num_layers * e.layer_overhead_s + t_ar + e.step_overhead_s

    def point(self, batch: int, input_tokens: int, output_tokens: int) -> WorkloadPoint:
        ctx = input_tokens + output_tokens // 2
        t_d = self.step_s(batch, ctx)
        t_p = self.prefill_s(input_tokens)
        cycle = output_tokens * t_d + batch * t_p
        out_rate = batch * output_tokens / cycle
        return WorkloadPoint(concurrency=batch, step_s=t_d, prefill_s=t_p, ttft_s=t_p + t_d,
                             tpot_s=t_d + (batch - 1) * t_p / output_tokens, output_tokens_per_s=out_rate,
                             input_tokens_per_s=out_rate * input_tokens / output_tokens,
                             prefill_share=batch * t_p / cycle)
