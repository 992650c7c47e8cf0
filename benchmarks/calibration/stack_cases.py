"""Cases for the H100 measurements of issue 33 (fidelity round 3) and issue 29 (fine-tuning stacks).

Run by ``benchmarks/calibration/measure_stacks.py`` (one forked process per case, as ``measure.py``). Each case is a
``cases.make_case`` dict (``request`` valid for today's ``EstimateRequest``, ``hf_arch``, ``hf_extra``, steps) plus:

* ``issue``: 33 or 29; ``holdout``: ``"fit"`` (may be used to fit a model) or ``"held_out"`` (never fitted on,
  only compared); about a third of each issue's cases are held out.
* ``stack``: the mechanism, which today's request cannot express:
  ``loss`` -- ``"hf"`` (transformers' ``ForCausalLMLoss``: full logits, upcast to fp32), ``"trl"`` (TRL 1.16's fused
  LM head: ``trl.trainer.utils.add_fused_lm_head`` / ``trl.kernels.ChunkedLogProbFunction``, 32,768-token tiles, what
  ``SFTTrainer`` always installs), ``"torchtune"`` (torchtune's ``CEWithChunkedOutputLoss`` algorithm: the LM head run
  on 8 sequence chunks, bf16 chunk logits kept, each upcast to fp32 one at a time inside the loss), ``"liger"``
  (Liger's fused linear cross-entropy through ``apply_liger_kernel_to_<family>``), ``"cce"`` (Apple's Cut
  Cross-Entropy ``linear_cross_entropy``);
  ``liger_kernels`` -- Liger's RMSNorm / SwiGLU (GeGLU for Gemma) / RoPE patched in;
  ``offload`` -- ``"none"`` or ``"trl"`` (TRL's ``get_act_offloading_ctx_manager``, the port of torchtune's
  ``OffloadActivations``: every saved tensor >= 1 KiB to pinned host memory on a side stream, the LM head's excepted;
  with checkpointing only the checkpointed layers' inputs and what is outside the layers are saved, so that is
  offloaded);
  ``optimizer`` -- ``"adamw"`` (torch fused), ``"adamw-8bit"`` (bnb, not paged), ``"paged-adamw-8bit"``,
  ``"paged-adamw-32bit"`` (bnb ``PagedAdamW8bit`` / ``PagedAdamW32bit``: states in CUDA managed memory),
  ``"ao-adamw-8bit"``, ``"ao-adamw-4bit"`` (torchao ``AdamW8bit`` / ``AdamW4bit``), ``"muon"`` (``torch.optim.Muon``
  on the 2-D decoder matrices, fused AdamW on the rest: embeddings, LM head, norms, biases);
  ``alloc_conf`` -- ``PYTORCH_CUDA_ALLOC_CONF`` for that case only (``"expandable_segments:True"``).

This module imports nothing outside the standard library and this folder, so that it runs on the device as is.
"""

from __future__ import annotations

import copy
from typing import Any

import cases as C

GPU_H100 = "h100-sxm5-80gb"

