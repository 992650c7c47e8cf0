"""Which parameters a rank holds, before data-parallel sharding: after tensor, pipeline and expert splits.

- Tensor parallelism splits every projection and the vocabulary (Megatron-LM column/row-parallel linears and
  vocab-parallel embedding, Shoeybi et al. 2019, arXiv 1909.08053, Sec. 3); norms are replicated. Under the
  "replicated-embeddings" plan (Hugging Face transformers ``tp_plan="auto"``: ``base_model_tp_plan`` shards
  the decoder projections and ``_tp_plan = {"lm_head": "colwise_gather_output"}`` the LM head, with no entry
  for ``embed_tokens``, ``transformers/models/llama/configuration_llama.py`` / ``modeling_llama.py``) the input
  embedding stays whole on every rank; a tied embedding is one parameter with the LM head and is counted whole
  too (not measured).
- Pipeline parallelism gives each stage L/p layers; the first stage also holds the embedding, the last the LM
  head and final norm (Narayanan et al. 2021); with tied embeddings the last stage keeps its own copy.
- Expert parallelism splits routed experts over ep ranks (Megatron-Core MoE).
- LoRA (Hu et al. 2021, arXiv 2106.09685) trains r x (in + out) per adapted matrix; PEFT's "all-linear"
  adapts every linear of the decoder layers except the LM head. QLoRA (Dettmers et al. 2023, arXiv 2305.14314,
  Sec. 3) stores the base linears in NF4 (0.5 byte) with double-quantised block constants
  (8-bit per 64 weights + fp32 per 256 blocks: 0.127 bit per weight); everything else stays bf16.
"""

from __future__ import annotations

from typing import Final

from estimator.job import Job
from estimator.memo import BoundedMemo
from estimator.model.spec import Linear, ModelShape
from estimator.training.activations import ActivationModel
from estimator.training.layout import Layout

__all__ = ["NF4_BYTES_PER_PARAM", "ParamPlacement", "lora_params_per_layer", "place_params"]

NF4_BYTES_PER_PARAM: Final = 0.5 + 1 / 64 + 4 / (64 * 256)


class ParamPlacement:
    """The parameters one rank of a stage holds (a plain class: a frozen dataclass's generated ``__init__`` runs
    interpreted even when the module is compiled)."""

    trainable_local: Final[int]
    frozen_local_bytes: Final[int]
    linear_trainable_local: Final[int]
    largest_tensor: Final[int]
    max_layer_local: Final[int]
    max_layer_trainable_local: Final[int]
    root_local: Final[int]
    adafactor_state_local: Final[int]
    total_local: Final[int]
    tokens_ffn_local: Final[int]
    method: Final[str]
    dequant_bytes: Final[int]
    expert_trainable_local: Final[int]  # part of trainable_local in routed experts (sharded over the expert DP group)
    expert_frozen_local_bytes: Final[int]  # part of frozen_local_bytes in routed experts
    expert_adafactor_local: Final[int]  # part of adafactor_state_local for routed experts
    head_linear_local: Final[int]  # part of linear_trainable_local in the LM head (Muon leaves it to AdamW)

    def __init__(self, trainable_local: int, frozen_local_bytes: int, linear_trainable_local: int,
                 largest_tensor: int, max_layer_local: int, max_layer_trainable_local: int, root_local: int,
                 adafactor_state_local: int, total_local: int, tokens_ffn_local: int, method: str,
                 dequant_bytes: int, expert_trainable_local: int = 0, expert_frozen_local_bytes: int = 0,
                 expert_adafactor_local: int = 0, head_linear_local: int = 0) -> None:
        self.trainable_local = trainable_local
        self.frozen_local_bytes = frozen_local_bytes
        self.linear_trainable_local = linear_trainable_local
        self.largest_tensor = largest_tensor
        self.max_layer_local = max_layer_local
        self.max_layer_trainable_local = max_layer_trainable_local
        self.root_local = root_local
        self.adafactor_state_local = adafactor_state_local
        self.total_local = total_local
        self.tokens_ffn_local = tokens_ffn_local
        self.method = method
        self.dequant_bytes = dequant_bytes
        self.expert_trainable_local = expert_trainable_local
        self.expert_frozen_local_bytes = expert_frozen_local_bytes
        self.expert_adafactor_local = expert_adafactor_local
        self.head_linear_local = head_linear_local

    @property
    def dense_trainable_local(self) -> int:
        return self.trainable_local - self.expert_trainable_local

    @property
    def dense_frozen_local_bytes(self) -> int:
        return self.frozen_local_bytes - self.expert_frozen_local_bytes

    def sharded_bytes(self, layout: Layout, per_param: float, kind: str) -> int:
        """Bytes of a per-trainable-parameter state on this rank after ZeRO/FSDP sharding: dense parameters
        over the dp x cp group, routed experts over the expert data-parallel group (``layout.py``).
        ``kind``: optimizer | grad | param (which ZeRO stage shards it)."""
        dense_shard, expert_shard = {
            "optimizer": (layout.optimizer_shard, layout.expert_optimizer_shard),
            "grad": (layout.grad_shard, layout.expert_grad_shard),
            "param": (layout.param_shard, layout.expert_param_shard),
        }[kind]
        return int(self.dense_trainable_local * per_param / dense_shard
                   + self.expert_trainable_local * per_param / expert_shard)

    def backward_temp_bytes(self, act: ActivationModel) -> int:
        """One layer's backward transients: gradients of the widest intermediates (gate and up, bf16) and the
        low-precision weight gradient of the largest matrix before it is accumulated into ``.grad``."""
        grads_of_intermediates = 2 * 2 * act.tokens * self.tokens_ffn_local
        weight_grad = 2 * self.largest_tensor if self.method == "full" else 0
        return grads_of_intermediates + weight_grad + self.dequant_bytes


