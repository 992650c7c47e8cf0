"""Reverse questions: the fewest GPUs for a job, the largest model a server trains, the longest sequence.

Each answer comes from the same search as :func:`estimator.planner.plan`: a world *can run* the job when one of
its valid structures fits with its most memory-saving variant (heaviest checkpointing, smallest micro-batch;
:meth:`SearchContext.any_fit`), and the answer carries the fastest plan found there.

- Fewest GPUs: worlds in increasing GPU count (1, 2, 4 ... GPUs of one node, then whole nodes) until one can run.
- Largest model: every preset (largest first), and a family scaled from the request's model by depth
  (``num_layers`` in steps of ``LAYER_STEP``, bisected: memory grows with depth).
- Longest sequence: ``seq_len`` doubled from ``granularity`` until nothing fits, then bisected
  (memory grows with the sequence; context parallelism is searched too).

"Fits" includes host RAM: a layout whose node needs more RAM than its server holds does not run
(:meth:`SearchContext.host_fits`). :func:`answer` runs one question for ``POST /api/v1/plans/reverse`` and
``capplan plan --question``, with one sentence per hardware option.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from estimator.messages import Message, Num, Text, join
from estimator.model.spec import CachedShape, list_presets, preset, resolve_model, shape_for
from estimator.planner.contract import Plan, PlanRequest
from estimator.planner.hardware import HwOption, PriceBook, World, hardware_options, worlds_for
from estimator.planner.plan import Scored, default_catalog, make_plan, score
from estimator.planner.search import SearchContext
from hardware_catalog import Catalog

__all__ = [
    "QUESTIONS",
    "FamilyFit",
    "LargestModel",
    "LongestSequence",
    "MinimumHardware",
    "ModelFit",
    "Question",
    "ReverseRequest",
    "ReverseResponse",
    "answer",
    "fewest_gpus",
    "largest_model",
    "longest_sequence",
]

Question = Literal["fewest-gpus", "largest-model", "longest-sequence"]
QUESTIONS: tuple[str, ...] = ("fewest-gpus", "largest-model", "longest-sequence")
LAYER_STEP = 4
MAX_LAYERS = 2048  # answers are capped here ("at least")
MAX_SEQ_LEN = 1 << 21


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MinimumHardware(_Frozen):
    gpu: str
    server: str | None
    num_gpus: int | None = Field(description="fewest GPUs that run the job; null if none up to max_nodes")
    num_nodes: int | None
    gpus_per_node: int | None
    plan: Plan | None = Field(description="the fastest plan on that many GPUs")


class ModelFit(_Frozen):
    model: str
    name: str
    total_params: int
    fits: bool


class FamilyFit(_Frozen):
    base: str
    num_layers: int = Field(description="deepest variant of the base model that fits (0: none)")
    total_params: int


class LargestModel(_Frozen):
    gpu: str
    server: str | None
    num_nodes: int
    gpus_per_node: int
    largest_preset: str | None
    presets: list[ModelFit] = Field(description="every preset, largest first")
    family: FamilyFit | None


class LongestSequence(_Frozen):
    gpu: str
    server: str | None
    num_nodes: int
    gpus_per_node: int
    seq_len: int = Field(description="longest sequence (a multiple of the granularity) that fits; 0: none")
    plan: Plan | None


def _context(req: PlanRequest, catalog: Catalog) -> SearchContext:
    return SearchContext(req, catalog, shape_for(req.model))


def _best_plan(req: PlanRequest, ctx: SearchContext, world: World, catalog: Catalog) -> Plan | None:
    found = ctx.search_world(world)
    if not found:
        return None
    scored: Scored = score(req, found[0], PriceBook(req.pricing, catalog, req.cost))
    return make_plan(req, scored, 1, False, catalog)


def fewest_gpus(req: PlanRequest, catalog: Catalog | None = None) -> list[MinimumHardware]:
    """Per hardware option: the smallest world (GPU count, then nodes) on which some layout fits."""
    catalog = catalog or default_catalog()
    ctx = _context(req, catalog)
    out = []
    for hw in hardware_options(req, catalog):
        worlds = sorted(worlds_for(req, hw), key=lambda w: (w.size, w.num_nodes))
        world = next((w for w in worlds if ctx.any_fit(w) is not None), None)
        if world is None:
            out.append(MinimumHardware(gpu=hw.gpu.id, server=_sid(hw), num_gpus=None, num_nodes=None,
                                       gpus_per_node=None, plan=None))
            continue
        out.append(MinimumHardware(gpu=hw.gpu.id, server=_sid(hw), num_gpus=world.size, num_nodes=world.num_nodes,
                                   gpus_per_node=world.gpus_per_node, plan=_best_plan(req, ctx, world, catalog)))
    return out


def _sid(hw: HwOption) -> str | None:
    return hw.server.id if hw.server is not None else None


def _target_world(req: PlanRequest, hw: HwOption) -> World:
    """The pinned node count (or one node) with all the option's GPUs."""
    worlds = [w for w in worlds_for(req, hw) if w.gpus_per_node == hw.gpus_per_node]
    pinned = req.hardware is not None and "num_nodes" in req.hardware.model_fields_set
    return worlds[0] if pinned or len(worlds) == 1 else min(worlds, key=lambda w: w.num_nodes)