# New shapes, from each model's published config.json (Hugging Face). Fields the request cannot express yet
# (parallel residual, partial rotary) are in hf_extra; the modelling of issue 33 reads them from there.
C.MODELS.update({
    "pythia-1.4b": {
        "arch": {"name": "Pythia 1.4B", "source": "EleutherAI/pythia-1.4b config.json", "num_layers": 24,
                 "hidden_size": 2048, "num_attention_heads": 16, "ffn_hidden_size": 8192, "vocab_size": 50304,
                 "tied_embeddings": False, "gated_mlp": False, "norm": "layernorm", "attention_bias": True,
                 "qkv_bias": True, "mlp_bias": True, "fused_projections": True},
        "hf_arch": "gpt_neox",
        "hf_extra": {"rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
                     "hidden_act": "gelu", "layer_norm_eps": 1e-5, "max_position_embeddings": 8192},
    },
    "pythia-2.8b": {
        "arch": {"name": "Pythia 2.8B", "source": "EleutherAI/pythia-2.8b config.json", "num_layers": 32,
                 "hidden_size": 2560, "num_attention_heads": 32, "ffn_hidden_size": 10240, "vocab_size": 50304,
                 "tied_embeddings": False, "gated_mlp": False, "norm": "layernorm", "attention_bias": True,
                 "qkv_bias": True, "mlp_bias": True, "fused_projections": True},
        "hf_arch": "gpt_neox",
        "hf_extra": {"rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
                     "hidden_act": "gelu", "layer_norm_eps": 1e-5, "max_position_embeddings": 8192},
    },
    "pythia-6.9b": {
        "arch": {"name": "Pythia 6.9B", "source": "EleutherAI/pythia-6.9b config.json", "num_layers": 32,
                 "hidden_size": 4096, "num_attention_heads": 32, "ffn_hidden_size": 16384, "vocab_size": 50432,
                 "tied_embeddings": False, "gated_mlp": False, "norm": "layernorm", "attention_bias": True,
                 "qkv_bias": True, "mlp_bias": True, "fused_projections": True},
        "hf_arch": "gpt_neox",
        "hf_extra": {"rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
                     "hidden_act": "gelu", "layer_norm_eps": 1e-5, "max_position_embeddings": 8192},
    },
    "qwen3-30b-a3b": {
        "arch": {"name": "Qwen3 30B-A3B", "source": "Qwen/Qwen3-30B-A3B config.json", "num_layers": 48,
                 "hidden_size": 2048, "num_attention_heads": 32, "num_kv_heads": 4, "head_dim": 128,
                 "ffn_hidden_size": 6144, "moe_ffn_hidden_size": 768, "num_experts": 128,
                 "experts_per_token": 8, "vocab_size": 151936, "tied_embeddings": False, "qk_norm": True},
        "hf_arch": "qwen3_moe",
        "hf_extra": {"rope_theta": 1000000.0, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
                     "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
                     "router_aux_loss_coef": 0.001},
    },
    "qwen2.5-1.5b": {
        "arch": {"name": "Qwen2.5 1.5B", "source": "Qwen/Qwen2.5-1.5B config.json", "num_layers": 28,
                 "hidden_size": 1536, "num_attention_heads": 12, "num_kv_heads": 2, "ffn_hidden_size": 8960,
                 "vocab_size": 151936, "tied_embeddings": True, "qkv_bias": True},
        "hf_arch": "qwen2",
        "hf_extra": {"rope_theta": 1000000.0, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                     "use_sliding_window": False},
    },
    "gemma-2-2b": {
        "arch": {"name": "Gemma 2 2B", "source": "google/gemma-2-2b config.json (logit soft-capping on)",
                 "num_layers": 26, "hidden_size": 2304, "num_attention_heads": 8, "num_kv_heads": 4,
                 "head_dim": 256, "ffn_hidden_size": 9216, "vocab_size": 256000, "tied_embeddings": True,
                 "norms_per_layer": 4, "sliding_window": 4096, "final_logit_softcapping": 30.0,
                 "attn_logit_softcapping": 50.0},
        "hf_arch": "gemma2",
        "hf_extra": {"rope_theta": 10000.0, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
                     "query_pre_attn_scalar": 256, "final_logit_softcapping": 30.0,
                     "attn_logit_softcapping": 50.0, "hidden_activation": "gelu_pytorch_tanh"},
    },
})
C._SHORT.update({"pythia-1.4b": "py1b4", "pythia-2.8b": "py2b8", "pythia-6.9b": "py6b9", "qwen3-30b-a3b": "q3a3b",
                 "qwen2.5-1.5b": "q1b5", "gemma-2-2b": "g2b"})

_DEFAULT_STACK = {"loss": "hf", "liger_kernels": False, "offload": "none", "optimizer": "adamw",
                  "alloc_conf": None}


