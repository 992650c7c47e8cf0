"""Assumptions and warnings in plain words, for people reading an estimate."""

from __future__ import annotations

from typing import Any, Final

from estimator.job import Job, ParallelismView, TrainingView
from estimator.memo import ObjectMemo
from estimator.messages import N_, Num, Text
from estimator.model.spec import ModelShape
from estimator.response import MemoryResult, Suggestion
from estimator.training.comm import scale_up_gpus
from estimator.training.layout import Layout

__all__ = ["assumptions_for", "warnings_for"]

GIB: Final = 1 << 30

_PRECISION: Final = {
    "bf16-mixed": N_("fp32 trainable parameters, gradients and optimizer states; bf16 compute (autocast / FSDP "
                     "MixedPrecisionPolicy)"),
    "bf16-true": N_("parameters, gradients and optimizer states all in bf16"),
    "fp32": N_("everything in fp32 (TF32 matmuls)"),
    "fp8-mixed": N_("as bf16-mixed, plus fp8 weight copies for the fp8 GEMMs (Transformer Engine)"),
}


def _layout_line(layout: Layout, framework: str) -> Text:
    common = dict(world=layout.world_size, dp=layout.dp, tp=layout.tp, pp=layout.pp, cp=layout.cp,
                  sharding=layout.sharding, group=layout.shard_group, framework=framework)
    if layout.ep > 1:
        return Text("Layout: %(world)s GPU(s) = dp %(dp)s x tp %(tp)s x pp %(pp)s x cp %(cp)s; sharding "
                    "%(sharding)s over %(group)s rank(s) (routed experts: split over ep %(ep)s, sharded over "
                    "%(egroup)s); framework %(framework)s.", ep=layout.ep, egroup=layout.expert_shard_group,
                    **common)
    return Text("Layout: %(world)s GPU(s) = dp %(dp)s x tp %(tp)s x pp %(pp)s x cp %(cp)s; sharding %(sharding)s "
                "over %(group)s rank(s); framework %(framework)s.", **common)


def _adapter_lines(t: TrainingView) -> list[str]:
    base = (Text("in NF4 with double quantization.") if t.method == "qlora"
            else Text("in fp32.") if t.precision == "fp32" else Text("in bf16."))
    adapters = Text("%(method)s: rank %(rank)s adapters on %(targets)s projections, fp32 adapter weights and "
                    "states; frozen base %(base)s", method=t.method.upper(), rank=t.lora_rank,
                    targets=t.lora_targets, base=base)
    if t.lora_dropout > 0:
        dropout = Text("LoRA dropout %(p)s: each adapted linear keeps its own dropout output and a 1-byte mask per "
                       "element for backward (peft nn.Dropout per adapter).", p=Num(t.lora_dropout, "g"))
    else:
        dropout = Text("LoRA dropout %(p)s: no dropout modules (peft's default); set training.lora_dropout (e.g. "
                       "0.05) if your recipe uses it: each adapted linear then keeps a mask and its own input "
                       "copy.", p=Num(t.lora_dropout, "g"))
    return [adapters, dropout]


def _tp_line(layout: Layout, p: ParallelismView) -> Text:
    plan = layout.tp_plan
    how = (Text("embedding, LM head and logits split over the tp ranks, vocabulary-parallel loss (Megatron-LM, "
                "torchtitan).") if plan == "vocab-parallel" else
           Text("decoder projections split, the input embedding whole on every rank with its gradient and "
                "optimizer states, the LM head's output gathered and the loss on the full logits (Hugging Face "
                "transformers tp_plan=\"auto\", accelerate, DeepSpeed AutoTP)."))
    if p.tp_plan is not None:
        return Text("Tensor-parallel plan %(plan)s: %(how)s", plan=plan, how=how)
    return Text("Tensor-parallel plan %(plan)s (the %(framework)s default; set parallelism.tp_plan to change): "
                "%(how)s", plan=plan, framework=p.framework, how=how)


_ASSUMPTIONS: Final[ObjectMemo[tuple[str, ...]]] = ObjectMemo(1024)