def _runs(req: PlanRequest, catalog: Catalog, hw: HwOption, update: dict[str, Any]) -> bool:
    trial = req.model_copy(update=update)
    return _context(trial, catalog).any_fit(_target_world(trial, hw)) is not None


def _family(req: PlanRequest, catalog: Catalog, hw: HwOption) -> FamilyFit:
    base = resolve_model(req.model)

    def deeper(layers: int) -> Any:
        first = min(base.first_dense_layers, layers)
        return base.model_copy(update={"num_layers": layers, "first_dense_layers": first})

    def runs(layers: int) -> bool:
        return _runs(req, catalog, hw, {"model": deeper(layers)})

    lo, hi = 0, LAYER_STEP
    while hi <= MAX_LAYERS and runs(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, MAX_LAYERS + LAYER_STEP)  # MAX_LAYERS itself fits: the answer is "at least MAX_LAYERS"
    while hi - lo > LAYER_STEP:
        mid = (lo + hi) // 2 // LAYER_STEP * LAYER_STEP
        lo, hi = (mid, hi) if runs(mid) else (lo, mid)
    params = CachedShape(deeper(lo)).total_params() if lo else 0
    return FamilyFit(base=base.name, num_layers=lo, total_params=params)


def largest_model(req: PlanRequest, catalog: Catalog | None = None, family: bool = True) -> list[LargestModel]:
    """Per hardware option (on the pinned node count, else one node): which presets fit, and how deep the
    request's model family can grow."""
    catalog = catalog or default_catalog()
    sized = sorted(((CachedShape(preset(p["id"])).total_params(), p) for p in list_presets()),
                   key=lambda t: -t[0])
    out = []
    for hw in hardware_options(req, catalog):
        world = _target_world(req, hw)
        fits = [ModelFit(model=p["id"], name=p["name"], total_params=n,
                         fits=_runs(req, catalog, hw, {"model": p["id"]})) for n, p in sized]
        largest = next((f.model for f in fits if f.fits), None)
        out.append(LargestModel(gpu=hw.gpu.id, server=_sid(hw), num_nodes=world.num_nodes,
                                gpus_per_node=world.gpus_per_node, largest_preset=largest, presets=fits,
                                family=_family(req, catalog, hw) if family else None))
    return out


def longest_sequence(req: PlanRequest, catalog: Catalog | None = None, granularity: int = 1024
                     ) -> list[LongestSequence]:
    """Per hardware option (on the pinned node count, else one node): the longest ``seq_len`` that fits."""
    catalog = catalog or default_catalog()
    gbs = req.sequences_per_step
    out = []
    for hw in hardware_options(req, catalog):

        def trial(seq: int) -> PlanRequest:
            return req.model_copy(update={"training": req.training.model_copy(update={"seq_len": seq}),
                                          "global_batch_size": gbs, "global_batch_tokens": None})

        def runs(seq: int, hw: HwOption = hw) -> bool:
            t = trial(seq)
            return _context(t, catalog).any_fit(_target_world(t, hw)) is not None

        lo, hi = 0, granularity
        while hi <= MAX_SEQ_LEN and runs(hi):
            lo, hi = hi, hi * 2
        hi = min(hi, MAX_SEQ_LEN + granularity)
        while hi - lo > granularity:
            mid = (lo + hi) // 2 // granularity * granularity
            lo, hi = (mid, hi) if runs(mid) else (lo, mid)
        world = _target_world(req, hw)
        best = None
        if lo:
            t = trial(lo)
            best = _best_plan(t, _context(t, catalog), _target_world(t, hw), catalog)
        out.append(LongestSequence(gpu=hw.gpu.id, server=_sid(hw), num_nodes=world.num_nodes,
                                   gpus_per_node=world.gpus_per_node, seq_len=lo, plan=best))
    return out