def sc(model: str, *, issue: int, call: int, holdout: str = "fit", loss: str = "hf", liger: bool = False,
       offload: str = "none", opt: str = "adamw", alloc_conf: str | None = None, tag: str = "",
       **kw: Any) -> dict[str, Any]:
    """A ``cases.make_case`` case on one H100 with a ``stack`` block and the hold-out label (``tag``: a suffix
    that tells a repeat of a case apart, e.g. more timed steps)."""
    case = C.make_case(model, call=call, **kw)
    req = case["request"]
    req["hardware"]["gpu"] = GPU_H100
    stack = dict(_DEFAULT_STACK, loss=loss, liger_kernels=liger, offload=offload, optimizer=opt,
                 alloc_conf=alloc_conf)
    tags = []
    if loss != "hf":
        tags.append(f"loss{loss}")
    if liger:
        tags.append("ligerk")
    if offload != "none":
        tags.append(f"off{offload}")
    if opt != "adamw":
        tags.append(opt)
    if alloc_conf:
        tags.append("expseg")
    if tag:
        tags.append(tag)
    case["id"] = "h100-" + case["id"] + ("-" + "-".join(tags) if tags else "")
    if opt in ("adamw-8bit",):
        req["training"]["optimizer"] = opt
    case.update(issue=issue, holdout=holdout, stack=stack)
    return case


def _call_a() -> list[dict[str, Any]]:
    """Issue 29 (stacks), most valuable first."""
    s = sc
    i = {"issue": 29, "call": 1}
    ho = {"holdout": "held_out"}
    out = [
        # Loss kernels, Llama 3.2 1B full fine-tune, checkpointing, 4k and 16k tokens.
        s("llama-3.2-1b", ckpt="full", **i),
        s("llama-3.2-1b", ckpt="full", loss="trl", **i),
        s("llama-3.2-1b", ckpt="full", loss="torchtune", **i),
        s("llama-3.2-1b", ckpt="full", loss="liger", liger=True, **i),
        s("llama-3.2-1b", ckpt="full", loss="cce", **i),
        # Optimizers, Llama 3.2 1B bf16-mixed full fine-tune, checkpointing, 2k tokens (states dominate).
        s("llama-3.2-1b", ckpt="full", seq=2048, **i),
        s("llama-3.2-1b", ckpt="full", seq=2048, opt="paged-adamw-8bit", **i),
        s("llama-3.2-1b", ckpt="full", seq=2048, opt="paged-adamw-32bit", **i),
        s("llama-3.2-1b", ckpt="full", seq=2048, opt="ao-adamw-8bit", **i),
        s("llama-3.2-1b", ckpt="full", seq=2048, opt="ao-adamw-4bit", **i),
        s("llama-3.2-1b", ckpt="full", seq=2048, opt="muon", **i),
        s("llama-3.2-1b", ckpt="full", seq=2048, opt="adamw-8bit", **i, **ho),
        # Qwen2.5 1.5B LoRA at 8k (152k vocabulary).
        s("qwen2.5-1.5b", method="lora", ckpt="full", seq=8192, **i),
        s("qwen2.5-1.5b", method="lora", ckpt="full", seq=8192, loss="trl", **i),
        s("qwen2.5-1.5b", method="lora", ckpt="full", seq=8192, loss="torchtune", **i, **ho),
        s("qwen2.5-1.5b", method="lora", ckpt="full", seq=8192, loss="liger", liger=True, **i),
        s("qwen2.5-1.5b", method="lora", ckpt="full", seq=8192, loss="cce", **i, **ho),
        # Activation offloading (TRL / torchtune hooks): with checkpointing (the layer inputs) and without (all).
        s("llama-3.2-1b", ckpt="full", seq=8192, **i),
        s("llama-3.2-1b", ckpt="full", seq=8192, offload="trl", **i),
        s("llama-3.2-1b", ckpt="none", seq=4096, offload="trl", **i),
        s("llama-3.2-1b", ckpt="none", seq=4096, **i),
        # Liger layer kernels alone (no fused loss), no checkpointing: what they save per token.
        s("llama-3.2-1b", ckpt="none", seq=4096, liger=True, **i),
        s("llama-3.1-8b", method="lora", ckpt="none", seq=4096, **i),
        s("llama-3.1-8b", method="lora", ckpt="none", seq=4096, liger=True, **i),
        s("llama-3.1-8b", method="lora", ckpt="none", seq=4096, liger=True, loss="liger", **i, **ho),
        # Gemma 2 2B LoRA (256k vocabulary, soft-capped logits; eager attention for the soft-capped scores).
        s("gemma-2-2b", method="lora", ckpt="full", seq=4096, attention="eager", **i),
        s("gemma-2-2b", method="lora", ckpt="full", seq=4096, attention="eager", loss="trl", **i),
        s("gemma-2-2b", method="lora", ckpt="full", seq=4096, attention="eager", loss="liger", liger=True, **i, **ho),
        s("gemma-2-2b", method="lora", ckpt="full", seq=4096, attention="eager", loss="cce", **i),
        s("gemma-2-2b", method="lora", ckpt="full", seq=4096, attention="eager", loss="torchtune", **i, **ho),
        # Long sequence, Llama 3.2 1B full at 16k.
        s("llama-3.2-1b", ckpt="full", seq=16384, **i, **ho),
        s("llama-3.2-1b", ckpt="full", seq=16384, loss="trl", **i, **ho),
        s("llama-3.2-1b", ckpt="full", seq=16384, loss="liger", liger=True, **i, **ho),
        s("llama-3.2-1b", ckpt="full", seq=16384, loss="cce", **i, **ho),
        s("llama-3.2-1b", ckpt="full", seq=16384, offload="trl", **i, **ho),
        # Mistral 7B LoRA (32k vocabulary: the loss is small) and more optimizers on Qwen2.5 1.5B.
        s("mistral-7b-v0.3", method="lora", ckpt="full", seq=8192, **i, **ho),
        s("mistral-7b-v0.3", method="lora", ckpt="full", seq=8192, loss="liger", liger=True, **i, **ho),
        s("qwen2.5-1.5b", ckpt="full", seq=2048, **i, **ho),
        s("qwen2.5-1.5b", ckpt="full", seq=2048, opt="paged-adamw-8bit", **i, **ho),
        s("qwen2.5-1.5b", ckpt="full", seq=2048, opt="ao-adamw-8bit", **i, **ho),
        s("qwen2.5-1.5b", ckpt="full", seq=2048, opt="muon", **i, **ho),
    ]
    return out