def _adapted(shape: ModelShape, targets: str) -> list[Linear]:
    attn = shape.attention_linears()
    if targets == "qkv":
        return [lin for lin in attn if lin.name != "o_proj"]
    if targets == "attention":
        return attn
    mlp = shape.mlp_linears(shape.dims.ffn_hidden_size) if shape.dense_layers else []
    shared = shape.mlp_linears(shape.expert_ffn, shape.dims.num_shared_experts) if shape.is_moe else []
    return attn + mlp + [s for s in shared if s.count]


def adapted_linears(shape: ModelShape, targets: str) -> list[Linear]:
    """The linears of one decoder layer that LoRA adapts under ``targets``."""
    return _adapted(shape, targets)


def lora_params_per_layer(shape: ModelShape, rank: int, targets: str) -> int:
    return sum(rank * (lin.in_features + lin.out_features) * lin.count for lin in _adapted(shape, targets))


def _stage_layers(shape: ModelShape, layout: Layout, stage: str = "only") -> tuple[int, int]:
    """(dense layers, MoE layers) on ``stage`` (:meth:`Layout.layers_on`: uneven pipeline splits place fewer
    layers on the first and last stages), assuming MoE layers spread evenly."""
    per_stage = layout.layers_on(stage)
    moe_frac = shape.moe_layers / shape.dims.num_layers
    moe = round(per_stage * moe_frac)
    return per_stage - moe, moe


def _routed_local(shape: ModelShape, layout: Layout) -> int:
    """Routed-expert parameters of one MoE layer on this rank: split over the ep ranks, or by tp without ep
    (expert tensor parallelism etp = 1 with ep > 1, else tp; see ``layout.py``)."""
    return shape.routed_expert_params_per_layer() // (layout.ep * layout.etp)


def _layer_local(shape: ModelShape, layout: Layout, moe: bool) -> int:
    if not moe:
        return shape.dense_layer_params() // layout.tp
    rest = shape.moe_layer_params() - shape.routed_expert_params_per_layer()
    return rest // layout.tp + _routed_local(shape, layout)


def _root_local(shape: ModelShape, layout: Layout, stage: str) -> int:
    embed = shape.embedding_params() if stage in ("first", "only") else 0
    head = shape.lm_head_params() if stage in ("last", "only") else 0
    if stage == "last" and shape.dims.tied_embeddings:
        head = shape.embedding_params()
    norm = shape.final_norm_params() if stage in ("last", "only") else 0
    if layout.embedding_tp != layout.tp:  # replicated-embeddings: the embedding whole, the LM head split
        if shape.dims.tied_embeddings:
            return embed + head + norm
        return embed + head // layout.tp + norm
    return (embed + head) // layout.tp + norm


