"""Megatron-LM arguments of a plan (names and choices from ``megatron/training/arguments.py``).

Parallel layout: ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
``--num-layers-per-virtual-pipeline-stage`` (interleaved 1F1B), ``--context-parallel-size``,
``--expert-model-parallel-size``, ``--sequence-parallel``, ``--use-distributed-optimizer`` (ZeRO-1) with
``--overlap-grad-reduce`` / ``--overlap-param-gather``. Batch: ``--micro-batch-size`` and
``--global-batch-size`` (Megatron derives the accumulation steps). Recomputation: ``--recompute-granularity
full --recompute-method uniform --recompute-num-layers 1`` or ``--recompute-granularity selective`` (core
attention). The model shape follows the architecture (GQA, SwiGLU, RMSNorm, RoPE, untied embeddings). The loss:
``--cross-entropy-loss-fusion`` when the plan is sized with ``training.loss_kernel`` ``"fused"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from estimator.planner.contract import PlanLayout
    from estimator.request import ModelArch, Training

__all__ = ["megatron_args"]


def _parallel(layout: PlanLayout, arch: ModelArch) -> list[str]:
    args = [f"--tensor-model-parallel-size={layout.tp}", f"--pipeline-model-parallel-size={layout.pp}",
            f"--context-parallel-size={layout.cp}"]
    chunks = layout.pp * layout.virtual_stages
    if layout.pp > 1 and arch.num_layers % chunks:
        # uneven: the embedding and the loss each take a layer's place (estimator.training.pipeline_split, "weighted")
        args += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    if layout.virtual_stages > 1:
        per_stage = max(1, (arch.num_layers + (2 if arch.num_layers % chunks else 0)) // chunks)
        args.append(f"--num-layers-per-virtual-pipeline-stage={per_stage}")
    if layout.ep > 1:
        args.append(f"--expert-model-parallel-size={layout.ep}")
    if layout.sequence_parallel:
        args += ["--sequence-parallel", "--tp-comm-overlap"]  # what the step time assumes (timing.tp_comm_overlap)
    args += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    return args


def _recompute(layout: PlanLayout) -> list[str]:
    if layout.activation_checkpointing == "full":
        return ["--recompute-granularity=full", "--recompute-method=uniform", "--recompute-num-layers=1"]
    if layout.activation_checkpointing == "selective":
        return ["--recompute-granularity=selective"]
    return []


def _model(arch: ModelArch, seq_len: int) -> list[str]:
    heads = arch.num_attention_heads
    kv = arch.num_kv_heads or heads
    args = [f"--num-layers={arch.num_layers}", f"--hidden-size={arch.hidden_size}",
            f"--ffn-hidden-size={arch.ffn_hidden_size}", f"--num-attention-heads={heads}",
            f"--seq-length={seq_len}", f"--max-position-embeddings={max(seq_len, arch.learned_position_embeddings)}"]
    if arch.head_dim and arch.head_dim * heads != arch.hidden_size:
        args.append(f"--kv-channels={arch.head_dim}")
    if kv != heads:
        args += ["--group-query-attention", f"--num-query-groups={kv}"]
    if arch.gated_mlp:
        args.append("--swiglu")
    args.append(f"--normalization={'RMSNorm' if arch.norm == 'rmsnorm' else 'LayerNorm'}")
    args.append("--position-embedding-type=" + ("learned_absolute" if arch.learned_position_embeddings else "rope"))
    if not arch.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not (arch.attention_bias or arch.mlp_bias):
        args.append("--disable-bias-linear")
    if arch.qkv_bias and not arch.attention_bias:
        args.append("--add-qkv-bias")
    if arch.num_experts > 1:
        args += [f"--num-experts={arch.num_experts}", f"--moe-router-topk={arch.experts_per_token}"]
        if arch.moe_ffn_hidden_size:
            args.append(f"--moe-ffn-hidden-size={arch.moe_ffn_hidden_size}")
    return args


def _precision(training: Training) -> list[str]:
    if training.precision == "fp32":
        return []
    args = ["--bf16"]
    if training.precision == "fp8-mixed":
        args.append("--fp8-format=hybrid")
    return args


def megatron_args(layout: PlanLayout, training: Training, arch: ModelArch) -> list[str] | None:
    """Megatron-LM arguments of a Megatron plan; ``None`` for other frameworks."""
    if layout.framework != "megatron":
        return None
    batch = [f"--micro-batch-size={layout.micro_batch_size}", f"--global-batch-size={layout.global_batch_size}"]
    attention = ["--attention-backend=flash"] if training.attention == "flash" else []
    # issue 29: Megatron's fused vocab-parallel cross-entropy is what loss_kernel "fused" sizes (estimator.rules.stacks)
    loss = ["--cross-entropy-loss-fusion"] if training.loss_kernel == "fused" else []
    return (_parallel(layout, arch) + batch + _recompute(layout) + _model(arch, layout.seq_len)
            + _precision(training) + attention + loss)