def _call_b() -> list[dict[str, Any]]:
    """Issue 33 (fidelity round 3), most valuable first."""
    s = sc
    i = {"issue": 33, "call": 2}
    ho = {"holdout": "held_out"}
    out = [
        # (1) GPT-NeoX blocks: LoRA without / with checkpointing at two sequence lengths.
        s("pythia-1.4b", method="lora", ckpt="none", seq=2048, mbs=2, probe=True, **i),
        s("pythia-1.4b", method="lora", ckpt="full", seq=2048, mbs=2, **i),
        s("pythia-1.4b", method="lora", ckpt="none", seq=4096, mbs=2, **i, **ho),
        s("pythia-1.4b", method="lora", ckpt="full", seq=4096, mbs=2, **i),
        s("pythia-2.8b", method="lora", ckpt="none", seq=2048, mbs=2, **i),
        s("pythia-2.8b", method="lora", ckpt="full", seq=2048, mbs=2, **i, **ho),
        s("pythia-6.9b", method="lora", ckpt="none", seq=2048, mbs=2, **i, **ho),
        s("pythia-6.9b", method="lora", ckpt="full", seq=4096, mbs=2, **i),
        s("pythia-1.4b", ckpt="full", seq=2048, mbs=2, **i),
        # (5) fragmentation at the edge: Llama 3.1 8B LoRA, checkpointing, 16k / 32k, with/without expandable segs.
        s("llama-3.1-8b", method="lora", ckpt="full", seq=32768, steps=3, timed_steps=1, **i),
        s("llama-3.1-8b", method="lora", ckpt="full", seq=32768, steps=3, timed_steps=1,
          alloc_conf="expandable_segments:True", **i),
        s("llama-3.1-8b", method="lora", ckpt="full", seq=16384, steps=3, timed_steps=2, **i, **ho),
        s("llama-3.1-8b", method="lora", ckpt="full", seq=16384, steps=3, timed_steps=2,
          alloc_conf="expandable_segments:True", **i, **ho),
        # (3) H100 step time: bf16 full fine-tune, fused AdamW, checkpointing; Llama-style LoRA.
        s("llama-3.2-1b", ckpt="full", seq=4096, mbs=4, **i),
        s("llama-3.2-3b", ckpt="full", seq=4096, mbs=2, **i),
        s("qwen2.5-1.5b", ckpt="full", seq=4096, mbs=4, **i, **ho),
        s("llama-3.1-8b", method="lora", ckpt="full", seq=4096, mbs=2, **i),
        s("qwen2.5-7b", method="lora", ckpt="full", seq=4096, mbs=2, **i, **ho),
        s("llama-3.2-3b", precision="bf16-true", ckpt="full", seq=4096, mbs=2, **i, **ho),
        # (2) Qwen3-MoE LoRA on q/k/v/o, FSDP2 on the fake process group at W=8.
        s("qwen3-30b-a3b", method="lora", targets="attention", ckpt="full", seq=4096, world=8, steps=3,
          timed_steps=1, **i),
        s("qwen3-30b-a3b", method="lora", targets="attention", ckpt="full", seq=8192, world=8, steps=3,
          timed_steps=1, **i, **ho),
        s("qwen3-30b-a3b", method="lora", targets="attention", ckpt="none", seq=2048, world=8, steps=3,
          timed_steps=1, **i),
    ]
    return out


