"""What to change when a layout does not fit: up to three knobs at a time, each re-estimated.

A "does not fit" verdict is only useful with a way out. Rather than a generic hint, every candidate change
below is applied to the request and its memory peak computed by the same model (``estimator.training.memory``), so
each suggestion carries the per-GPU total it would give and whether that fits. The candidates are the
standard memory levers, in the order practitioners reach for them (Korthikanti et al. 2022 for activation
recomputation; Rajbhandari et al. 2020, ZeRO, for sharding and offload; Hu et al. 2021 / Dettmers et al. 2023
for LoRA / QLoRA): recompute activations, shard the model states, offload them, shrink the micro-batch
(keeping the global batch through gradient accumulation), train adapters instead of the whole model, and
spread the job over more nodes. Before the levers that change the parallelism or the method come the fine-tuning
stacks' own (issue 29, :mod:`estimator.training.mechanisms`): a fused loss, Liger's kernels, activation offloading;
their suggestions say the GiB they save and what they cost in step time.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from itertools import combinations
from typing import Any, Final, NamedTuple, get_args

import annotated_types
from pydantic import BaseModel

from estimator.construct import trusted
from estimator.errors import EstimatorError
from estimator.job import Job, job_of
from estimator.messages import N_, Num, Text, capitalized, join
from estimator.model.spec import ModelShape
from estimator.request import Checkpointing, EstimateRequest, Hardware, Method, Offload, Sharding, Training
from estimator.response import Suggestion
from estimator.rules.stacks import BNB_OPTIMIZERS
from estimator.training.layout import build_layout, layout_or_none
from estimator.training.memory import peak_memory, peak_total
from estimator.training.timing import step_time_model
from hardware_catalog import Gpu, Server

__all__ = ["apply_changes", "cost_summary", "measure_request", "mechanism_cost", "mechanism_name", "offload_mode",
           "suggestions"]

MAX_SUGGESTIONS: Final = 5
MAX_NODES_TRIED: Final = 64


_Candidate = tuple[str, dict[str, Any]]


class _Tried(NamedTuple):
    """A re-estimated change: the fields of the :class:`Suggestion` it becomes if it is shown."""

    summary: str
    changes: dict[str, Any]
    total_bytes: int
    fits: bool


def _by_section(changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Dotted ``section.field`` changes grouped by section: ``{section: {field: value}}``."""
    by_section: dict[str, dict[str, Any]] = {}
    for dotted, value in changes.items():
        section, name = dotted.split(".", 1)
        by_section.setdefault(section, {})[name] = value
    return by_section


def apply_changes(req: EstimateRequest, changes: dict[str, Any]) -> EstimateRequest:
    """A copy of ``req`` with dotted ``section.field`` values replaced (validated again).

    Only the sections that change are validated again (a request has no validator across sections, so this is
    the same as validating the whole request, without re-reading the model, which may be a full config.json)."""
    update: dict[str, BaseModel] = {}
    for section, fields in _by_section(changes).items():
        current = getattr(req, section, None)
        if not isinstance(current, BaseModel):
            data = req.model_dump()
            for dotted, value in changes.items():
                sec, name = dotted.split(".", 1)
                data[sec][name] = value
            return EstimateRequest.model_validate(data)
        update[section] = type(current).model_validate({**current.model_dump(), **fields})
    return req.model_copy(update=update)


def _int_range(model: type[BaseModel], name: str) -> tuple[int, int]:
    """The ``ge``/``le`` bounds of an integer field of the request contract (``request.py``)."""
    meta = model.model_fields[name].metadata
    low: Any = next(m.ge for m in meta if isinstance(m, annotated_types.Ge))
    high: Any = next(m.le for m in meta if isinstance(m, annotated_types.Le))
    return int(low), int(high)


# The values the levers set that validation accepts without looking at anything else: members of the field's
# Literal, integers within the field's bounds. ``parallelism.sharding`` also meets ``Parallelism._check_hsdp``
# (checked in :func:`_known_valid`); no other model validator reads a field a lever sets.
_LITERALS: Final[dict[str, tuple[Any, ...]]] = {
    "training.activation_checkpointing": get_args(Checkpointing), "training.method": get_args(Method),
    "parallelism.offload": get_args(Offload), "parallelism.sharding": get_args(Sharding)}
