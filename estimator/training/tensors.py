"""The parameter tensors one rank holds, one by one, for allocator-level host-memory and checkpoint sizes.

Shapes follow Hugging Face ``modeling_llama.py`` / ``modeling_mixtral.py`` (``nn.Linear`` weights are
``[out_features, in_features]``), split by tensor parallelism as Megatron-LM does (column-parallel q/k/v,
gate and up on dim 0; row-parallel o and down on dim 1; vocab-parallel embedding), by pipeline stages as
``estimator.training.params`` does, and by expert parallelism over the routed experts. FSDP2 then shards each tensor on
dim 0 (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``: ``_chunk_with_empty``; every rank's storage is
padded to the size of chunk 0).

Per-tensor sizes matter on the host because PyTorch's pinned-memory allocator rounds every block up to a
power of two (``aten/src/ATen/core/CachingHostAllocator.h``: ``c10::llvm::PowerOf2Ceil`` unless
``pinned_max_round_threshold`` is set), and because ``torch.save`` adds a record per tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from estimator.job import Job
from estimator.memo import BoundedMemo
from estimator.model.spec import Linear, ModelShape
from estimator.training.layout import Layout
from estimator.training.params import _adapted, lora_params_per_layer  # the adapted set is defined once, there

__all__ = ["Tensor", "local_tensors", "pow2ceil", "stages"]

_COLUMN: Final = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "q_b_proj", "kv_b_proj"}


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor as a rank holds it: ``rows`` is dim 0, ``cols`` the product of the other dims."""

    name: str
    rows: int
    cols: int
    trainable: bool
    count: int = 1  # identical tensors (layers of a stage, experts)

    @property
    def numel(self) -> int:
        return self.rows * self.cols

    def shard_numel(self, shards: int) -> int:
        """Elements of rank 0's FSDP2 shard (dim-0 chunk, padded to the size of chunk 0)."""
        return -(-self.rows // shards) * self.cols if shards > 1 else self.numel


def pow2ceil(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def stages(layout: Layout) -> tuple[str, ...]:
    return ("only",) if layout.pp == 1 else ("first", "last")


def _linear_tensor(lin: Linear, tp: int, trainable: bool, count: int) -> Tensor:
    if lin.name in _COLUMN:
        return Tensor(lin.name, lin.out_features // tp, lin.in_features, trainable, count)
    if lin.name in ("o_proj", "down_proj"):
        return Tensor(lin.name, lin.out_features, lin.in_features // tp, trainable, count)
    return Tensor(lin.name, lin.out_features, lin.in_features, trainable, count)  # replicated (MLA down-proj.)


def _stage_layers(shape: ModelShape, layout: Layout) -> tuple[int, int]:
    per_stage = layout.layers_per_stage
    moe = round(per_stage * shape.moe_layers / shape.dims.num_layers)
    return per_stage - moe, moe


def _layer_tensors(job: Job, shape: ModelShape, layout: Layout, moe: bool, layers: int) -> list[Tensor]:
    a, tp, full = shape.dims, layout.tp, job.training.method == "full"
    out: list[Tensor] = []
    attn = shape.attention_linears()
    for lin in attn:
        out.append(_linear_tensor(lin, tp, full, layers * lin.count))
    q_out, kv_out = a.num_attention_heads * shape.head_dim, shape.kv_heads * shape.head_dim
    if a.qkv_bias and not shape.is_mla:
        out += [Tensor("q_proj.bias", q_out // tp, 1, full, layers),
                Tensor("k_proj.bias", kv_out // tp, 1, full, layers),
                Tensor("v_proj.bias", kv_out // tp, 1, full, layers)]
    if a.attention_bias:
        out.append(Tensor("o_proj.bias", a.hidden_size, 1, full, layers))
    if shape.is_mla:
        out += [Tensor(n, r, 1, full, layers) for n, r in (("q_a_layernorm", a.q_lora_rank or 0),
                                                            ("kv_a_layernorm", a.kv_lora_rank or 0)) if r]
    per_norm = 2 if a.norm == "layernorm" else 1
    out.append(Tensor("norm", a.hidden_size, 1, full, layers * a.norms_per_layer * per_norm))
    mlps: list[tuple[list[Linear], int]] = []
    if not moe:
        mlps.append((shape.mlp_linears(a.ffn_hidden_size), 1))
    else:
        out.append(Tensor("router", a.num_experts, a.hidden_size, full, layers))
        mlps.append((shape.mlp_linears(shape.expert_ffn), a.num_experts // layout.ep))
        if a.num_shared_experts:
            mlps.append((shape.mlp_linears(shape.expert_ffn), a.num_shared_experts))
    for linears, copies in mlps:
        ffn = linears[-1].in_features
        for lin in linears:
            out.append(_linear_tensor(lin, tp, full, layers * copies))
        if a.mlp_bias:
            n_up = 2 if a.gated_mlp else 1
            out += [Tensor("mlp.up.bias", ffn // tp, 1, full, layers * copies * n_up),
                    Tensor("mlp.down.bias", a.hidden_size, 1, full, layers * copies)]
    if not full:
        out += _lora_tensors(job, shape, layout, layers)
    return out


def _lora_tensors(job: Job, shape: ModelShape, layout: Layout, layers: int) -> list[Tensor]:
    """PEFT ``lora_A`` ``[r, in]`` and ``lora_B`` ``[out, r]`` for every adapted linear (fp32, trainable)."""
    t = job.training
    r = t.lora_rank
    out: list[Tensor] = []
    for lin in _adapted(shape, t.lora_targets):
        if not lin.count:
            continue
        out.append(Tensor(f"{lin.name}.lora_A", r, lin.in_features // layout.tp, True, layers * lin.count))
        out.append(Tensor(f"{lin.name}.lora_B", lin.out_features // layout.tp, r, True, layers * lin.count))
    expected = lora_params_per_layer(shape, r, t.lora_targets) // layout.tp * layers
    got = sum(x.numel * x.count for x in out)
    if abs(got - expected) > len(out) * r * 2:  # tp rounding only
        raise AssertionError(f"LoRA tensors {got} != {expected}")
    return out


_TENSORS: Final[BoundedMemo[tuple[object, ...], tuple[Tensor, ...]]] = BoundedMemo(4096)


def local_tensors(job: Job, shape: ModelShape, layout: Layout, stage: str) -> list[Tensor]:
    """Memoised on what it reads: the request's method, LoRA rank and targets (not the batch shape, which the
    planner and the micro-batch search vary), the shape, the stage and the layout's tensor and expert degrees and
    layers per stage (not the data-parallel degree or the sharding: the planner's node counts and strategies
    share one answer)."""
    t = job.training
    key = (t.method, t.lora_rank, t.lora_targets, shape, layout.tp, layout.ep, layout.layers_per_stage, stage)
    found = _TENSORS.get_or_compute(key, lambda: tuple(_local_tensors_uncached(job, shape, layout, stage)))
    return list(found)


def _local_tensors_uncached(job: Job, shape: ModelShape, layout: Layout, stage: str) -> list[Tensor]:
    """Every parameter tensor of one rank of ``stage`` ("only", "first", "middle" or "last"), before data-parallel
    sharding. Identical tensors are grouped with ``count``."""
    a, tp = shape.dims, layout.tp
    full = job.training.method == "full"
    dense, moe = _stage_layers(shape, layout)
    out: list[Tensor] = []
    if dense:
        out += _layer_tensors(job, shape, layout, False, dense)
    if moe:
        out += _layer_tensors(job, shape, layout, True, moe)
    if stage in ("first", "only"):
        out.append(Tensor("embed_tokens", a.vocab_size // tp, a.hidden_size, full))
        if a.learned_position_embeddings:
            out.append(Tensor("embed_positions", a.learned_position_embeddings, a.hidden_size, full))
    if stage in ("last", "only"):
        if not a.tied_embeddings or stage == "last":
            out.append(Tensor("lm_head", a.vocab_size // tp, a.hidden_size, full))
        per_norm = 2 if a.norm == "layernorm" else 1
        out.append(Tensor("final_norm", a.hidden_size, 1, full, per_norm))
    return [x for x in out if x.numel > 0 and x.count > 0]