def _call_c() -> list[dict[str, Any]]:
    """Issue 29, third session: the mechanisms under FSDP2 on the fake process group at W = 8 (rank 0 on this GPU,
    memory only), and single-GPU held-out cases for the chunked losses and torchao's 4-bit AdamW."""
    s = sc
    i = {"issue": 29, "call": 3}
    ho = {"holdout": "held_out"}
    f8 = {"ckpt": "full", "seq": 4096, "world": 8, "steps": 3, "timed_steps": 1}
    out = [
        s("llama-3.1-8b", **f8, **i),
        s("llama-3.1-8b", **f8, loss="trl", **i),
        s("llama-3.1-8b", **f8, loss="torchtune", **i),
        s("llama-3.1-8b", **f8, loss="liger", liger=True, **i),
        s("llama-3.1-8b", **f8, offload="trl", **i),
        s("llama-3.1-8b", **f8, opt="muon", **i),
        s("llama-3.1-8b", **f8, liger=True, **i, **ho),
        s("llama-3.1-8b", **f8, opt="ao-adamw-8bit", **i, **ho),
        s("llama-3.1-8b", **f8, opt="paged-adamw-8bit", **i, **ho),
        s("mistral-7b-v0.3", **f8, loss="torchtune", **i, **ho),
        s("llama-3.1-8b", method="lora", ckpt="full", seq=8192, world=8, steps=3, timed_steps=1, loss="trl",
          **i, **ho),
        s("llama-3.1-8b", method="lora", ckpt="full", seq=8192, loss="trl", **i, **ho),
        s("qwen2.5-7b", method="lora", ckpt="full", seq=8192, loss="torchtune", **i, **ho),
        s("qwen2.5-1.5b", ckpt="full", seq=2048, opt="ao-adamw-4bit", **i, **ho),
        # torchtune's own stack on Gemma 2: its chunked loss caps no logit (Gemma2FinalNorm caps the hidden state)
        dict(s("gemma-2-2b", method="lora", ckpt="full", seq=4096, attention="eager", loss="torchtune", **i, **ho),
             torchtune_stack=True),
    ]
    for c in out:
        if c.pop("torchtune_stack", False):
            c["id"] += "-ttstack"
            c["stack"]["logit_softcap"] = False
            c["request_stack"] = "torchtune"
    return out