def _linear_params(shape: ModelShape, layout: Layout, dense: int, moe: int) -> int:
    """Linear-layer weights of the stage's decoder layers on this rank, routed experts split like
    :func:`_layer_local` (over ep, not tp, when ep > 1)."""
    attn = sum(lin.params for lin in shape.attention_linears())
    mlp = sum(lin.params for lin in shape.mlp_linears(shape.dims.ffn_hidden_size))
    shared = shape.shared_expert_params_per_layer()
    return ((dense * (attn + mlp) + moe * (attn + shared)) // layout.tp
            + moe * _routed_local(shape, layout))


_PLACED: Final[BoundedMemo[tuple[object, ...], ParamPlacement]] = BoundedMemo(8192)


def place_params(job: Job, shape: ModelShape, layout: Layout, stage: str) -> ParamPlacement:
    """Memoised on the fields of the request it reads (method, LoRA rank and targets, precision: not the batch
    shape, which the planner and the micro-batch search vary) and on the shape, layout and stage."""
    t = job.training
    key = (t.method, t.lora_rank, t.lora_targets, t.precision, shape, layout, stage)
    found = _PLACED.get(key)
    if found is None:
        found = _PLACED.remember(key, _place_params_uncached(job, shape, layout, stage))
    return found


def _frozen_bytes_per_param(job: Job) -> int:
    """A LoRA base is stored in the training dtype: bf16 (PEFT loads it with ``torch_dtype=torch.bfloat16``
    for bf16 training), fp32 when training in fp32."""
    return 4 if job.training.precision == "fp32" else 2


def _place_params_uncached(job: Job, shape: ModelShape, layout: Layout, stage: str) -> ParamPlacement:
    t = job.training
    dense, moe = _stage_layers(shape, layout, stage)
    layers_local = dense * _layer_local(shape, layout, False) + moe * _layer_local(shape, layout, True)
    root = _root_local(shape, layout, stage)
    total = layers_local + root
    max_layer = max(_layer_local(shape, layout, False) if dense else 0, _layer_local(shape, layout, True) if moe else 0)
    h, f = shape.dims.hidden_size, shape.dims.ffn_hidden_size
    largest = max(h * f // layout.tp, (shape.dims.vocab_size * h) // layout.embedding_tp)
    ffn_local = (shape.expert_ffn * shape.dims.experts_per_token if moe and not dense else f) // layout.tp
    head_split = layout.embedding_tp if shape.dims.tied_embeddings else layout.tp
    head_linear = (shape.lm_head_params() or shape.embedding_params()) // head_split if stage in ("last", "only") else 0
    linears = _linear_params(shape, layout, dense, moe)
    experts = moe * _routed_local(shape, layout)
    if t.method == "full":
        ada, ada_experts = _adafactor(shape, layout, dense, moe)
        return ParamPlacement(total, 0, linears + head_linear, largest, max_layer, max_layer, root, ada, total,
                              ffn_local, "full", 0, expert_trainable_local=experts, expert_adafactor_local=ada_experts,
                              head_linear_local=head_linear)
    lora_layer = lora_params_per_layer(shape, t.lora_rank, t.lora_targets) // layout.tp
    trainable = lora_layer * (dense + moe)
    if t.method == "lora":
        per = _frozen_bytes_per_param(job)
        frozen, frozen_experts = per * total, per * experts
        dequant = 0
    else:
        frozen = int(NF4_BYTES_PER_PARAM * linears + 2 * max(0, total - linears))
        frozen_experts = int(NF4_BYTES_PER_PARAM * experts)
        dequant = 2 * max(h * f // layout.tp, h * h)
    return ParamPlacement(trainable, frozen, trainable, largest, max_layer, lora_layer, root, 0, total + trainable,
                          ffn_local, t.method, dequant, expert_frozen_local_bytes=frozen_experts)


def _adafactor(shape: ModelShape, layout: Layout, dense: int, moe: int) -> tuple[int, int]:
    """Adafactor's factored second moment: one fp32 value per row and per column of every matrix.
    Returns (all, of which routed experts)."""
    attn = sum((lin.in_features + lin.out_features) * lin.count for lin in shape.attention_linears())
    mlp = sum((lin.in_features + lin.out_features) * lin.count
              for lin in shape.mlp_linears(shape.dims.ffn_hidden_size))
    expert = sum(lin.in_features + lin.out_features for lin in shape.mlp_linears(shape.expert_ffn))
    shared = expert * shape.dims.num_shared_experts
    routed = 4 * moe * expert * shape.dims.num_experts // (layout.ep * layout.etp)
    rest = 4 * (dense * (attn + mlp) + moe * (attn + shared)) // layout.tp
    return rest + routed, routed
