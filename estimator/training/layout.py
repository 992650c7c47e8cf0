"""The parallel layout of a request: degrees, shard groups and what the busiest GPU holds.

Degrees follow Megatron-LM (Narayanan et al. 2021, arXiv 2104.04473, Sec. 3): world = dp x tp x pp x cp;
expert parallelism splits the experts over ``ep`` ranks of the data-parallel group (Megatron-Core MoE docs).

Shard groups (what ZeRO/FSDP/the distributed optimizer divide model states by):

- dense parameters: the data-parallel group *with* context parallelism, dp x cp ranks (Megatron-Core
  ``parallel_state.get_data_parallel_group(with_context_parallel=True)`` feeds the distributed optimizer;
  torchtitan's FSDP mesh is ``dp_shard_cp``; DeepSpeed-Ulysses shards ZeRO over ``seq_data_parallel_group``);
- routed experts: the expert-data-parallel group, world / (ep x etp x pp) ranks (Megatron-Core
  ``parallel_state.py``: ``expert_tensor_model_pipeline_parallel_size = etp x ep x pp`` and the expert data
  parallel size is world divided by it; torchtitan shards experts over ``dp_shard_mod_ep``). With ep > 1 the
  estimator takes expert tensor parallelism etp = 1 (experts split by ep only, as ``params.py`` places them);
  without ep, etp = tp.
- HSDP: ``hsdp_shard_size`` data-parallel ranks (default: one node's worth) and their cp ranks form a shard
  group; the experts' shard group shrinks by the same factor as their data-parallel group.
"""

from __future__ import annotations

from typing import Any, Final

from estimator.errors import EstimatorError, InvalidRequestError, UnsupportedCombinationError
from estimator.job import Job, TrainingView
from estimator.memo import BoundedMemo
from estimator.model.spec import ModelShape
from estimator.request import Training
from estimator.rules.stacks import request_refusal
from estimator.training.optimizers import optimizer_spec
from estimator.training.pipeline_split import split_layers

__all__ = ["Layout", "build_layout", "layout_or_none"]


_LAYOUT_FIELDS: Final = ("world_size", "dp", "tp", "pp", "cp", "ep", "vp", "sharding", "shard_group",
                          "expert_shard_group", "gpus_per_node", "num_nodes", "layers_per_stage", "sequence_parallel",
                          "tp_plan", "stage_layers", "pipeline_split")