_INT_RANGES: Final[dict[str, tuple[int, int]]] = {
    "training.micro_batch_size": _int_range(Training, "micro_batch_size"),
    "training.gradient_accumulation_steps": _int_range(Training, "gradient_accumulation_steps"),
    "hardware.num_nodes": _int_range(Hardware, "num_nodes")}


def _known_valid(job: Job, dotted: str, value: Any) -> bool:
    if dotted in _LITERALS:
        if dotted == "parallelism.sharding" and value != "hsdp" and job.parallelism.hsdp_shard_size is not None:
            return False
        return value in _LITERALS[dotted]
    if dotted in _INT_RANGES:
        low, high = _INT_RANGES[dotted]
        return type(value) is int and low <= value <= high
    return False


# Sections of one request already changed by a set of fields (several trials change a section the same way).
_Sections = dict[tuple[str, tuple[tuple[str, Any], ...]], BaseModel]


def _trial_request(job: Job, changes: dict[str, Any], sections: _Sections) -> EstimateRequest:
    """:func:`apply_changes` without validating again when every change is one validation accepts whatever the
    rest of the request holds (:func:`_known_valid`); anything else goes through :func:`apply_changes`, which
    refuses what validation refuses. ``sections`` keeps the changed sections of the job's request for the next
    trials."""
    req = job.request
    if not all(_known_valid(job, dotted, value) for dotted, value in changes.items()):
        return apply_changes(req, changes)
    update: dict[str, BaseModel] = {}
    for section, fields in _by_section(changes).items():
        key = (section, tuple(fields.items()))
        found = sections.get(key)
        if found is None:
            found = sections[key] = getattr(req, section).model_copy(update=fields)
        update[section] = found
    return req.model_copy(update=update)


def offload_mode(checkpointing: str) -> str:
    """The activation offloading a way out proposes: the checkpointed inputs (Unsloth / axolotl) under full
    checkpointing, every saved tensor (torchtune / TRL) otherwise (``checkpoints`` needs full checkpointing:
    :func:`estimator.rules.stacks.request_refusal`)."""
    return "checkpoints" if checkpointing == "full" else "all"


def mechanism_name(field: str, value: str) -> str:
    """A fine-tuning stack mechanism (issue 29) in words, as the ways out and the planner's rows name it."""
    if field == "loss_kernel" and value == "fused":
        return Text("a fused loss (Liger fused linear cross-entropy or Cut Cross-Entropy: no full logits)")
    if field == "fused_kernels" and value == "liger":
        return Text("Liger kernels (RMSNorm, SwiGLU, RoPE)")
    if field == "activation_offloading" and value != "none":
        return Text("activations offloaded to host memory (%(mode)s)", mode=value)
    if field == "optimizer" and value == "adamw-8bit":
        return Text("8-bit AdamW (bitsandbytes: blockwise 8-bit optimizer states)")
    return f"training.{field} {value}"


def _levers(job: Job) -> list[_Candidate]:
    """Single memory levers that apply to ``job``, least disruptive first."""
    rv = job
    t, p = rv.training, rv.parallelism
    out: list[_Candidate] = []
    if t.activation_checkpointing != "full":
        out.append((Text("full activation checkpointing"), {"training.activation_checkpointing": "full"}))
    if rv.hardware.world_size > 1 and p.normalized_sharding in ("none", "zero1", "zero2"):
        zero3: dict[str, Any] = {"parallelism.sharding": "zero3"}
        if t.optimizer in BNB_OPTIMIZERS and p.framework == "pytorch":
            zero3["parallelism.framework"] = "deepspeed"  # bitsandbytes cannot step FSDP2's DTensors (rules.stacks)
        out.append((Text("ZeRO-3 / FSDP sharding"), zero3))
    if t.method != "qlora" and p.offload == "none" and (rv.hardware.world_size > 1
                                                           or p.normalized_sharding in ("zero2", "zero3")):
        out.append((Text("optimizer states offloaded to CPU memory"), {"parallelism.offload": "optimizer"}))
    if t.micro_batch_size > 1:
        gas = t.gradient_accumulation_steps * t.micro_batch_size
        out.append((Text("micro-batch 1 with %(gas)s accumulation steps (same global batch)", gas=gas),
                    {"training.micro_batch_size": 1, "training.gradient_accumulation_steps": gas}))
    # issue 29: the fine-tuning stacks' memory mechanisms (estimator.training.mechanisms), before the levers that change
    # the parallelism or the method
    if t.loss_kernel != "fused" and p.framework != "megatron":
        out.append((mechanism_name("loss_kernel", "fused"), {"training.loss_kernel": "fused"}))
    if t.fused_kernels == "none" and p.framework != "megatron":
        out.append((mechanism_name("fused_kernels", "liger"), {"training.fused_kernels": "liger"}))
    if t.activation_offloading == "none" and p.offload != "optimizer+params" and t.stack != "unsloth":
        mode = offload_mode(t.activation_checkpointing)
        out.append((mechanism_name("activation_offloading", mode), {"training.activation_offloading": mode}))
    if t.method == "full":
        out.append((Text("LoRA adapters instead of a full fine-tune"), {"training.method": "lora"}))
    if t.method in ("full", "lora") and t.precision != "fp8-mixed":
        out.append((Text("QLoRA (4-bit base)"), {"training.method": "qlora", "parallelism.offload": "none"}))
    return out