# ------------------------------------------------------------------------------------------- one question
class ReverseRequest(PlanRequest):
    """A plan request plus the question to answer."""

    question: Question = Field(description="fewest-gpus: the smallest GPU / node count that runs the job; "
                               "largest-model: which presets (and how deep a model of the request's family) fit "
                               "the pinned node count, else one node; longest-sequence: the longest seq_len that "
                               "fits there")
    granularity: int = Field(default=1024, ge=128, le=65536, description="longest-sequence: answers are "
                             "multiples of this")
    family: bool = Field(default=True, description="largest-model: also scale the request's model by depth")

    @field_validator("vary_mechanisms")
    @classmethod
    def _own_mechanisms(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if value:
            raise ValueError("the reverse questions search the request's own fine-tuning stack mechanisms: set them "
                             "in training (loss_kernel, fused_kernels, activation_offloading) and leave "
                             "vary_mechanisms empty")
        return value


class ReverseResponse(_Frozen):
    question: Question
    answers: list[Message] = Field(description="one sentence per hardware option")
    fewest_gpus: list[MinimumHardware] | None = None
    largest_model: list[LargestModel] | None = None
    longest_sequence: list[LongestSequence] | None = None


def _where(gpu: str, server: str | None, nodes: int, gpn: int) -> str:
    return f"{nodes}x{gpn} {server or gpu}"


def _answer(where: str, answer: Text) -> Text:
    """``where: answer``; a page shows the answer beside the hardware (``params["answer"]``)."""
    return Text("%(where)s: %(answer)s", where=where, answer=answer)


def _fewest_words(a: MinimumHardware) -> str:
    if a.num_gpus is None or a.plan is None:
        return _answer(a.server or a.gpu, Text("nothing runs the job up to the allowed nodes."))
    host = a.plan.host_ram_bytes_per_node / 2**30
    gpus = Text("%(n)s GPUs", n=a.num_gpus) if a.num_gpus > 1 else Text("%(n)s GPU", n=a.num_gpus)
    nodes = Text("%(n)s nodes", n=a.num_nodes) if (a.num_nodes or 0) > 1 else Text("%(n)s node", n=a.num_nodes)
    return _answer(a.server or a.gpu, Text("%(gpus)s (%(nodes)s x %(gpn)s), fastest as %(plan)s; %(gib)s GiB of host "
                                           "RAM per node.", gpus=gpus, nodes=nodes, gpn=a.gpus_per_node,
                                           plan=a.plan.label, gib=Num(host, ",.0f")))


def _largest_words(a: LargestModel) -> str:
    where = _where(a.gpu, a.server, a.num_nodes, a.gpus_per_node)
    parts: list[str] = [Text("largest preset %(preset)s", preset=a.largest_preset) if a.largest_preset
                        else Text("no preset fits")]
    if a.family is not None:
        if a.family.num_layers:
            parts.append(Text("; %(base)s grows to %(layers)s layers (%(params)sB parameters)", base=a.family.base,
                              layers=a.family.num_layers, params=Num(a.family.total_params / 1e9, ",.0f")))
        else:
            parts.append(Text("; not even %(layers)s layers of %(base)s fit", layers=LAYER_STEP, base=a.family.base))
    return _answer(where, Text("%(text)s.", text=join(parts, "")))


def _longest_words(a: LongestSequence) -> str:
    where = _where(a.gpu, a.server, a.num_nodes, a.gpus_per_node)
    if not a.seq_len or a.plan is None:
        return _answer(where, Text("no sequence length fits."))
    return _answer(where, Text("%(n)s tokens, as %(plan)s.", n=Num(a.seq_len, ","), plan=a.plan.label))


def answer(req: ReverseRequest, catalog: Catalog | None = None) -> ReverseResponse:
    """Answer ``req.question`` for every hardware option of the request."""
    catalog = catalog or default_catalog()
    base = PlanRequest.model_validate(req.model_dump(exclude={"question", "granularity", "family"},
                                                     exclude_unset=True))
    if req.question == "fewest-gpus":
        few = fewest_gpus(base, catalog)
        return ReverseResponse(question=req.question, answers=[_fewest_words(a) for a in few], fewest_gpus=few)
    if req.question == "largest-model":
        big = largest_model(base, catalog, family=req.family)
        return ReverseResponse(question=req.question, answers=[_largest_words(a) for a in big], largest_model=big)
    long = longest_sequence(base, catalog, granularity=req.granularity)
    return ReverseResponse(question=req.question, answers=[_longest_words(a) for a in long], longest_sequence=long)