class Layout:
    """A request's parallel layout (module docstring). Immutable, compared and hashed by its fields (layouts key
    most of the estimator's memos). A plain class rather than a frozen dataclass: the dataclass's generated
    ``__init__`` runs interpreted even when the module is compiled (about 29,000 machine instructions a layout
    under callgrind, against a few hundred compiled); it took an eighth of a model's first planner search."""

    world_size: Final[int]
    dp: Final[int]
    tp: Final[int]
    pp: Final[int]
    cp: Final[int]
    ep: Final[int]
    vp: Final[int]
    sharding: Final[str]  # none | zero1 | zero2 | zero3 | hsdp
    shard_group: Final[int]  # ranks one dense parameter is sharded over (1 = replicated)
    expert_shard_group: Final[int]  # ranks one routed-expert parameter is sharded over (1 = replicated)
    gpus_per_node: Final[int]
    num_nodes: Final[int]
    layers_per_stage: Final[int]  # decoder layers on the pipeline rank with the most (all of them without pp)
    sequence_parallel: Final[bool]
    # ``parallelism.resolved_tp_plan`` when tp > 1 ("vocab-parallel" at tp = 1, where the plans are one)
    tp_plan: Final[str]
    # decoder layers per pipeline rank (its virtual chunks summed), model order; () = even split
    stage_layers: Final[tuple[int, ...]]
    pipeline_split: Final[str]  # even | weighted | given (estimator.training.pipeline_split)
    # the fields above as a tuple and its hash, computed once (layouts key most of the estimator's memos)
    _key: Final[tuple[object, ...]]
    _hash: Final[int]
    # whether pipeline ranks hold different numbers of decoder layers, computed once (read on every step time)
    _uneven: Final[bool]

    def __init__(self, world_size: int, dp: int, tp: int, pp: int, cp: int, ep: int, vp: int, sharding: str,
                 shard_group: int, expert_shard_group: int, gpus_per_node: int, num_nodes: int,
                 layers_per_stage: int, sequence_parallel: bool, tp_plan: str = "vocab-parallel",
                 stage_layers: tuple[int, ...] = (), pipeline_split: str = "even") -> None:
        self.world_size = world_size
        self.dp = dp
        self.tp = tp
        self.pp = pp
        self.cp = cp
        self.ep = ep
        self.vp = vp
        self.sharding = sharding
        self.shard_group = shard_group
        self.expert_shard_group = expert_shard_group
        self.gpus_per_node = gpus_per_node
        self.num_nodes = num_nodes
        self.layers_per_stage = layers_per_stage
        self.sequence_parallel = sequence_parallel
        self.tp_plan = tp_plan
        self.stage_layers = stage_layers
        self.pipeline_split = pipeline_split
        self._key = (world_size, dp, tp, pp, cp, ep, vp, sharding, shard_group, expert_shard_group, gpus_per_node,
                     num_nodes, layers_per_stage, sequence_parallel, tp_plan, stage_layers, pipeline_split)
        self._hash = hash(self._key)
        self._uneven = len(set(stage_layers)) > 1

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Layout):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def fields(self) -> dict[str, object]:
        """The fields by name, in order (what ``dataclasses.asdict`` gave while this was a dataclass)."""
        return dict(zip(_LAYOUT_FIELDS, self._key, strict=True))

    def replace(self, **changes: Any) -> Layout:
        """A layout with ``changes`` to its fields (what ``dataclasses.replace`` did)."""
        return Layout(**{**self.fields(), **changes})

    def __repr__(self) -> str:
        return "Layout(" + ", ".join(f"{n}={v!r}" for n, v in self.fields().items()) + ")"

    def __reduce__(self) -> tuple[type[Layout], tuple[object, ...]]:
        """Pickled as its fields (the hash is recomputed: string hashes differ between processes)."""
        return Layout, self._key

    def layers_on(self, stage: str) -> int:
        """Decoder layers on a stage: ``only`` (no pipeline), ``first``, ``middle`` (rank 1, the middle rank
        with the most micro-batches in flight and, by the split's rule, the most layers) or ``last``."""
        if not self.stage_layers or self.pp == 1:
            return self.layers_per_stage
        if stage == "first":
            return self.stage_layers[0]
        if stage == "last":
            return self.stage_layers[-1]
        if stage == "middle":
            return self.stage_layers[1] if self.pp > 2 else self.stage_layers[-1]
        return self.layers_per_stage

    @property
    def uneven(self) -> bool:
        """Whether pipeline ranks hold different numbers of decoder layers."""
        return self._uneven

    @property
    def embedding_tp(self) -> int:
        """Ranks the input embedding is split over: tp under the vocab-parallel plan (Megatron-LM, torchtitan),
        1 under "replicated-embeddings" (Hugging Face transformers / accelerate / DeepSpeed AutoTP leave the
        embedding out of the plan, so every rank holds all of it, with its gradient and optimizer states)."""
        return 1 if self.tp_plan == "replicated-embeddings" else self.tp

    @property
    def logits_tp(self) -> int:
        """Ranks the logits are split over on the vocabulary: tp under the vocab-parallel plan (sharded logits,
        vocab-parallel loss), 1 when the LM head's output is gathered (HF ``"colwise_gather_output"``,
        DeepSpeed's ``LmHeadLinearAllreduce``) and the loss runs on the full logits."""
        return 1 if self.tp_plan == "replicated-embeddings" else self.tp

    @property
    def optimizer_shard(self) -> int:
        return self.shard_group if self.sharding != "none" else 1

    @property
    def grad_shard(self) -> int:
        return self.shard_group if self.sharding in ("zero2", "zero3", "hsdp") else 1

    @property
    def param_shard(self) -> int:
        return self.shard_group if self.sharding in ("zero3", "hsdp") else 1

    @property
    def etp(self) -> int:
        """Expert tensor parallelism: 1 with expert parallelism (experts split by ep only), else tp."""
        return 1 if self.ep > 1 else self.tp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree: world / (ep x etp x pp) (Megatron-Core ``parallel_state.py``)."""
        return max(1, self.world_size // (self.ep * self.etp * self.pp))

    @property
    def expert_optimizer_shard(self) -> int:
        return self.expert_shard_group if self.sharding != "none" else 1

    @property
    def expert_grad_shard(self) -> int:
        return self.expert_shard_group if self.sharding in ("zero2", "zero3", "hsdp") else 1

    def tokens_per_step(self, training: Training | TrainingView) -> int:
        """Tokens of one optimizer step over the whole job: micro-batch x sequence x accumulation x dp."""
        t = training
        return t.micro_batch_size * t.seq_len * t.gradient_accumulation_steps * self.dp

    @property
    def expert_param_shard(self) -> int:
        return self.expert_shard_group if self.sharding in ("zero3", "hsdp") else 1


def _check(cond: bool, message: str, field: str) -> None:
    if not cond:
        raise InvalidRequestError(message, field)


def _check_model_split(job: Job, shape: ModelShape) -> None:
    rv = job
    p, a = rv.parallelism, shape.dims
    _check(a.num_attention_heads % p.tp == 0,
           f"tp={p.tp} must divide num_attention_heads={a.num_attention_heads}", "parallelism.tp")
    kv = shape.kv_heads
    _check(kv % p.tp == 0 or p.tp % kv == 0,
           f"tp={p.tp} and num_kv_heads={kv}: one must divide the other", "parallelism.tp")
    _check(p.ep == 1 or shape.is_moe, "ep > 1 needs a mixture-of-experts model", "parallelism.ep")
    _check(a.num_experts % p.ep == 0, f"ep={p.ep} must divide num_experts={a.num_experts}", "parallelism.ep")
    _check(rv.training.seq_len % p.cp == 0, f"cp={p.cp} must divide seq_len={rv.training.seq_len}",
           "parallelism.cp")


def _check_combinations(job: Job) -> None:
    rv = job
    p, t = rv.parallelism, rv.training
    _check(not p.sequence_parallel or p.tp > 1, "sequence_parallel needs tp > 1", "parallelism.sequence_parallel")
    _check(t.virtual_stages == 1 or p.pp > 1, "virtual_stages > 1 needs pp > 1", "training.virtual_stages")
    # Megatron-Core pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving raises "number of
    # microbatches ... is not divisible by pipeline-model-parallel-size ... when using interleaved schedule"
    _check(t.pipeline_schedule != "interleaved" or p.pp == 1 or t.gradient_accumulation_steps % p.pp == 0,
           f"the interleaved schedule needs gradient_accumulation_steps={t.gradient_accumulation_steps} to be a "
           f"multiple of pp={p.pp}", "training.gradient_accumulation_steps")
    sharding = p.normalized_sharding
    if p.offload != "none" and sharding == "none":
        raise UnsupportedCombinationError(
            "CPU offload needs ZeRO/FSDP sharding (DeepSpeed ZeRO-Offload or FSDP CPUOffload)", "parallelism.offload")
    if p.offload == "optimizer+params" and sharding not in ("zero3", "hsdp"):
        raise UnsupportedCombinationError("offloading parameters needs ZeRO-3 / FSDP full sharding",
                                          "parallelism.offload")
    if t.method == "qlora" and p.offload == "optimizer+params":
        raise UnsupportedCombinationError("QLoRA's 4-bit base weights cannot be offloaded with ZeRO-3 "
                                          "parameter offload (bitsandbytes Params4bit)", "parallelism.offload")
    if t.method == "qlora" and t.precision in ("fp32", "fp8-mixed"):
        raise UnsupportedCombinationError("QLoRA computes in bf16: use precision bf16-mixed or bf16-true",
                                          "training.precision")
    if p.framework == "megatron" and sharding in ("zero2", "zero3", "hsdp"):
        raise UnsupportedCombinationError("Megatron-LM shards optimizer states only (distributed optimizer = "
                                          "zero1); use framework pytorch or deepspeed for ZeRO-2/3",
                                          "parallelism.sharding")
    refusal = optimizer_spec(t.optimizer).cpu_offload_refusal
    if refusal is not None and p.offload != "none":
        raise UnsupportedCombinationError(refusal, "training.optimizer")
    stack_refusal = request_refusal(t, p, rv.hardware.world_size)  # issue 29: what the fine-tuning stack does not run
    if stack_refusal is not None:
        raise UnsupportedCombinationError(stack_refusal[1], stack_refusal[0])


def _shard_group(job: Job, dp: int) -> int:
    """Ranks one dense parameter is sharded over: dp x cp (see the module docstring), or the HSDP group of
    ``hsdp_shard_size`` data-parallel ranks x cp."""
    rv = job
    p = rv.parallelism
    if p.normalized_sharding == "none":
        return 1
    if p.normalized_sharding != "hsdp":
        return dp * p.cp
    size = p.hsdp_shard_size or max(1, rv.hardware.gpus_per_node // (p.tp * p.cp))
    _check(dp % size == 0, f"hsdp_shard_size={size} must divide the data-parallel degree {dp}",
           "parallelism.hsdp_shard_size")
    return size * p.cp


def _expert_shard_group(job: Job, dp: int, dense_group: int) -> int:
    """Ranks one routed-expert parameter is sharded over: the expert data-parallel group, scaled down like the
    dense group under HSDP."""
    rv = job
    p = rv.parallelism
    if p.normalized_sharding == "none":
        return 1
    etp = 1 if p.ep > 1 else p.tp
    expert_dp = max(1, rv.hardware.world_size // (p.ep * etp * p.pp))
    return max(1, expert_dp * dense_group // (dp * p.cp))


def _layout_key(job: Job, shape: ModelShape) -> tuple[object, ...]:
    """Everything :func:`_build_layout` reads from the request; of the sequence length, only whether ``cp``
    divides it (the message of that check, which names it, is raised afresh: failures are not memoised)."""
    rv = job
    t, p = rv.training, rv.parallelism
    return (shape, p.values, rv.hardware.values, t.virtual_stages, t.pipeline_schedule,
            t.gradient_accumulation_steps, t.method, t.precision, t.optimizer, t.seq_len % p.cp == 0, t.stack,
            t.loss_kernel, t.fused_kernels, t.activation_offloading)


_LAYOUTS: Final[BoundedMemo[tuple[object, ...], Layout | None]] = BoundedMemo(8192)  # None: the request fails a check


def build_layout(job: Job, shape: ModelShape) -> Layout:
    """The layout of ``job`` (memoised on :func:`_layout_key`; a request that fails a check raises its error
    every time, built afresh)."""
    key = _layout_key(job, shape)
    found = _LAYOUTS.get(key)
    if found is None:
        found = _build_layout(job, shape)
        _LAYOUTS.remember(key, found)
    return found


def layout_or_none(job: Job, shape: ModelShape) -> Layout | None:
    """:func:`build_layout`, or ``None`` where it raises an :class:`EstimatorError` (the suggestions' trials,
    many of which are combinations the estimator refuses); failures are memoised too."""
    key = _layout_key(job, shape)
    if key in _LAYOUTS:
        return _LAYOUTS[key]
    try:
        layout: Layout | None = _build_layout(job, shape)
    except EstimatorError:
        layout = None
    return _LAYOUTS.remember(key, layout)


def _build_layout(job: Job, shape: ModelShape) -> Layout:
    rv = job
    p, hw = rv.parallelism, rv.hardware
    mp = p.tp * p.pp * p.cp
    _check(hw.world_size % mp == 0,
           f"num_nodes x gpus_per_node = {hw.world_size} is not divisible by tp x pp x cp = {mp}", "parallelism")
    dp = hw.world_size // mp
    _check(p.ep <= dp * p.tp and (dp * p.tp) % p.ep == 0,
           f"ep={p.ep} must divide dp x tp = {dp * p.tp}", "parallelism.ep")
    _check_model_split(job, shape)
    _check_combinations(job)
    group = _shard_group(job, dp)
    split = split_layers(shape.dims.num_layers, p.pp, rv.training.virtual_stages, p.first_stage_layers,
                         p.last_stage_layers)
    return Layout(world_size=hw.world_size, dp=dp, tp=p.tp, pp=p.pp, cp=p.cp, ep=p.ep,
                  vp=rv.training.virtual_stages, sharding=p.normalized_sharding, shard_group=group,
                  expert_shard_group=_expert_shard_group(job, dp, group), gpus_per_node=hw.gpus_per_node,
                  num_nodes=hw.num_nodes,
                  layers_per_stage=max(split.stage_layers), sequence_parallel=p.sequence_parallel,
                  stage_layers=split.stage_layers if p.pp > 1 else (), pipeline_split=split.kind,
                  tp_plan=p.resolved_tp_plan if p.tp > 1 else "vocab-parallel")
