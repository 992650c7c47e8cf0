"""Calibration cases measured on one NVIDIA H200 (see docs/calibration-method.md).

Each case is a dict:

* ``id``: unique name.
* ``request``: a JSON dict valid for ``estimator.request.EstimateRequest`` describing exactly what ran
  (full ``ModelArch`` dict, training, parallelism, hardware).
* run-only fields: ``hf_arch`` (which Hugging Face class builds the model), ``hf_extra`` (config fields that
  do not change the memory or FLOP count, e.g. rope settings), ``steps`` (memory steps, with a peak-statistics
  reset between phases), ``timed_steps`` (steps timed afterwards without resets), ``world_size_fake``
  (None for a plain single-GPU run; W for an FSDP2 run of rank 0 under PyTorch's fake process group),
  ``call`` (priority tier: 1 first; cases run in list order; a device call runs as many as its deadline
  allows and the next call runs the rest), ``expect`` (what we expected
  beforehand: "fit", "oom" or "edge") and ``note``.

This module imports nothing outside the standard library so that it runs on the device machine as is.
"""

from __future__ import annotations

import copy
from typing import Any

GPU = "h200-sxm-141gb"

# Shapes from each model's published Hugging Face config.json (same numbers as estimator/data/model_presets.yaml).
_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

MODELS: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": {
        "arch": {"name": "Llama 3.2 1B", "source": "meta-llama/Llama-3.2-1B config.json", "num_layers": 16,
                 "hidden_size": 2048, "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 8192,
                 "vocab_size": 128256, "tied_embeddings": True},
        "hf_arch": "llama",
        "hf_extra": {"rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0},
                     "max_position_embeddings": 131072, "rms_norm_eps": 1e-5},
    },
    "llama-3.2-3b": {
        "arch": {"name": "Llama 3.2 3B", "source": "meta-llama/Llama-3.2-3B config.json", "num_layers": 28,
                 "hidden_size": 3072, "num_attention_heads": 24, "num_kv_heads": 8, "ffn_hidden_size": 8192,
                 "vocab_size": 128256, "tied_embeddings": True},
        "hf_arch": "llama",
        "hf_extra": {"rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0},
                     "max_position_embeddings": 131072, "rms_norm_eps": 1e-5},
    },
    "llama-3.1-8b": {
        "arch": {"name": "Llama 3.1 8B", "source": "meta-llama/Llama-3.1-8B config.json", "num_layers": 32,
                 "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336,
                 "vocab_size": 128256, "tied_embeddings": False},
        "hf_arch": "llama",
        "hf_extra": {"rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0},
                     "max_position_embeddings": 131072, "rms_norm_eps": 1e-5},
    },
    "llama-3.1-70b": {
        "arch": {"name": "Llama 3.1 70B", "source": "meta-llama/Llama-3.1-70B config.json", "num_layers": 80,
                 "hidden_size": 8192, "num_attention_heads": 64, "num_kv_heads": 8, "ffn_hidden_size": 28672,
                 "vocab_size": 128256, "tied_embeddings": False},
        "hf_arch": "llama",
        "hf_extra": {"rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0},
                     "max_position_embeddings": 131072, "rms_norm_eps": 1e-5},
    },
    "mistral-7b-v0.3": {
        "arch": {"name": "Mistral 7B v0.3", "source": "mistralai/Mistral-7B-v0.3 config.json (no sliding window)",
                 "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 8,
                 "ffn_hidden_size": 14336, "vocab_size": 32768, "tied_embeddings": False},
        "hf_arch": "mistral",
        "hf_extra": {"rope_theta": 1000000.0, "sliding_window": None, "max_position_embeddings": 32768,
                     "rms_norm_eps": 1e-5},
    },
    "qwen2.5-7b": {
        "arch": {"name": "Qwen2.5 7B", "source": "Qwen/Qwen2.5-7B config.json", "num_layers": 28,
                 "hidden_size": 3584, "num_attention_heads": 28, "num_kv_heads": 4, "ffn_hidden_size": 18944,
                 "vocab_size": 152064, "tied_embeddings": False, "qkv_bias": True},
        "hf_arch": "qwen2",
        "hf_extra": {"rope_theta": 1000000.0, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                     "use_sliding_window": False},
    },
    "qwen2.5-14b": {
        "arch": {"name": "Qwen2.5 14B", "source": "Qwen/Qwen2.5-14B config.json", "num_layers": 48,
                 "hidden_size": 5120, "num_attention_heads": 40, "num_kv_heads": 8, "ffn_hidden_size": 13824,
                 "vocab_size": 152064, "tied_embeddings": False, "qkv_bias": True},
        "hf_arch": "qwen2",
        "hf_extra": {"rope_theta": 1000000.0, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                     "use_sliding_window": False},
    },
    "qwen2.5-32b": {
        "arch": {"name": "Qwen2.5 32B", "source": "Qwen/Qwen2.5-32B config.json", "num_layers": 64,
                 "hidden_size": 5120, "num_attention_heads": 40, "num_kv_heads": 8, "ffn_hidden_size": 27648,
                 "vocab_size": 152064, "tied_embeddings": False, "qkv_bias": True},
        "hf_arch": "qwen2",
        "hf_extra": {"rope_theta": 1000000.0, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                     "use_sliding_window": False},
    },
    "gemma-2-9b": {
        "arch": {"name": "Gemma 2 9B", "source": "google/gemma-2-9b config.json (logit soft-capping on)",
                 "num_layers": 42, "hidden_size": 3584, "num_attention_heads": 16, "num_kv_heads": 8,
                 "head_dim": 256, "ffn_hidden_size": 14336, "vocab_size": 256000, "tied_embeddings": True,
                 "norms_per_layer": 4, "sliding_window": 4096, "final_logit_softcapping": 30.0,
                 "attn_logit_softcapping": 50.0},
        "hf_arch": "gemma2",
        "hf_extra": {"rope_theta": 10000.0, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
                     "query_pre_attn_scalar": 256, "final_logit_softcapping": 30.0,
                     "attn_logit_softcapping": 50.0, "hidden_activation": "gelu_pytorch_tanh"},
    },
    "llama-2-7b": {
        "arch": {"name": "Llama 2 7B", "source": "meta-llama/Llama-2-7b-hf config.json", "num_layers": 32,
                 "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 32, "ffn_hidden_size": 11008,
                 "vocab_size": 32000, "tied_embeddings": False},
        "hf_arch": "llama",
        "hf_extra": {"rope_theta": 10000.0, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5},
    },
    "llama-2-13b": {
        "arch": {"name": "Llama 2 13B", "source": "meta-llama/Llama-2-13b-hf config.json", "num_layers": 40,
                 "hidden_size": 5120, "num_attention_heads": 40, "num_kv_heads": 40, "ffn_hidden_size": 13824,
                 "vocab_size": 32000, "tied_embeddings": False},
        "hf_arch": "llama",
        "hf_extra": {"rope_theta": 10000.0, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5},
    },
    "mixtral-8x7b": {
        "arch": {"name": "Mixtral 8x7B", "source": "mistralai/Mixtral-8x7B-v0.1 config.json", "num_layers": 32,
                 "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336,
                 "vocab_size": 32000, "tied_embeddings": False, "num_experts": 8, "experts_per_token": 2},
        "hf_arch": "mixtral",
        "hf_extra": {"rope_theta": 1000000.0, "sliding_window": None, "max_position_embeddings": 32768,
                     "rms_norm_eps": 1e-5},
    },
}