def _combine(levers: tuple[_Candidate, ...]) -> _Candidate | None:
    """Several levers at once, or ``None`` when two of them set the same field."""
    changes: dict[str, Any] = {}
    for _, lever in levers:
        if not changes.keys().isdisjoint(lever):
            return None
        changes.update(lever)
    summary = join((name for name, _ in levers), N_(" and "))
    return capitalized(summary), changes


def _candidates(job: Job) -> tuple[_Candidate, ...]:
    """Each lever alone, then pairs, then triples (in lever order). The same levers give the same candidates:
    memoised on them (callers read the change dicts, never change them)."""
    return _combinations(tuple((name, tuple(lever.items())) for name, lever in _levers(job)))


@lru_cache(maxsize=256)
def _combinations(levers: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]) -> tuple[_Candidate, ...]:
    singles = [(name, dict(items)) for name, items in levers]
    combos = (_combine(group) for size in (1, 2, 3) for group in combinations(singles, size))
    return tuple(c for c in combos if c is not None)


def _keeps_method(s: _Tried) -> bool:
    return "training.method" not in s.changes


def _minimal(fitting: list[_Tried]) -> list[_Tried]:
    """Drop a fitting change that contains another fitting change (checkpointing + offload when
    checkpointing alone fits); then those that keep the training method first."""
    kept = [s for s in fitting
            if not any(o is not s and o.changes.items() <= s.changes.items() for o in fitting)]
    return sorted(kept, key=lambda s: not _keeps_method(s))


def _peak_total(job: Job, shape: ModelShape, capacity: int) -> tuple[int, bool] | None:
    layout = layout_or_none(job, shape)
    if layout is None:
        return None
    try:
        return peak_total(job, shape, layout, capacity)
    except EstimatorError:
        return None


def _more_nodes(job: Job, shape: ModelShape, capacity: int, sections: _Sections) -> _Tried | None:
    """The fewest nodes (a power of two times the current count) at which the job fits with its states
    sharded over them (ZeRO-3 / FSDP) and full activation checkpointing."""
    rv = job
    base = {"parallelism.sharding": "zero3", "training.activation_checkpointing": "full"}
    if rv.parallelism.normalized_sharding == "hsdp":
        base = {"training.activation_checkpointing": "full"}
    nodes = rv.hardware.num_nodes * 2
    while nodes <= MAX_NODES_TRIED:
        summary = Text("%(nodes)s nodes (%(gpus)s GPUs), sharded and checkpointed", nodes=nodes,
                       gpus=nodes * rv.hardware.gpus_per_node)
        trial = _try(job, shape, capacity, summary, {**base, "hardware.num_nodes": nodes}, sections)
        if trial is not None and trial.fits:
            return trial
        nodes *= 2
    return None


def _try(job: Job, shape: ModelShape, capacity: int, summary: str, changes: dict[str, Any],
         sections: _Sections) -> _Tried | None:
    try:
        trial = _trial_request(job, changes, sections)
    except ValueError:
        return None
    result = _peak_total(job_of(trial), shape, capacity)  # a new request: its own job, made where it is made
    if result is None:
        return None
    return _Tried(summary, changes, result[0], result[1])