def _call_d() -> list[dict[str, Any]]:
    """Issue 29, fourth session: the two step-time misses, each with new held-out cases. Muon under FSDP2 (fake
    process group): the W = 8 Llama 3.1 8B case again with three timed steps (its first measurement timed one step
    of three, which moved 1.72 -> 1.28 s between steps 2 and 3), two new families and W = 4, all held out from the
    constants, which come from the kernel micro-benchmarks (``measure_optimizer_kernels.py``). bitsandbytes' 8-bit
    AdamW on three more models, LoRA among them (many small tensors: its per-tensor host path)."""
    s = sc
    i = {"issue": 29, "call": 8}
    ho = {"holdout": "held_out"}
    f8 = {"ckpt": "full", "seq": 4096, "world": 8, "steps": 6, "timed_steps": 3}
    return [
        s("llama-3.1-8b", **f8, opt="muon", tag="t3", **i),
        s("llama-3.2-3b", **f8, opt="muon", **i, **ho),
        s("mistral-7b-v0.3", **f8, opt="muon", **i, **ho),
        s("llama-3.1-8b", **dict(f8, world=4), opt="muon", **i, **ho),
        s("qwen2.5-1.5b", ckpt="full", seq=2048, opt="adamw-8bit", **i, **ho),
        s("llama-3.2-3b", ckpt="full", seq=2048, opt="adamw-8bit", **i, **ho),
        s("mistral-7b-v0.3", method="lora", ckpt="full", seq=4096, opt="adamw-8bit", **i, **ho),
        s("llama-3.2-3b", ckpt="full", seq=2048, opt="paged-adamw-8bit", **i, **ho),
    ]


def _call_e() -> list[dict[str, Any]]:
    """Issue 29, fourth session, after the Muon model by mechanism: held-out cases whose estimates were written
    before they ran (commit message): Muon on LoRA adapters (the small matrices: the host's part binds), on one GPU
    and under FSDP2 at W = 8, and a fourth family under FSDP2 (Qwen2.5 7B: q/k/v biases, 28 layers)."""
    s = sc
    i = {"issue": 29, "call": 11}
    ho = {"holdout": "held_out"}
    f8 = {"ckpt": "full", "seq": 4096, "world": 8, "steps": 6, "timed_steps": 3}
    return [
        s("llama-3.1-8b", method="lora", **f8, opt="muon", **i, **ho),
        s("llama-3.1-8b", method="lora", ckpt="full", seq=4096, steps=6, timed_steps=3, opt="muon", **i, **ho),
        s("qwen2.5-7b", **f8, opt="muon", **i, **ho),
    ]


#: Cases repeated when the device is an H200 (issue 33: "H100 and H200 where both are lent"): one or more of each
#: class of issue 33 and of issue 29's mechanisms; ``measure_stacks.py --relabel-device`` renames them ``h200-...``.
H200_REPEATS = [
    "h100-py1b4-lora16al-fused-b2-s2048-nock", "h100-py1b4-lora16al-fused-b2-s2048-ck",
    "h100-py2b8-lora16al-fused-b2-s2048-nock", "h100-py6b9-lora16al-fused-b2-s4096-ck",
    "h100-py1b4-full-mixed-fused-b2-s2048-ck",
    "h100-q3a3b-lora16at-fused-b1-s4096-ck-fsdp8",
    "h100-l1b-full-mixed-fused-b1-s2048-ck-paged-adamw-8bit", "h100-l1b-full-mixed-fused-b1-s2048-ck-paged-adamw-32bit",
    "h100-l1b-full-mixed-fused-b1-s2048-ck", "h100-l1b-full-mixed-fused-b1-s8192-ck-offtrl",
    "h100-l1b-full-mixed-fused-b1-s4096-ck", "h100-l1b-full-mixed-fused-b1-s4096-ck-losstrl",
    "h100-l1b-full-mixed-fused-b1-s4096-ck-lossliger-ligerk", "h100-l1b-full-mixed-fused-b1-s4096-ck-losscce",
    "h100-l1b-full-mixed-fused-b1-s4096-ck-losstorchtune", "h100-l1b-full-mixed-fused-b1-s2048-ck-muon",
    "h100-l1b-full-mixed-fused-b4-s4096-ck", "h100-l8b-lora16al-fused-b2-s4096-ck",
    "h100-l8b-lora16al-fused-b1-s32768-ck", "h100-l8b-lora16al-fused-b1-s32768-ck-expseg",
]


