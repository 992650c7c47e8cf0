"""The estimator's job: a validated :class:`~estimator.request.EstimateRequest` turned once, at the entrance, into
compiled plain classes that the training model, the host sizing and the planner read (issue 27).

Reading a field of a pydantic model from compiled code is a generic attribute lookup through ``BaseModel``'s
``__getattr__`` hook (``slot_tp_getattr_hook``: two type lookups, the class's MRO, then the instance ``__dict__``),
about 360 machine instructions under callgrind. One distinct 70B estimate read about 450 request fields that way,
the memory and step-time path alone about 190: a third of the path's instructions. :func:`job_of` reads each
field of the request's training, parallelism and hardware sections once, from the model's ``__dict__`` (which
holds exactly its fields, validated, defaults filled), into compiled classes whose attributes are struct slots,
with the values derived from them resolved (the TP plan by the framework's default, the normalised sharding, the
world size and the data-parallel degree: :mod:`estimator.rules.derived`, which the request models' properties
call too). The domain takes the :class:`Job` and reads ``job.training.seq_len``; it never goes back to the
pydantic request, except where it makes another request from it (``job.request``: the suggestions' re-estimates,
the cost choice, the host choices).

The request models are frozen (``model_config``) and never changed after validation (``construct.replaced``
copies them), so a job stays true to its request. :func:`job_of` remembers the last request it was given (the
planner's per-layout requests and the suggestions' trials are converted once each, where they are made) and the
last section of each kind (the planner's per-layout requests share sections); each entry holds the model itself,
so a reused ``id`` cannot match another. ``tests/test_job.py`` checks that every field of the pydantic models
has its attribute, with the same value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from estimator.request import (
    DEFAULT_TP_PLAN,
    Attention,
    Checkpointing,
    EstimateRequest,
    Framework,
    Hardware,
    Method,
    Offload,
    Optimizer,
    OptimizerImpl,
    Parallelism,
    PipelineSchedule,
    Precision,
    Sharding,
    TpPlan,
    Training,
)
from estimator.rules import derived as rules

__all__ = ["HardwareView", "Job", "ParallelismView", "TrainingView", "job_of"]

M = TypeVar("M")
V = TypeVar("V")


# lists, not tuples: a ``__dict__``'s keys come out as a list (``PyDict_Keys``), compared in C
_TRAINING_FIELDS: Final = list(Training.model_fields)
_PARALLELISM_FIELDS: Final = list(Parallelism.model_fields)
_HARDWARE_FIELDS: Final = list(Hardware.model_fields)


def _field_values(d: dict[str, Any], names: list[str]) -> tuple[object, ...]:
    """A model's field values in the order of ``names``: its ``__dict__``'s (which pydantic fills in field order),
    or, should the dict's order ever differ, read by name. (``list(d.values())`` and ``list(d.keys())`` compile to
    the dict's C copies; ``tuple(d.values())`` iterates a view one item at a time.)"""
    if list(d.keys()) == names:
        return tuple(list(d.values()))
    return tuple([d[n] for n in names])


class TrainingView:
    """:class:`estimator.request.Training`'s fields."""

    method: Final[Method]
    lora_rank: Final[int]
    lora_targets: Final[str]
    precision: Final[Precision]
    optimizer: Final[Optimizer]
    optimizer_impl: Final[OptimizerImpl]
    micro_batch_size: Final[int]
    seq_len: Final[int]
    gradient_accumulation_steps: Final[int]
    activation_checkpointing: Final[Checkpointing]
    train_tokens: Final[float | None]
    attention: Final[Attention]
    packed_document_tokens: Final[int | None]
    pipeline_schedule: Final[PipelineSchedule]
    virtual_stages: Final[int]
    lora_dropout: Final[float]
    lora_kernel: Final[str | None]
    stack: Final[str]
    loss_kernel: Final[str]
    fused_kernels: Final[str]
    activation_offloading: Final[str]
    allocator: Final[str]
    values: Final[tuple[object, ...]]  # the field values in field order (memo keys)

    def __init__(self, v: tuple[Any, ...]) -> None:
        self.values = v
        self.method = v[0]
        self.lora_rank = v[1]
        self.lora_targets = v[2]
        self.precision = v[3]
        self.optimizer = v[4]
        self.optimizer_impl = v[5]
        self.micro_batch_size = v[6]
        self.seq_len = v[7]
        self.gradient_accumulation_steps = v[8]
        self.activation_checkpointing = v[9]
        self.train_tokens = v[10]
        self.attention = v[11]
        self.packed_document_tokens = v[12]
        self.pipeline_schedule = v[13]
        self.virtual_stages = v[14]
        self.lora_dropout = v[15]
        self.lora_kernel = v[16]
        self.stack = v[17]
        self.loss_kernel = v[18]  # never null: estimator.rules.stacks fills it at validation
        self.fused_kernels = v[19]
        self.activation_offloading = v[20]
        self.allocator = v[21]