_MECHANISM_FIELDS: Final = frozenset({"training.loss_kernel", "training.fused_kernels",
                                      "training.activation_offloading"})


def _with_cost(s: _Tried, req: EstimateRequest,
               measure: Callable[[EstimateRequest], tuple[int, float] | None] | None) -> str:
    """A mechanism's suggestion says what it saves (allocated bytes at the peak: the total is capped by the
    allocator's cache) and what it costs in step time (issue 29); ``measure``: (peak allocated bytes, step
    seconds) of a request."""
    if measure is None or _MECHANISM_FIELDS.isdisjoint(s.changes):
        return s.summary
    before = measure(req)  # the caller memoises it (one request, several suggestions)
    try:
        after = measure(apply_changes(req, s.changes))
    except (ValueError, EstimatorError):
        after = None
    if before is None or after is None:
        return s.summary
    return cost_summary(s.summary, *mechanism_cost(before, after))


def mechanism_cost(before: tuple[int, float], after: tuple[int, float]) -> tuple[int, float]:
    """(bytes saved per GPU, step seconds added) of a change, from ``(peak allocated bytes, step seconds)``
    before and after it (what :func:`measure_request` gives): the ways out and the planner's rows both say
    it so."""
    return before[0] - after[0], after[1] - before[1]


def cost_summary(change: str, saved_bytes: int, delta_s: float) -> str:
    """A change with what it saves and what it costs, in words (the ways out's and the planner's sentence)."""
    return Text("%(change)s: %(saved)s GiB less per GPU, step time %(delta)s s", change=change,
                saved=Num(saved_bytes / 2**30, ".1f"), delta=Num(delta_s, "+.2f"))


def measure_request(req: EstimateRequest, shape: ModelShape, gpu: Gpu, server: Server | None,
                    capacity: int) -> tuple[int, float]:
    """(peak allocated bytes, step seconds) of ``req`` on ``gpu`` (issue 29: what a mechanism saves and costs;
    the estimate's ways out and the planner's rows measure with it). Raises what the layout or the model
    raises."""
    job = job_of(req)
    layout = build_layout(job, shape)
    allocated = peak_memory(job, shape, layout, capacity).peak_allocated
    return allocated, step_time_model(job, shape, layout, gpu, server).result().step_time_s


def _once(measure: Callable[[EstimateRequest], tuple[int, float] | None],
          req: EstimateRequest) -> Callable[[EstimateRequest], tuple[int, float] | None]:
    """``measure`` with ``req``'s own answer computed at most once."""
    cache: list[tuple[int, float] | None] = []

    def measured(r: EstimateRequest) -> tuple[int, float] | None:
        if r is not req:
            return measure(r)
        if not cache:
            cache.append(measure(r))
        return cache[0]
    return measured


def suggestions(job: Job, shape: ModelShape, capacity: int,
                measure: Callable[[EstimateRequest], tuple[int, float] | None] | None = None) -> list[Suggestion]:
    """Single changes that would make ``job`` fit (those first), each with its re-estimated per-GPU total.

    Call it only for a request that does not fit. At most ``MAX_SUGGESTIONS``: the smallest changes that fit,
    least disruptive first (those that keep the training method before those that change it); when none
    fits, the changes that come closest, so the user sees which lever helps most."""
    tried: list[_Tried] = []
    sections: _Sections = {}
    for summary, changes in _candidates(job):
        if any(t.fits and t.changes.items() <= changes.items() for t in tried):
            continue  # contains a change that already fits: _minimal would drop it
        trial = _try(job, shape, capacity, summary, changes, sections)
        if trial is not None:
            tried.append(trial)
    nodes = _more_nodes(job, shape, capacity, sections)
    if nodes is not None:
        tried.append(nodes)
    fitting = [s for s in tried if s.fits]
    shown = (_minimal(fitting) or sorted(tried, key=lambda s: s.total_bytes))[:MAX_SUGGESTIONS]
    if measure is not None:
        measure = _once(measure, job.request)
    return [trusted(Suggestion, summary=_with_cost(s, job.request, measure), changes=s.changes,
                    total_bytes=s.total_bytes, fits=s.fits) for s in shown]