# Short model keys used in case ids.
_SHORT = {"llama-3.2-1b": "l1b", "llama-3.2-3b": "l3b", "llama-3.1-8b": "l8b", "llama-3.1-70b": "l70b",
          "mistral-7b-v0.3": "m7b", "qwen2.5-7b": "q7b", "qwen2.5-14b": "q14b", "qwen2.5-32b": "q32b",
          "gemma-2-9b": "g9b", "mixtral-8x7b": "mx8x7b", "llama-2-7b": "l2x7b", "llama-2-13b": "l2x13b"}

_PREC = {"bf16-mixed": "mixed", "bf16-true": "true"}
_CKPT = {"none": "nock", "full": "ck"}


_OPT_TAG = {"adamw-8bit": "adamw8bit", "sgd": "sgd", "adafactor": "adafactor"}


def make_case(model: str, *, method: str = "full", precision: str = "bf16-mixed", impl: str = "fused",
              mbs: int = 1, seq: int = 4096, ckpt: str = "none", rank: int = 16, targets: str = "all-linear",
              world: int | None = None, call: int = 1, expect: str = "fit", note: str = "",
              steps: int | None = None, timed_steps: int | None = None, optimizer: str = "adamw",
              attention: str = "sdpa", wrap: str | None = None, bucket_view: bool = False,
              reshard_after_forward: bool = True, qlora_prep: str = "none", lora_dropout: float = 0.0,
              input_require_grads: bool = False, probe: bool = False) -> dict[str, Any]:
    """One case. ``wrap`` (with ``world``): "fsdp2" (default; ``reshard_after_forward=False`` is shard-grad-op,
    request sharding "zero2") or "ddp" (DistributedDataParallel over the fake group, request sharding "none"
    with 1 x W GPUs; ``bucket_view`` is its ``gradient_as_bucket_view``). ``qlora_prep`` "kbit" runs PEFT's
    ``prepare_model_for_kbit_training`` (non-quantised parameters cast to fp32), which the request cannot say."""
    spec = MODELS[model]
    training: dict[str, Any] = {
        "method": method, "precision": precision, "optimizer": optimizer, "optimizer_impl": impl,
        "micro_batch_size": mbs, "seq_len": seq, "gradient_accumulation_steps": 1,
        "activation_checkpointing": ckpt, "attention": attention,
    }
    if method in ("lora", "qlora"):
        training["lora_rank"] = rank
        training["lora_targets"] = targets
        if lora_dropout:
            training["lora_dropout"] = lora_dropout
    if world is not None and wrap is None:
        wrap = "fsdp2"
    if world is None:
        parallelism = {"sharding": "none", "framework": "pytorch"}
        hardware = {"gpu": GPU, "num_nodes": 1, "gpus_per_node": 1}
    else:
        sharding = "none" if wrap == "ddp" else ("fsdp" if reshard_after_forward else "zero2")
        parallelism = {"sharding": sharding, "framework": "pytorch"}
        hardware = {"gpu": GPU, "num_nodes": max(1, world // 8), "gpus_per_node": min(8, world)}
    tag = "al" if targets == "all-linear" else "at"
    parts = [_SHORT[model], method if method == "full" else f"{method}{rank}{tag}"]
    if method == "full" or precision != "bf16-mixed":
        parts.append(_PREC[precision])
    if lora_dropout:
        parts.append(f"d{round(100 * lora_dropout):02d}")
    if input_require_grads:
        parts.append("irg")
    if optimizer != "adamw":
        parts.append(_OPT_TAG[optimizer])
    if attention != "sdpa":
        parts.append(attention)
    parts += [impl, f"b{mbs}", f"s{seq}", _CKPT[ckpt]]
    if world is not None:
        if wrap == "ddp":
            parts.append(f"ddp{world}" + ("bv" if bucket_view else ""))
        else:
            parts.append(f"fsdp{world}" + ("" if reshard_after_forward else "sgo"))
    if qlora_prep != "none":
        parts.append(f"{qlora_prep}prep")
    tokens = mbs * seq
    big = tokens >= 16384 or model in ("llama-3.1-70b", "qwen2.5-32b", "mixtral-8x7b", "qwen2.5-14b")
    if steps is None:
        steps = 3 if big else 4
    if timed_steps is None:
        timed_steps = 2 if big else 3
    extra: dict[str, Any] = {}
    if wrap == "ddp":
        extra.update(wrap="ddp", ddp_gradient_as_bucket_view=bucket_view)
    elif wrap == "fsdp2" and not reshard_after_forward:
        extra.update(wrap="fsdp2", fsdp_reshard_after_forward=False)
    if qlora_prep != "none":
        extra["qlora_prep"] = qlora_prep
    if input_require_grads:
        extra["input_require_grads"] = True
    if probe:
        extra["probe_saved"] = True
    return {
        "id": "-".join(parts),
        "request": {
            "model": copy.deepcopy(spec["arch"]),
            "training": training,
            "parallelism": parallelism,
            "hardware": hardware,
        },
        "hf_arch": spec["hf_arch"],
        "hf_extra": copy.deepcopy(spec["hf_extra"]),
        "model_key": model,
        "steps": steps,
        "timed_steps": timed_steps,
        "world_size_fake": world,
        "call": call,
        "expect": expect,
        "note": note,
        **extra,
    }


def _cases() -> list[dict[str, Any]]:
    c = make_case
    out = [
        # ---------------- tier 1: the core full fine-tune / LoRA / OOM set ----------------
        # Llama 3.2 1B: precision x optimizer implementation at one shape.
        c("llama-3.2-1b", precision="bf16-mixed", impl="fused", call=1),
        c("llama-3.2-1b", precision="bf16-mixed", impl="foreach", call=1),
        c("llama-3.2-1b", precision="bf16-true", impl="fused", call=1),
        c("llama-3.2-1b", precision="bf16-true", impl="foreach", call=1),
        # Llama 3.1 8B: the single-GPU edge of full fine-tuning.
        c("llama-3.1-8b", precision="bf16-mixed", impl="fused", ckpt="full", call=1, expect="edge",
          note="16 B/param = 120 GiB of states before activations"),
        c("llama-3.1-8b", precision="bf16-mixed", impl="foreach", ckpt="full", call=1, expect="oom",
          note="foreach AdamW needs a state-sized temporary at step()"),
        c("llama-3.1-8b", precision="bf16-mixed", impl="fused", ckpt="none", call=1, expect="oom"),
        c("llama-3.1-8b", precision="bf16-mixed", impl="fused", mbs=8, seq=8192, ckpt="none", call=1,
          expect="oom", note="deliberate OOM in forward"),
        c("llama-3.1-8b", precision="bf16-true", impl="fused", ckpt="none", call=1),
        c("llama-3.1-8b", precision="bf16-true", impl="foreach", ckpt="none", call=1),
        c("llama-3.1-8b", precision="bf16-true", impl="fused", ckpt="full", call=1),
        c("llama-3.1-8b", method="lora", rank=16, targets="all-linear", ckpt="none", call=1),
        c("llama-3.1-8b", method="lora", rank=16, targets="all-linear", ckpt="full", call=1),
        c("llama-3.1-8b", method="lora", rank=64, targets="attention", ckpt="none", call=1),
        # Sharded (FSDP2, fake process group): per-rank memory.
        c("llama-3.1-8b", world=8, ckpt="none", call=1),
        c("llama-3.1-8b", world=8, ckpt="full", call=1),
        c("llama-3.1-70b", world=32, ckpt="full", call=1),
        c("llama-3.1-70b", world=64, ckpt="full", call=1),
        c("llama-3.1-70b", world=64, ckpt="none", call=1, expect="oom", note="deliberate OOM in forward"),
        c("llama-3.1-70b", method="lora", rank=16, targets="all-linear", world=8, ckpt="full", call=1),
        # Qwen2.5 14B full fine-tune bf16-mixed does not fit one GPU (deliberate OOM); bf16-true is the edge.
        c("qwen2.5-14b", precision="bf16-mixed", impl="fused", seq=2048, ckpt="full", call=1, expect="oom",
          note="deliberate OOM: 14.8B x 16 B"),
        c("qwen2.5-14b", precision="bf16-true", impl="fused", ckpt="full", call=1, expect="edge"),
        # Qwen2.5 7B (qkv bias, 152k vocabulary).
        c("qwen2.5-7b", precision="bf16-mixed", impl="fused", ckpt="full", call=1, expect="edge"),
        c("qwen2.5-7b", precision="bf16-true", impl="fused", ckpt="none", call=1),
        c("qwen2.5-7b", method="lora", rank=16, targets="all-linear", mbs=2, ckpt="none", call=1),
        # Llama 3.2 3B.
        c("llama-3.2-3b", precision="bf16-mixed", impl="fused", call=1),
        c("llama-3.2-3b", precision="bf16-mixed", impl="foreach", call=1),
        c("llama-3.2-3b", precision="bf16-true", impl="fused", call=1),
        c("llama-3.2-3b", precision="bf16-mixed", impl="fused", mbs=2, ckpt="full", call=1),
        # Qwen2.5 32B LoRA on one GPU (bf16 base = 61 GiB).
        c("qwen2.5-32b", method="lora", rank=16, targets="all-linear", ckpt="full", call=1),
        # ---------------- tier 2: sweeps for the step-time model and more shapes ----------------
        # Llama 3.2 1B: batch and sequence sweeps, checkpointing on/off.
        c("llama-3.2-1b", seq=1024, call=2),
        c("llama-3.2-1b", mbs=2, call=2),
        c("llama-3.2-1b", mbs=4, call=2),
        c("llama-3.2-1b", mbs=4, ckpt="full", call=2),
        c("llama-3.2-1b", mbs=8, ckpt="full", call=2),
        c("llama-3.2-1b", mbs=8, ckpt="none", call=2, expect="edge", note="logits 8x4096x128256"),
        c("llama-3.2-1b", seq=16384, call=2),
        c("llama-3.2-1b", seq=16384, ckpt="full", call=2),
        c("llama-3.2-1b", method="lora", rank=16, targets="all-linear", mbs=4, call=2),
        # Llama 3.2 3B sweeps.
        c("llama-3.2-3b", seq=1024, call=2),
        c("llama-3.2-3b", mbs=4, ckpt="full", call=2),
        c("llama-3.2-3b", seq=16384, ckpt="full", call=2),
        c("llama-3.2-3b", method="lora", rank=64, targets="all-linear", mbs=2, call=2),
        # Llama 3.1 8B sweeps (bf16-true leaves room for activations).
        c("llama-3.1-8b", precision="bf16-true", seq=1024, call=2),
        c("llama-3.1-8b", precision="bf16-true", mbs=2, ckpt="full", call=2),
        c("llama-3.1-8b", precision="bf16-true", mbs=4, ckpt="full", call=2),
        c("llama-3.1-8b", precision="bf16-true", seq=16384, ckpt="full", call=2),
        c("llama-3.1-8b", method="lora", rank=16, targets="all-linear", mbs=4, seq=8192, ckpt="full", call=2),
        c("llama-3.1-8b", method="lora", rank=16, targets="all-linear", seq=16384, ckpt="none", call=2),
        # Mistral 7B (32k vocabulary).
        c("mistral-7b-v0.3", precision="bf16-true", ckpt="none", call=2),
        c("mistral-7b-v0.3", precision="bf16-mixed", ckpt="full", call=2, expect="edge"),
        c("mistral-7b-v0.3", method="lora", rank=16, targets="all-linear", ckpt="full", call=2),
        # More sharded cases.
        c("llama-3.1-8b", world=16, seq=8192, ckpt="full", call=2),
        c("llama-3.1-70b", world=16, ckpt="full", call=2),
        c("llama-3.1-70b", world=8, ckpt="full", call=2, expect="oom",
          note="141 GB of fp32 params+grads+Adam per rank"),
        c("llama-3.1-70b", world=64, seq=1024, ckpt="none", call=2),
        c("qwen2.5-32b", world=8, ckpt="full", call=2),
        # Larger vocabulary (Gemma 2 9B, 256k, soft-capped logits) and MoE.
        c("gemma-2-9b", method="lora", rank=16, targets="all-linear", ckpt="full", call=2),
        c("gemma-2-9b", precision="bf16-true", ckpt="full", call=2),
        c("qwen2.5-32b", method="lora", rank=64, targets="attention", seq=2048, ckpt="none", call=2),
        c("qwen2.5-32b", precision="bf16-true", seq=2048, ckpt="full", call=2, expect="oom",
          note="deliberate OOM: 32.8B x 8 B"),
        c("mixtral-8x7b", method="lora", rank=16, targets="attention", seq=2048, ckpt="full", call=2),
        # ---------------- tier 3: added after the first device call (gaps in the first set) ----------------
        # More batch/sequence points for the step-time model.
        c("llama-3.2-1b", seq=32768, ckpt="full", call=3),
        c("llama-3.2-1b", seq=65536, ckpt="full", call=3, expect="edge", note="logits 65536x128256 fp32"),
        c("llama-3.2-1b", mbs=16, ckpt="full", call=3),
        c("llama-3.2-3b", mbs=2, call=3),
        c("llama-3.2-3b", mbs=8, ckpt="full", call=3),
        c("llama-3.1-8b", precision="bf16-true", seq=8192, ckpt="full", call=3),
        c("llama-3.1-8b", precision="bf16-true", mbs=8, ckpt="full", call=3),
        c("llama-3.1-8b", method="lora", rank=16, targets="all-linear", mbs=2, ckpt="full", call=3),
        c("llama-3.1-8b", method="lora", rank=16, targets="all-linear", seq=32768, ckpt="full", call=3),
        c("qwen2.5-7b", precision="bf16-true", seq=16384, ckpt="full", call=3),
        c("mistral-7b-v0.3", precision="bf16-true", mbs=4, ckpt="full", call=3),
        # foreach vs fused when sharded; bf16-true when sharded; larger batches when sharded.
        c("llama-3.1-70b", impl="foreach", world=32, ckpt="full", call=3),
        c("llama-3.1-8b", precision="bf16-true", world=8, ckpt="none", call=3),
        c("llama-3.1-8b", world=8, mbs=4, ckpt="full", call=3),
        c("llama-3.1-70b", method="lora", rank=16, targets="all-linear", world=8, seq=2048, ckpt="none", call=3),
        c("qwen2.5-7b", precision="bf16-mixed", impl="foreach", ckpt="full", call=3, expect="oom",
          note="foreach temporary on top of 16 B/param"),
    ]
    out += _call4_cases()
    out += _fid_cases()
    ids = [x["id"] for x in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"duplicate case ids: {sorted(dup)}")
    return out


def _call4_cases() -> list[dict[str, Any]]:
    """Tier 4: kinds never measured before (QLoRA, 8-bit AdamW, DDP, FSDP2 shard-grad-op, eager attention,
    SGD and Adafactor). Three memory steps each; cheap cases first, the 70B QLoRA runs last."""
    def c(model: str, **kw: Any) -> dict[str, Any]:
        kw.setdefault("steps", 3)
        return make_case(model, call=4, **kw)

    q = {"method": "qlora", "rank": 16, "targets": "all-linear"}
    return [
        # 8-bit AdamW (bitsandbytes AdamW8bit, block-wise, not paged), full fine-tune.
        c("llama-3.2-1b", optimizer="adamw-8bit", precision="bf16-mixed"),
        c("llama-3.2-1b", optimizer="adamw-8bit", precision="bf16-true"),
        c("llama-3.2-3b", optimizer="adamw-8bit", precision="bf16-mixed"),
        c("llama-3.2-3b", optimizer="adamw-8bit", precision="bf16-true"),
        # SGD with momentum and Adafactor (transformers.optimization.Adafactor, HF Trainer settings).
        c("llama-3.2-1b", optimizer="sgd", precision="bf16-mixed"),
        c("llama-3.2-1b", optimizer="adafactor", impl="for-loop", precision="bf16-mixed"),
        c("llama-3.2-1b", optimizer="adafactor", impl="for-loop", precision="bf16-true"),
        # Eager attention (the s x s scores are materialised).
        c("llama-3.2-1b", attention="eager", seq=2048, ckpt="none"),
        c("llama-3.2-1b", attention="eager", seq=2048, ckpt="full"),
        c("llama-3.2-1b", attention="eager", seq=4096, ckpt="none", expect="edge",
          note="32 heads x 4096^2 scores per layer, fp32 softmax"),
        c("llama-3.2-1b", attention="eager", seq=4096, ckpt="full"),
        # DDP over the fake process group at W=8 (one rank's memory; reducer buckets are real).
        c("llama-3.2-1b", world=8, wrap="ddp", ckpt="full"),
        c("llama-3.2-1b", world=8, wrap="ddp", ckpt="full", bucket_view=True),
        c("llama-3.2-3b", world=8, wrap="ddp", ckpt="full"),
        # FSDP2 shard-grad-op (reshard_after_forward=False everywhere): ZeRO-2-like.
        c("llama-3.1-8b", world=8, reshard_after_forward=False, ckpt="full"),
        c("llama-3.1-8b", world=8, reshard_after_forward=False, ckpt="none"),
        # QLoRA: NF4 base with double quantisation, bf16 compute, LoRA r=16 on all linears.
        c("llama-3.1-8b", **q, seq=2048, ckpt="full"),
        c("llama-3.1-8b", **q, seq=4096, ckpt="full"),
        c("llama-3.1-8b", **q, seq=2048, ckpt="none"),
        c("llama-3.1-8b", **q, seq=4096, ckpt="none"),
        c("mistral-7b-v0.3", **q, seq=4096, ckpt="full"),
        c("mistral-7b-v0.3", **q, seq=4096, ckpt="none"),
        c("llama-3.1-8b", **q, seq=4096, ckpt="full", qlora_prep="kbit",
          note="PEFT prepare_model_for_kbit_training: embeddings, norms and LM head cast to fp32"),
        c("llama-3.1-70b", **q, seq=2048, ckpt="full"),
        c("llama-3.1-70b", **q, seq=4096, ckpt="full"),
        c("llama-3.1-70b", **q, seq=2048, ckpt="none", expect="edge"),
        c("llama-3.1-70b", **q, seq=4096, ckpt="none", expect="oom", note="deliberate OOM: activations"),
    ]


def _fid_cases() -> list[dict[str, Any]]:
    """Calls 7 and 8 (issue 14, item 1): peft LoRA / QLoRA without activation checkpointing, micro-batch 2,
    lora_dropout 0 and 0.05, with and without ``enable_input_require_grads``, under autocast (bf16-mixed) and
    without it (bf16-true: bf16 base, fp32 adapters). Memory only (no timed steps). ``probe`` cases also record
    what autograd saves per layer (measure.probe_saved). Call 7 is the set the mechanism was checked on;
    call 8 is held out: its estimates were committed (tests/data/calibration_h200_raw/call8_predictions.json)
    before it ran."""
    def c(model: str, call: int, **kw: Any) -> dict[str, Any]:
        kw.setdefault("steps", 3)
        kw.setdefault("timed_steps", 0)
        kw.setdefault("mbs", 2)
        kw.setdefault("method", "lora")
        return make_case(model, call=call, **kw)

    return [
        c("llama-2-7b", 7, probe=True),
        c("llama-2-7b", 7, lora_dropout=0.05, probe=True),
        c("llama-2-7b", 7, lora_dropout=0.05, input_require_grads=True, probe=True),
        c("llama-2-7b", 7, input_require_grads=True, probe=True),
        c("llama-3.1-8b", 7, lora_dropout=0.05, probe=True),
        c("llama-3.1-8b", 7, precision="bf16-true", seq=2048, probe=True),
        c("llama-3.1-8b", 7, precision="bf16-true", seq=2048, lora_dropout=0.05, probe=True),
        # (bitsandbytes was not on the device in call 7: this QLoRA case ran in call 8 with a carried wheel)
        c("llama-3.1-8b", 8, method="qlora", seq=2048, lora_dropout=0.05, probe=True),
        c("llama-3.1-8b", 7, ckpt="full", lora_dropout=0.05),
        # held out (call 8)
        c("llama-2-13b", 8, seq=2048, lora_dropout=0.05),
        c("llama-2-13b", 8, seq=2048, input_require_grads=True),
        c("qwen2.5-7b", 8, lora_dropout=0.05),
        c("mistral-7b-v0.3", 8, lora_dropout=0.05, input_require_grads=True),
        c("qwen2.5-14b", 8, seq=2048, lora_dropout=0.05),
        c("llama-3.1-8b", 8, rank=64, targets="attention", lora_dropout=0.05),
        c("llama-3.1-8b", 8, precision="bf16-true", lora_dropout=0.05),
        c("mistral-7b-v0.3", 8, method="qlora", lora_dropout=0.05),
        c("llama-2-13b", 8, method="qlora", lora_dropout=0.05),
        c("llama-3.1-8b", 8, mbs=3, lora_dropout=0.05, expect="edge",
          note="estimated 126.9 GiB allocated, 138.4 GiB total of 140.4: fits with 2 GiB to spare"),
        c("qwen2.5-14b", 8, lora_dropout=0.05, expect="oom", note="estimated 145.7 GiB allocated: does not fit"),
    ]


CASES: list[dict[str, Any]] = _cases()

# Cases measured a second time, in a later device call, to show run-to-run spread (memory and step time).
REPEAT_IDS: list[str] = [
    "l1b-full-mixed-fused-b1-s4096-nock",
    "l8b-full-mixed-fused-b1-s4096-ck",
    "l8b-full-true-fused-b1-s4096-nock",
    "l8b-lora16al-fused-b1-s4096-ck",
    "q7b-full-true-fused-b1-s4096-nock",
    "l70b-full-mixed-fused-b1-s4096-ck-fsdp32",
]


def by_id(case_id: str) -> dict[str, Any]:
    for x in CASES:
        if x["id"] == case_id:
            return x
    raise KeyError(case_id)


if __name__ == "__main__":  # list the cases; validate the requests where the estimator is importable
    try:
        from estimator.request import EstimateRequest
    except ImportError:  # pragma: no cover - the device machine has no pydantic
        EstimateRequest = None  # type: ignore[assignment,misc]
    for x in CASES:
        if EstimateRequest is not None:
            EstimateRequest.model_validate(x["request"])
        t = x["request"]["training"]
        print(f"{x['call']} {x['id']:60s} {x['expect']:5s} steps={x['steps']}+{x['timed_steps']}")
    print(len(CASES), "cases", "(requests validated)" if EstimateRequest is not None else "")