def assumptions_for(job: Job, layout: Layout, hw: Any) -> list[str]:
    """How the memory estimate is to be read; memoised on the GPU object and the request fields it reads."""
    t, p = job.training, job.parallelism
    key = (t.precision, t.optimizer, t.optimizer_impl, t.attention, t.activation_checkpointing, t.method,
           t.lora_rank, t.lora_targets, t.lora_dropout, p.framework, p.tp_plan, layout)
    return list(_ASSUMPTIONS.get_or_compute((hw.gpu,), key, lambda: tuple(_assumptions(job, layout, hw))))


def _assumptions(job: Job, layout: Layout, hw: Any) -> list[str]:
    rv = job
    t, p = rv.training, rv.parallelism
    out: list[str] = [
        Text("Precision %(precision)s: %(what)s.", precision=t.precision, what=Text(_PRECISION[t.precision])),
        Text("Optimizer %(optimizer)s (%(impl)s implementation); states appear at the first step, so the peak is "
             "that of the second and later steps.", optimizer=t.optimizer, impl=t.optimizer_impl),
        Text("Attention: %(attention)s; activation checkpointing: %(ckpt)s.", attention=t.attention,
             ckpt=t.activation_checkpointing),
        _layout_line(layout, p.framework),
        Text("The loss upcasts logits to fp32 (Hugging Face ForCausalLMLoss); the logits item holds the fp32 "
             "log-probabilities and their gradient at the start of backward."),
        Text("Overhead: CUDA context, caching-allocator reserve/fragmentation and NCCL buffers, as measured on an "
             "H200.") if layout.world_size > 1 else
        Text("Overhead: CUDA context, caching-allocator reserve/fragmentation, as measured on an H200."),
        Text("Capacity: %(gpu)s total memory as nvidia-smi reports it (%(gib)s GiB).", gpu=hw.gpu.name,
             gib=Num(hw.gpu.memory_bytes / GIB, ".1f")),
    ]
    if t.method != "full":
        out += _adapter_lines(job.training)
    if layout.tp > 1:
        out.append(_tp_line(layout, job.parallelism))
    if p.framework == "pytorch" and layout.sharding in ("none", "zero1") and layout.dp * layout.cp > 1:
        out.append(Text("PyTorch DDP keeps its gradient buckets next to the gradients (gradient_as_bucket_view=False, "
                        "the default): one more gradient copy."))
    return out


def _way_out(ways_out: list[Suggestion]) -> str:
    if not ways_out:
        return Text("No single change among checkpointing, sharding, offload, LoRA/QLoRA or more nodes makes it fit.")
    best = ways_out[0]
    verdict = Text("fits") if best.fits else Text("still does not fit")
    return Text("%(change)s: %(gib)s GiB per GPU, %(verdict)s (see suggestions).", change=best.summary,
                gib=Num(best.total_bytes / GIB, ".1f"), verdict=verdict)


def warnings_for(job: Job, shape: ModelShape, layout: Layout, hw: Any, memory: MemoryResult,
                 ways_out: list[Suggestion] | None = None) -> list[str]:
    rv = job
    out: list[str] = []
    if not memory.fits:
        need = (memory.total_bytes - memory.capacity_bytes) / GIB
        out.append(Text("Does not fit: %(need)s GiB over the %(capacity)s GiB of one %(gpu)s. %(way_out)s",
                        need=Num(need, ".1f"), capacity=Num(memory.capacity_bytes / GIB, ".1f"), gpu=hw.gpu.name,
                        way_out=_way_out(ways_out or [])))
    elif memory.headroom_bytes < memory.total_bytes * memory.error_bar_pct / 100:
        out.append(Text("Fits, but the headroom is within the error bar: it may run out of memory."))
    if layout.tp > scale_up_gpus(getattr(hw, "server", None), layout.gpus_per_node):
        out.append(Text("Tensor parallelism spans nodes: its all-reduces run over the network and will be slow."))
    if rv.training.attention == "eager" and rv.training.seq_len >= 4096:
        out.append(Text("Eager attention stores the seq_len x seq_len score matrix; use flash/SDPA attention."))
    if layout.sharding == "none" and layout.dp > 1 and shape.total_params() > 3e9:
        out.append(Text("Plain DDP replicates all model states on every GPU; ZeRO/FSDP sharding saves memory."))
    return out
