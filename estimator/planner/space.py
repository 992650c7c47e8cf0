"""The planner's search space: which parallel layouts are valid for one model on one group of GPUs.

A *structure* is a layout without its micro-batch and checkpointing: framework and sharding (DDP, ZeRO-1/2/3,
FSDP, HSDP, Megatron's distributed optimizer), CPU offload, and the tensor / pipeline (+ virtual stages) /
context / expert degrees. Rules (each names the framework behaviour it follows):

- DeepSpeed ZeRO-1/2/3 (with ZeRO-Offload / ZeRO-Infinity offload) runs pure data parallelism here; ZeRO-2/3
  cannot be combined with DeepSpeed's pipeline engine (``deepspeed/runtime/pipe/engine.py`` asserts stage < 2).
- PyTorch FSDP2 / HSDP composes with tensor and context parallelism through a device mesh (torchtitan); CPU
  offload is ``CPUOffloadPolicy`` (parameters, gradients and optimizer states together).
- Megatron-LM runs TP/PP/VP/CP/EP (EP within the data-parallel ranks) with the distributed optimizer (ZeRO-1):
  it shards optimizer states only, at no extra communication over DDP (reduce-scatter + all-gather =
  all-reduce), so plain DDP in Megatron is dominated and left out. The interleaved schedule needs the micro-batch
  count to be a multiple of ``pp``.
- Sequence parallelism is always on with ``tp > 1``: it moves the same bytes as TP's all-reduces (all-gather +
  reduce-scatter) and stores 1/tp of the replicated activations (Korthikanti et al. 2022), so it dominates.
- Tensor parallelism stays inside the scale-up domain (its collectives are on the critical path): the node, or
  the NVLink domain when it spans nodes (GB200 / GB300 NVL72: up to 72, so TP 16, 32, 64); context chunks keep at
  least ``MIN_CP_CHUNK`` tokens; pipeline degrees divide the layers (or the layers plus the embedding and the
  loss, Megatron-LM's accounted split), up to ``MAX_PP``.
- The global batch must split evenly: ``global_batch = dp x micro_batch x accumulation``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Final

from estimator.model.spec import ModelShape
from estimator.request import MAX_ACCUMULATION_STEPS, Parallelism, Training

__all__ = ["CKPT_LEVELS", "MAX_MICRO_BATCH", "Pins", "Structure", "micro_batches", "structures"]

CKPT_LEVELS: Final = ("none", "selective", "full")
MAX_PP: Final = 16
MAX_VP: Final = 8
MAX_CP: Final = 16
MIN_CP_CHUNK: Final = 2048
MAX_MICRO_BATCH: Final = 64
MAX_MICRO_BATCH_TOKENS: Final = 1 << 18


class Structure:
    """One parallel structure of the search (framework, sharding, offload and the degrees), immutable, compared and
    hashed by its fields. A plain class rather than a frozen dataclass, whose generated ``__init__`` runs interpreted
    even when the module is compiled (about 17,000 machine instructions a structure)."""

    framework: Final[str]
    sharding: Final[str]  # none | zero1 | zero2 | zero3 | fsdp | hsdp (request values)
    offload: Final[str]
    tp: Final[int]
    pp: Final[int]
    vp: Final[int]
    cp: Final[int]
    ep: Final[int]
    sequence_parallel: Final[bool]
    hsdp_shard: Final[int | None]
    saving: Final[int]  # rank in its dominance chain: higher saves more memory and communicates more
    # the fields above as a tuple and its hash, computed once (structures key every cache of the search)
    _fields: Final[tuple[object, ...]]
    _hash: Final[int]

    def __init__(self, framework: str, sharding: str, offload: str, tp: int, pp: int, vp: int, cp: int, ep: int,
                 sequence_parallel: bool, hsdp_shard: int | None, saving: int) -> None:
        self.framework = framework
        self.sharding = sharding
        self.offload = offload
        self.tp = tp
        self.pp = pp
        self.vp = vp
        self.cp = cp
        self.ep = ep
        self.sequence_parallel = sequence_parallel
        self.hsdp_shard = hsdp_shard
        self.saving = saving
        self._fields = (framework, sharding, offload, tp, pp, vp, cp, ep, sequence_parallel, hsdp_shard, saving)
        self._hash = hash(self._fields)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        names = ("framework", "sharding", "offload", "tp", "pp", "vp", "cp", "ep", "sequence_parallel", "hsdp_shard",
                 "saving")
        return "Structure(" + ", ".join(f"{n}={v!r}" for n, v in zip(names, self._fields, strict=True)) + ")"

    def __eq__(self, other: object) -> bool:
        """By fields, on the tuple kept at construction: structures of different node counts are equal and key the
        same caches."""
        if self is other:
            return True
        if not isinstance(other, Structure):
            return NotImplemented
        return self._fields == other._fields

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def chain(self) -> tuple[object, ...]:
        """Structures of one chain differ only in sharding/offload; see :func:`_saving`."""
        family = "megatron" if self.framework == "megatron" else "zero"
        return (family, self.tp, self.pp, self.vp, self.cp, self.ep)

    @property
    def without_vp(self) -> tuple[object, ...]:
        return (self.framework, self.sharding, self.offload, self.tp, self.pp, self.cp, self.ep)

    def parallelism(self, tp_plan: object | None = None) -> Parallelism:
        """The request's parallelism section; ``tp_plan`` a pinned plan (else the framework's default)."""
        fields: dict[str, object] = {
            "sharding": self.sharding, "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep,
            "sequence_parallel": self.sequence_parallel, "offload": self.offload, "framework": self.framework,
            "hsdp_shard_size": self.hsdp_shard}
        if tp_plan is not None:
            fields["tp_plan"] = tp_plan
        return Parallelism.model_validate(fields)


@dataclass(frozen=True)
class Pins:
    """Fields the request fixed: parallelism/training fields it set explicitly."""

    parallelism: dict[str, object]
    training: dict[str, object]

    @classmethod
    def of(cls, parallelism: Parallelism | None, training: Training) -> Pins:
        par = {k: getattr(parallelism, k) for k in parallelism.model_fields_set} if parallelism else {}
        keys = ("micro_batch_size", "gradient_accumulation_steps", "activation_checkpointing", "virtual_stages")
        return cls(par, {k: getattr(training, k) for k in keys if k in training.model_fields_set})

    def allows(self, s: Structure) -> bool:
        p = self.parallelism
        if "sharding" in p and not _same_sharding(str(p["sharding"]), s.sharding):
            return False
        names = ("framework", "tp", "pp", "cp", "ep", "offload", "sequence_parallel")
        if any(k in p and p[k] != getattr(s, k) for k in names):
            return False
        if p.get("hsdp_shard_size") is not None and s.sharding == "hsdp" and p["hsdp_shard_size"] != s.hsdp_shard:
            return False
        if p.get("tp_plan") == "replicated-embeddings" and s.framework == "megatron":
            return False  # Megatron-LM always splits the vocabulary (request.DEFAULT_TP_PLAN)
        return "virtual_stages" not in self.training or self.training["virtual_stages"] == s.vp


def _same_sharding(pinned: str, s: str) -> bool:
    if pinned == "zero3":
        return s in ("zero3", "fsdp")
    return pinned == s


# (framework, sharding, offloads, model-parallel allowed, saving rank of (sharding, first offload))
_STRATEGIES: Final[tuple[tuple[str, str, tuple[str, ...], bool, int], ...]] = (
    ("pytorch", "none", ("none",), False, 0),
    ("deepspeed", "zero1", ("none", "optimizer"), False, 1),
    ("deepspeed", "zero2", ("none", "optimizer"), False, 2),
    ("pytorch", "hsdp", ("none", "optimizer+params"), True, 3),
    ("pytorch", "fsdp", ("none", "optimizer+params"), True, 4),
    ("deepspeed", "zero3", ("none", "optimizer", "optimizer+params"), False, 4),
    ("megatron", "zero1", ("none",), True, 1),
)
_OFFLOAD_RANK: Final = {"none": 0, "optimizer": 10, "optimizer+params": 20}


@cache
def _divisors(n: int, cap: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def _tp_options(shape: ModelShape, gpn: int) -> list[int]:
    heads, kv = shape.dims.num_attention_heads, shape.kv_heads
    opts = sorted(set(_pow2_upto(gpn)) | {gpn})
    return [t for t in opts if heads % t == 0 and (kv % t == 0 or t % kv == 0)]


def _cp_options(seq_len: int, pinned: object | None) -> list[int]:
    if pinned is not None:
        return [int(str(pinned))]
    return [c for c in _pow2_upto(MAX_CP) if seq_len % c == 0 and (c == 1 or seq_len // c >= MIN_CP_CHUNK)]


def _ep_options(shape: ModelShape, dp: int) -> list[int]:
    """Expert parallelism carved out of data parallelism (Megatron-Core with expert tensor parallelism = TP:
    ``ep x etp`` ranks must fit in ``dp x tp``, so ``ep`` divides ``dp``)."""
    if not shape.is_moe:
        return [1]
    return [e for e in _divisors(shape.dims.num_experts, dp) if dp % e == 0]


def _splits(layers: int, chunks: int) -> bool:
    """Whether ``chunks`` model chunks split the layers as Megatron-LM does: evenly, or evenly once the embedding
    and the loss each count as a layer (``--account-for-embedding/loss-in-pipeline-split``,
    :mod:`estimator.training.pipeline_split`)."""
    return layers % chunks == 0 or (layers + 2) % chunks == 0


@cache
def _vp_options(layers: int, pp: int) -> tuple[int, ...]:
    """1 and the most virtual stages (up to ``MAX_VP``): between them only the bubble's (p-1)/(v m) moves, and
    it shrinks with v while the extra send/recv stay small, so the in-between values are dominated."""
    if pp == 1:
        return (1,)
    most = max(v for v in range(1, MAX_VP + 1) if _splits(layers, pp * v) and pp * v <= layers)
    return tuple(sorted({1, most}))


def structures(shape: ModelShape, training: Training, world: int, num_nodes: int, gpn: int, gbs: int,
               pins: Pins, domain: int = 0) -> Iterator[Structure]:
    """Every valid structure for ``world`` GPUs (``num_nodes`` x ``gpn``) and a global batch of ``gbs``; tensor
    parallelism up to the scale-up ``domain`` (the node, or an NVLink domain spanning nodes: 72 on NVL72)."""
    layers = shape.dims.num_layers
    pp_opts = [p for p in range(1, min(layers, MAX_PP) + 1) if _splits(layers, p) and world % p == 0]
    for tp in _tp_options(shape, min(max(gpn, domain), world)):
        for cp in _cp_options(training.seq_len, pins.parallelism.get("cp")):
            for pp in pp_opts:
                mp = tp * pp * cp
                if world % mp or gbs % (world // mp):
                    continue
                yield from _strategies(shape, tp, pp, cp, world // mp, num_nodes, gpn, pins)


def _strategies(shape: ModelShape, tp: int, pp: int, cp: int, dp: int, num_nodes: int, gpn: int,
                pins: Pins) -> Iterator[Structure]:
    layers = shape.dims.num_layers
    for framework, sharding, offloads, model_parallel, rank in _STRATEGIES:
        if (tp > 1 or cp > 1) and not model_parallel:
            continue
        if pp > 1 and framework != "megatron":
            continue
        hsdp = _hsdp_shard(sharding, tp, cp, dp, num_nodes, gpn)
        if sharding == "hsdp" and hsdp is None:
            continue
        for ep in _ep_options(shape, dp) if framework == "megatron" else [1]:
            for vp in _vp_options(layers, pp):
                for offload in offloads:
                    # sequence parallelism with every TP layout, except under Hugging Face's plan (its
                    # ``base_model_tp_plan`` has no sequence-parallel entries)
                    sp = tp > 1 and pins.parallelism.get("tp_plan") != "replicated-embeddings"
                    s = Structure(framework, sharding, offload, tp, pp, vp, cp, ep, sp, hsdp,
                                  rank + _OFFLOAD_RANK[offload])
                    if pins.allows(s):
                        yield s


def _hsdp_shard(sharding: str, tp: int, cp: int, dp: int, num_nodes: int, gpn: int) -> int | None:
    """HSDP shards inside a node and replicates across nodes; ``None`` when that is plain FSDP."""
    if sharding != "hsdp":
        return None
    size = max(1, gpn // (tp * cp))
    if num_nodes < 2 or dp % size or dp // size < 2:
        return None
    return size


def micro_batches(gbs: int, dp: int, seq_len: int, pp: int, vp: int, pins: Pins) -> list[tuple[int, int]]:
    """``(micro_batch, accumulation)`` pairs that split the global batch, smallest micro-batch first."""
    per_replica = gbs // dp
    pinned_mbs = pins.training.get("micro_batch_size")
    pinned_gas = pins.training.get("gradient_accumulation_steps")
    out = []
    for mbs in _divisors(per_replica, MAX_MICRO_BATCH):
        gas = per_replica // mbs
        if gas > MAX_ACCUMULATION_STEPS:  # a request the estimate contract would refuse
            continue
        if mbs > 1 and mbs * seq_len > MAX_MICRO_BATCH_TOKENS:
            break
        if vp > 1 and gas % pp:
            continue
        if (pinned_mbs is not None and mbs != pinned_mbs) or (pinned_gas is not None and gas != pinned_gas):
            continue
        out.append((mbs, gas))
    return out