class ParallelismView:
    """:class:`estimator.request.Parallelism`'s fields and its two derived values."""

    sharding: Final[Sharding]
    tp: Final[int]
    pp: Final[int]
    cp: Final[int]
    ep: Final[int]
    sequence_parallel: Final[bool]
    offload: Final[Offload]
    framework: Final[Framework]
    tp_comm_overlap: Final[str]
    first_stage_layers: Final[int | None]
    last_stage_layers: Final[int | None]
    hsdp_shard_size: Final[int | None]
    tp_plan: Final[TpPlan | None]
    resolved_tp_plan: Final[TpPlan]
    normalized_sharding: Final[Sharding]
    values: Final[tuple[object, ...]]  # the field values in field order (memo keys)

    def __init__(self, v: tuple[Any, ...]) -> None:
        self.values = v
        self.sharding = v[0]
        self.tp = v[1]
        self.pp = v[2]
        self.cp = v[3]
        self.ep = v[4]
        self.sequence_parallel = v[5]
        self.offload = v[6]
        self.framework = v[7]
        self.tp_comm_overlap = v[8]
        self.first_stage_layers = v[9]
        self.last_stage_layers = v[10]
        self.hsdp_shard_size = v[11]
        self.tp_plan = v[12]
        self.resolved_tp_plan = rules.resolved_tp_plan(self.tp_plan, self.framework, DEFAULT_TP_PLAN)
        self.normalized_sharding = rules.normalized_sharding(self.sharding)  # type: ignore[assignment]


class HardwareView:
    """:class:`estimator.request.Hardware`'s fields and its world size."""

    gpu: Final[str]
    server: Final[str | None]
    num_nodes: Final[int]
    gpus_per_node: Final[int]
    world_size: Final[int]
    values: Final[tuple[object, ...]]  # the field values in field order (memo keys)

    def __init__(self, v: tuple[Any, ...]) -> None:
        self.values = v
        self.gpu = v[0]
        self.server = v[1]
        self.num_nodes = v[2]
        self.gpus_per_node = v[3]
        self.world_size = self.num_nodes * self.gpus_per_node


class _Section(Generic[M, V]):
    """The last section of one kind viewed, its field values and its view, as one tuple (replaced whole: a thread
    never sees a model paired with another's view). The planner's per-layout requests share their sections
    (``construct.replaced``), and requests often have equal ones (the same hardware, the same parallelism), so a
    section's view often serves the next request too."""

    names: Final[list[str]]
    make: Callable[[tuple[Any, ...]], V]
    last: tuple[M, tuple[object, ...], V] | None

    def __init__(self, names: list[str], make: Callable[[tuple[Any, ...]], V]) -> None:
        self.names = names
        self.make = make
        self.last = None

    def of(self, model: M) -> V:
        """The view of ``model``: the last one when ``model`` is the last section or has its values (each of the
        same type), else a new one."""
        last = self.last
        if last is not None and last[0] is model:
            return last[2]
        values = _field_values(vars(model), self.names)
        if last is not None and _same_values(last[1], values):
            self.last = (model, last[1], last[2])
            return last[2]
        made = self.make(values)
        self.last = (model, values, made)
        return made


_TRAINING: Final[_Section[Training, TrainingView]] = _Section(_TRAINING_FIELDS, TrainingView)
_PARALLELISM: Final[_Section[Parallelism, ParallelismView]] = _Section(_PARALLELISM_FIELDS, ParallelismView)
_HARDWARE: Final[_Section[Hardware, HardwareView]] = _Section(_HARDWARE_FIELDS, HardwareView)


class Job:
    """One estimate's job: the request's three sections resolved, its data-parallel degree
    (:attr:`EstimateRequest.dp`), and the validated request it was made of."""

    request: Final[EstimateRequest]
    training: Final[TrainingView]
    parallelism: Final[ParallelismView]
    hardware: Final[HardwareView]
    dp: Final[int]

    def __init__(self, req: EstimateRequest) -> None:
        self.request = req
        self.training = _TRAINING.of(req.training)
        self.parallelism = p = _PARALLELISM.of(req.parallelism)
        self.hardware = h = _HARDWARE.of(req.hardware)
        self.dp = rules.data_parallel(h.world_size, p.tp, p.pp, p.cp)


class _Last:
    """The last request converted and its job, as one tuple (replaced whole)."""

    entry: tuple[EstimateRequest, Job] | None = None


_LAST: Final = _Last()  # a compiled object's slots: cheaper to read than a module global (a dict entry)


def _same_values(kept: tuple[object, ...], values: tuple[object, ...]) -> bool:
    """Whether another model's field values (its ``__dict__``'s, in field order) are a view's: equal, and each
    of the same type (another request's equal section: the view made for it serves). The tuples compare in C,
    where identical objects (small ints, literals, ``None``) are equal at once."""
    if values != kept:
        return False
    for i in range(len(values)):
        v, w = values[i], kept[i]
        if v is not w and type(v) is not type(w):
            return False
    return True


def job_of(req: EstimateRequest) -> Job:
    """The request's :class:`Job`: the last one made when ``req`` is the request it was made for."""
    last = _LAST.entry
    if last is not None and last[0] is req:
        return last[1]
    made = Job(req)
    _LAST.entry = (req, made)
    return made
