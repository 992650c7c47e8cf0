"""Assumptions and warnings in plain words, for people reading an estimate."""

from __future__ import annotations

from typing import Any

from estimator.layout import Layout
from estimator.modelspec import ModelShape
from estimator.request import EstimateRequest
from estimator.response import MemoryResult, Suggestion

__all__ = ["assumptions_for", "warnings_for"]

GIB = 1 << 30

_PRECISION = {
    "bf16-mixed": "fp32 trainable parameters, gradients and optimizer states; bf16 compute (autocast / FSDP "
                  "MixedPrecisionPolicy)",
    "bf16-true": "parameters, gradients and optimizer states all in bf16",
    "fp32": "everything in fp32 (TF32 matmuls)",
    "fp8-mixed": "as bf16-mixed, plus fp8 weight copies for the fp8 GEMMs (Transformer Engine)",
}


def assumptions_for(req: EstimateRequest, layout: Layout, hw: Any) -> list[str]:
    t, p = req.training, req.parallelism
    out = [
        f"Precision {t.precision}: {_PRECISION[t.precision]}.",
        f"Optimizer {t.optimizer} ({t.optimizer_impl} implementation); states appear at the first step, so the "
        "peak is that of the second and later steps.",
        f"Attention: {t.attention}; activation checkpointing: {t.activation_checkpointing}.",
        f"Layout: {layout.world_size} GPU(s) = dp {layout.dp} x tp {layout.tp} x pp {layout.pp} x cp {layout.cp}"
        f"; sharding {layout.sharding} over {layout.shard_group} rank(s)"
        + (f" (routed experts: split over ep {layout.ep}, sharded over {layout.expert_shard_group})"
           if layout.ep > 1 else "") + f"; framework {p.framework}.",
        "The loss upcasts logits to fp32 (Hugging Face ForCausalLMLoss); the logits item holds the fp32 "
        "log-probabilities and their gradient at the start of backward.",
        "Overhead: CUDA context, caching-allocator reserve/fragmentation"
        + (" and NCCL buffers" if layout.world_size > 1 else "") + ", as measured on an H200.",
        f"Capacity: {hw.gpu.name} total memory as nvidia-smi reports it ({hw.gpu.memory_bytes / GIB:.1f} GiB).",
    ]
    if t.method != "full":
        out.append(f"{t.method.upper()}: rank {t.lora_rank} adapters on {t.lora_targets} projections, fp32 "
                   "adapter weights and states; frozen base "
                   + ("in NF4 with double quantization." if t.method == "qlora"
                      else "in fp32." if t.precision == "fp32" else "in bf16."))
        out.append(f"LoRA dropout {t.lora_dropout:g}: "
                   + ("each adapted linear keeps its own dropout output and a 1-byte mask per element for "
                      "backward (peft nn.Dropout per adapter)." if t.lora_dropout > 0 else
                      "no dropout modules (peft's default); set training.lora_dropout (e.g. 0.05) if your "
                      "recipe uses it: each adapted linear then keeps a mask and its own input copy."))
    if layout.tp > 1:
        plan = layout.tp_plan
        given = "" if p.tp_plan is not None else f" (the {p.framework} default; set parallelism.tp_plan to change)"
        out.append(f"Tensor-parallel plan {plan}{given}: "
                   + ("embedding, LM head and logits split over the tp ranks, vocabulary-parallel loss "
                      "(Megatron-LM, torchtitan)." if plan == "vocab-parallel" else
                      "decoder projections split, the input embedding whole on every rank with its gradient "
                      "and optimizer states, the LM head's output gathered and the loss on the full logits "
                      "(Hugging Face transformers tp_plan=\"auto\", accelerate, DeepSpeed AutoTP)."))
    if p.framework == "pytorch" and layout.sharding in ("none", "zero1") and layout.dp * layout.cp > 1:
        out.append("PyTorch DDP keeps its gradient buckets next to the gradients (gradient_as_bucket_view=False, "
                   "the default): one more gradient copy.")
    return out


def _way_out(ways_out: list[Suggestion]) -> str:
    if not ways_out:
        return "No single change among checkpointing, sharding, offload, LoRA/QLoRA or more nodes makes it fit."
    best = ways_out[0]
    verdict = "fits" if best.fits else "still does not fit"
    return f"{best.summary}: {best.total_bytes / GIB:.1f} GiB per GPU, {verdict} (see suggestions)."


def warnings_for(req: EstimateRequest, shape: ModelShape, layout: Layout, hw: Any, memory: MemoryResult,
                 ways_out: list[Suggestion] | None = None) -> list[str]:
    out: list[str] = []
    if not memory.fits:
        need = (memory.total_bytes - memory.capacity_bytes) / GIB
        out.append(f"Does not fit: {need:.1f} GiB over the {memory.capacity_bytes / GIB:.1f} GiB of one "
                   f"{hw.gpu.name}. {_way_out(ways_out or [])}")
    elif memory.headroom_bytes < memory.total_bytes * memory.error_bar_pct / 100:
        out.append("Fits, but the headroom is within the error bar: it may run out of memory.")
    if layout.tp > layout.gpus_per_node:
        out.append("Tensor parallelism spans nodes: its all-reduces run over the network and will be slow.")
    if req.training.attention == "eager" and req.training.seq_len >= 4096:
        out.append("Eager attention stores the seq_len x seq_len score matrix; use flash/SDPA attention.")
    if layout.sharding == "none" and layout.dp > 1 and shape.total_params() > 3e9:
        out.append("Plain DDP replicates all model states on every GPU; ZeRO/FSDP sharding saves memory.")
    return out