# The first device call runs the most valuable cases of both issues (in this order); the second the rest.
FIRST = [
    "h100-py1b4-lora16al-fused-b2-s2048-nock", "h100-py1b4-lora16al-fused-b2-s2048-ck",
    "h100-l1b-full-mixed-fused-b1-s4096-ck", "h100-l1b-full-mixed-fused-b1-s4096-ck-losstrl",
    "h100-l1b-full-mixed-fused-b1-s4096-ck-losstorchtune", "h100-l1b-full-mixed-fused-b1-s4096-ck-lossliger-ligerk",
    "h100-l1b-full-mixed-fused-b1-s4096-ck-losscce",
    "h100-l1b-full-mixed-fused-b1-s2048-ck", "h100-l1b-full-mixed-fused-b1-s2048-ck-paged-adamw-8bit",
    "h100-l1b-full-mixed-fused-b1-s2048-ck-paged-adamw-32bit", "h100-l1b-full-mixed-fused-b1-s2048-ck-muon",
    "h100-l1b-full-mixed-fused-b1-s8192-ck", "h100-l1b-full-mixed-fused-b1-s8192-ck-offtrl",
    "h100-l1b-full-mixed-fused-b1-s4096-nock", "h100-l1b-full-mixed-fused-b1-s4096-nock-ligerk",
    "h100-l8b-lora16al-fused-b1-s32768-ck", "h100-l8b-lora16al-fused-b1-s32768-ck-expseg",
    "h100-py1b4-lora16al-fused-b2-s4096-nock", "h100-py2b8-lora16al-fused-b2-s2048-nock",
    "h100-py6b9-lora16al-fused-b2-s4096-ck",
    "h100-l1b-full-mixed-fused-b4-s4096-ck", "h100-l3b-full-mixed-fused-b2-s4096-ck",
    "h100-l8b-lora16al-fused-b2-s4096-ck", "h100-py1b4-full-mixed-fused-b2-s2048-ck",
    "h100-q1b5-lora16al-fused-b1-s8192-ck", "h100-q1b5-lora16al-fused-b1-s8192-ck-losstrl",
    "h100-q1b5-lora16al-fused-b1-s8192-ck-lossliger-ligerk", "h100-q1b5-lora16al-fused-b1-s8192-ck-losscce",
    "h100-q3a3b-lora16at-fused-b1-s4096-ck-fsdp8",
    "h100-l1b-full-mixed-fused-b1-s2048-ck-ao-adamw-8bit", "h100-l1b-full-mixed-fused-b1-s2048-ck-ao-adamw-4bit",
]


def _ordered() -> list[dict[str, Any]]:
    every = {c["id"]: c for c in _call_a() + _call_b()}
    first = [dict(every[i], call=1) for i in FIRST]
    rest = [dict(c, call=2) for i, c in every.items() if i not in FIRST]
    return first + rest + _call_c() + _call_d() + _call_e()


STACK_CASES: list[dict[str, Any]] = _ordered()


def by_id(case_id: str) -> dict[str, Any]:
    for c in STACK_CASES:
        if c["id"] == case_id:
            return copy.deepcopy(c)
    raise KeyError(case_id)


GPU_H200 = "h200-sxm-141gb"


def as_h200(case: dict[str, Any]) -> dict[str, Any]:
    """The same case measured on an H200: id ``h200-...``, the request's GPU the H200."""
    c = copy.deepcopy(case)
    c["id"] = "h200-" + c["id"].removeprefix("h100-")
    c["request"]["hardware"]["gpu"] = GPU_H200
    c["repeat_of"] = case["id"]
    return c


if __name__ == "__main__":
    import collections

    ids = [c["id"] for c in STACK_CASES]
    dup = [k for k, v in collections.Counter(ids).items() if v > 1]
    assert not dup, dup
    for c in STACK_CASES:
        print(c["call"], c["issue"], c["holdout"][:4], c["id"])
    n = collections.Counter((c["issue"], c["holdout"]) for c in STACK_CASES)
    print(dict(n), len(STACK_CASES))
