"""The planner's search on one group of GPUs: cheap bounds first, memory next, the step-time model last.

For one world (a hardware option on a number of nodes) every valid structure (:mod:`estimator.planner.space`)
gets a lower bound on its step time: the step-time model's own forward + backward time of one micro-batch
(``estimator.training.timing.micro_batch``, no recomputation, one accumulation step) at the largest micro-batch, times
the fewest micro-batches (per-sequence time falls as micro-batches grow), plus the smallest pipeline bubble and half
the tensor-parallel collectives the model counts. Structures are visited in bound order and the visit stops when
the bound reaches the ``keep``-th best step time found: no later structure can beat them.

A visited structure is priced in three steps:

1. Memory (:func:`estimator.training.memory.peak_memory`, cached per layout and shared across GPU types: allocated bytes
   and overheads do not depend on the GPU). The lightest-memory variant (heaviest checkpointing, smallest
   micro-batch) is checked first; if it does not fit, nothing of the structure does. Memory grows with the
   micro-batch and shrinks with checkpointing, so the largest micro-batch that fits is bisected per
   checkpointing level, starting from the lighter level's answer; a heavier level that allows no larger
   micro-batch is dominated and skipped.
2. Dominance between structures: sharding and offload form chains (DDP, ZeRO-1, ZeRO-2, HSDP, FSDP/ZeRO-3,
   then offload) where each step saves memory and communicates more. Once a member fits every micro-batch with
   no checkpointing, the members after it can only be slower and are skipped.
3. Host RAM (:func:`estimator.host.ram.host_ram`, per structure: it does not depend on the micro-batch or the
   checkpointing): a structure whose node needs more RAM than the server holds (:func:`estimator.host.sizing.ram_limit`:
   the catalog maximum, else the default ceiling; for a GPU without a server, the server ``estimate()`` would
   suggest) cannot run, however well it fits the GPUs. This is what stops CPU-offload layouts of very large
   models.
4. The step-time model (:func:`estimator.training.timing.step_time_model`) for the surviving variants: the largest
   fitting micro-batch per checkpointing level, and for pipelines the next smaller one too (the bubble shrinks with
   it). Heuristic: full recomputation (one more forward, about a third of the compute) is priced only when what
   is paid per micro-batch (exposed communication, offload, bubble) exceeds ``FULL_RECOMPUTE_SHARE`` of the
   compute of the lighter level, since only that shrinks with a larger micro-batch.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from estimator.construct import replaced
from estimator.errors import InvalidRequestError
from estimator.estimate import job_memory_error_bar_pct
from estimator.host.bom import choose_server
from estimator.host.ram import host_ram
from estimator.host.sizing import RamLimit, ram_limit
from estimator.host_options import options_for
from estimator.job import Job, job_of
from estimator.model.spec import CachedShape
from estimator.planner import budget
from estimator.planner import screen as scr
from estimator.planner.contract import PlanRequest
from estimator.planner.hardware import World
from estimator.planner.space import CKPT_LEVELS, Pins, Structure, micro_batches, structures
from estimator.request import EstimateRequest, Hardware
from estimator.response import TimeResult
from estimator.training.checkpoint import checkpoint_size
from estimator.training.comm import fabric_for, scale_up_gpus
from estimator.training.efficiency import rates_for
from estimator.training.layout import Layout, build_layout
from estimator.training.memory import MemoryFloor, memory_floor, peak_memory
from estimator.training.timing import StepTime, step_time_model
from hardware_catalog import Catalog

__all__ = ["Found", "HostMiss", "SearchContext", "Stats"]

DEFAULT_KEEP: Final = 3
MAX_PIPELINE_PROBES: Final = 2
FULL_RECOMPUTE_SHARE: Final = 0.25
TP_COLLECTIVE_PAIRS_PER_LAYER: Final = 2  # lower bound: half of what the step-time model counts (4 per layer)


@dataclass
class Stats:
    hardware_options: int = 0
    worlds: int = 0
    structures: int = 0
    structures_evaluated: int = 0
    pruned_by_bound: int = 0
    pruned_by_dominance: int = 0
    memory_checks: int = 0
    time_evaluations: int = 0
    host_checks: int = 0
    layouts_screened: int = 0
    screened_out: int = 0
    empty_worlds: list[tuple[World, str]] = field(default_factory=list)
    host_misses: dict[tuple[str, int, int], HostMiss] = field(default_factory=dict)


@dataclass(frozen=True)
class HostMiss:
    """The lightest host-RAM need of the layouts of one world that fit the GPUs but not the node's RAM."""

    world: World
    need_bytes: int
    limit: RamLimit


class Found:
    """The best variant of one structure on one world. A plain class with read-only attributes (one per priced
    variant: a dataclass's generated ``__init__`` stays interpreted in the compiled build)."""

    world: Final[World]
    structure: Final[Structure]
    ckpt: Final[str]
    micro_batch_size: Final[int]
    accumulation: Final[int]
    dp: Final[int]
    step: Final[StepTime]  # the step-time model's answer; its response TimeResult is built on demand (:attr:`time`)
    request: Final[EstimateRequest]
    memory_total_bytes: Final[int]
    memory_need_bytes: Final[int]  # allocated at the peak + the hard overhead: what has to fit
    host_ram_bytes: Final[int]  # per node

    def __init__(self, world: World, structure: Structure, ckpt: str, micro_batch_size: int, accumulation: int,
                 dp: int, step: StepTime, request: EstimateRequest, memory_total_bytes: int,
                 memory_need_bytes: int = 0, host_ram_bytes: int = 0) -> None:
        self.world = world
        self.structure = structure
        self.ckpt = ckpt
        self.micro_batch_size = micro_batch_size
        self.accumulation = accumulation
        self.dp = dp
        self.step = step
        self.request = request
        self.memory_total_bytes = memory_total_bytes
        self.memory_need_bytes = memory_need_bytes
        self.host_ram_bytes = host_ram_bytes

    @property
    def step_time_s(self) -> float:
        return self.step.step_time_s

    @property
    def time(self) -> TimeResult:
        """The response's :class:`TimeResult` (``timing.step_time``'s answer), built for the layouts a plan
        returns rather than for every variant the search prices."""
        return self.step.result()


#: what one structure tried by :meth:`SearchContext.any_fit` (a layout and a memory estimate, in a fresh
#: context per trial of the reverse questions) costs against the work budget, in searched layouts: measured
#: with benchmarks/worst_case.py's requests, the reverse questions get through 2-3x fewer budget units per
#: second than ``plan()`` (whose units are mostly pruned before they are evaluated)
ANY_FIT_COST: Final = 3


class SearchContext:
    """Caches and counters for one planner run."""

    def __init__(self, req: PlanRequest, catalog: Catalog, shape: CachedShape, keep: int = DEFAULT_KEEP,
                 screen: bool = True) -> None:
        self.catalog = catalog
        self.shape = shape
        self.training = req.training
        self.base = EstimateRequest(model=req.model, training=req.training, host=req.host)
        self.host_options = options_for(req).resolved()
        self.gbs = req.sequences_per_step
        self.pins = Pins.of(req.parallelism, req.training)
        pinned_ckpt = self.pins.training.get("activation_checkpointing")
        self.ckpts: tuple[str, ...] = (str(pinned_ckpt),) if pinned_ckpt is not None else CKPT_LEVELS
        self.free_fraction = 1.0 - req.constraints.min_headroom_pct / 100.0
        self.margin_pct = req.constraints.memory_margin_pct
        self._margins: dict[tuple[int, int, Structure], float] = {}
        self.keep = keep
        self.stats = Stats()
        self.prepaid = False  # set by plan(), which charges the work budget for the whole space at once
        self._structures: dict[tuple[int, int, int], list[Structure]] = {}
        self._layouts: dict[tuple[int, int, Structure], Layout | None] = {}
        self._memory_cache: dict[tuple[object, ...], tuple[int, int, int]] = {}
        self._parallelism: dict[Structure, Any] = {}
        self._trainings: dict[tuple[str, int, int, int], Any] = {}
        self._hardwares: dict[tuple[str, int, int], Hardware] = {}
        self._jobs: dict[tuple[object, ...], Job] = {}
        self._model_flops = _model_flops_per_step(shape, req.training, self.gbs)
        self._micro: dict[tuple[object, ...], float | None] = {}
        self._host_ram: dict[tuple[int, int, Structure], int] = {}
        self._ram_limits: dict[tuple[str, int], RamLimit] = {}
        self.screen = screen
        self._floors: dict[tuple[int, int, int], tuple[scr.Floors, list[int]]] = {}
        self._variants: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        self._rows: dict[tuple[int, int, int], _ScreenRows] = {}
        self._screened: dict[tuple[str, int, int], npt.NDArray[np.bool_]] = {}
        self._micro_owner: dict[tuple[object, ...], tuple[World, Structure]] = {}

    # ------------------------------------------------------------------------------------------ the space
    @staticmethod
    def _group_key(world: World) -> tuple[int, int, int]:
        """A group's structures depend on its node count, GPUs per node and scale-up domain (TP up to the NVLink
        domain: 8 on an HGX node, 72 on an NVL72 rack of four-GPU trays), not on the GPU type."""
        return world.num_nodes, world.gpus_per_node, scale_up_gpus(world.hw.server, world.gpus_per_node)

    def structures(self, world: World) -> list[Structure]:
        key = self._group_key(world)
        if key not in self._structures:
            self._structures[key] = list(structures(self.shape, self.training, world.size, world.num_nodes,
                                                    world.gpus_per_node, self.gbs, self.pins, key[2]))
        return self._structures[key]

    def variants(self, world: World, s: Structure) -> list[tuple[int, int]]:
        dp = world.size // s.model_parallel
        key = (dp, s.pp, s.vp)
        splits = self._variants.get(key)
        if splits is None:
            splits = self._variants[key] = micro_batches(self.gbs, dp, self.training.seq_len, s.pp, s.vp, self.pins)
        return splits

    def space_size(self, world: World) -> int:
        """Layouts of one world: structures x micro-batch splits x checkpointing levels."""
        return sum(len(self.variants(world, s)) for s in self.structures(world)) * len(self.ckpts)

    # ----------------------------------------------------------------------------------------- requests
    def request(self, world: World, s: Structure, ckpt: str, mbs: int, gas: int) -> EstimateRequest:
        """The per-layout request (its job's)."""
        return self.job(world, s, ckpt, mbs, gas).request

    def job(self, world: World, s: Structure, ckpt: str, mbs: int, gas: int) -> Job:
        """The per-layout request, made once (``construct.replaced``: sections shared) and turned into its job
        there, which the model takes."""
        key = (world.hw.key, world.num_nodes, world.gpus_per_node, s, ckpt, mbs, gas)
        job = self._jobs.get(key)
        if job is None:
            tkey = (ckpt, mbs, gas, s.vp)
            if tkey not in self._trainings:
                schedule = "interleaved" if s.vp > 1 else self.training.pipeline_schedule  # Megatron's VP schedule
                self._trainings[tkey] = replaced(self.training, {
                    "micro_batch_size": mbs, "gradient_accumulation_steps": gas, "activation_checkpointing": ckpt,
                    "virtual_stages": s.vp, "pipeline_schedule": schedule})
            if s not in self._parallelism:
                self._parallelism[s] = s.parallelism(self.pins.parallelism.get("tp_plan"))
            job = self._jobs[key] = job_of(replaced(self.base, {"training": self._trainings[tkey],
                                                                "parallelism": self._parallelism[s],
                                                                "hardware": self._hardware(world)}))
        return job

    def _hardware(self, world: World) -> Hardware:
        key = (world.hw.key, world.num_nodes, world.gpus_per_node)
        if key not in self._hardwares:
            hw = world.hw
            self._hardwares[key] = Hardware(gpu=hw.gpu.id, server=hw.server.id if hw.server is not None else None,
                                            num_nodes=world.num_nodes, gpus_per_node=world.gpus_per_node)
        return self._hardwares[key]

    def layout(self, world: World, s: Structure) -> Layout | None:
        key = (world.num_nodes, world.gpus_per_node, s)
        if key not in self._layouts:
            job = self.job(world, s, self.ckpts[0], 1, 1)
            try:
                self._layouts[key] = build_layout(job, self.shape)
            except InvalidRequestError:
                self._layouts[key] = None
        return self._layouts[key]

    # ------------------------------------------------------------------------------------------- memory
    def _memory(self, world: World, s: Structure, ckpt: str, mbs: int, gas: int) -> tuple[int, int, int]:
        """(allocated, hard overhead, soft overhead) at the peak: none of them depends on the GPU type."""
        accumulation: object = gas if s.pp > 1 else gas > 1
        key = (world.num_nodes, world.gpus_per_node, s, ckpt, mbs, accumulation)
        if key not in self._memory_cache:
            layout = self.layout(world, s)
            assert layout is not None
            self.stats.memory_checks += 1
            peak = peak_memory(self.job(world, s, ckpt, mbs, gas), self.shape, layout, world.hw.capacity_bytes)
            self._memory_cache[key] = (peak.peak_allocated, peak.hard_overhead, peak.soft_overhead)
        return self._memory_cache[key]

    def memory_total(self, world: World, s: Structure, ckpt: str, mbs: int, gas: int) -> int:
        """What nvidia-smi shows at the peak (``MemoryPeak.total``)."""
        allocated, _, soft = self._memory(world, s, ckpt, mbs, gas)
        return min(world.hw.capacity_bytes, allocated + soft)

    def memory_need(self, world: World, s: Structure, ckpt: str, mbs: int, gas: int) -> int:
        """Allocated bytes at the peak plus the hard overhead: what must fit (``MemoryPeak.fits``)."""
        allocated, hard, _ = self._memory(world, s, ckpt, mbs, gas)
        return allocated + hard

    def margin(self, world: World, s: Structure) -> float:
        """The safety margin on the memory need, as a fraction: ``memory_margin_pct`` when given, else the memory
        error bar the estimate gives this layout (``estimator.estimate.job_memory_error_bar_pct``, the same call as
        ``estimate``'s), so a plan the planner keeps fits even at the top of its error bar."""
        if self.margin_pct is not None:
            return self.margin_pct / 100.0
        key = (world.num_nodes, world.gpus_per_node, s)
        if key not in self._margins:
            layout = self.layout(world, s)
            if layout is None:
                return 0.0
            job = self.job(world, s, self.ckpts[0], 1, 1)
            self._margins[key] = job_memory_error_bar_pct(job, layout) / 100.0
        return self._margins[key]

    def fits(self, world: World, s: Structure, ckpt: str, mbs: int, gas: int) -> bool:
        """``MemoryPeak.fits`` with ``min_headroom_pct`` of the GPU kept free and the safety margin on the need.
        A micro-batch the screen has shown cannot fit is answered without the exact estimate."""
        if self._screened:
            ok = self._screened.get((world.hw.key, world.num_nodes, world.gpus_per_node))
            if ok is not None:
                row = self._rows[self._group_key(world)].row(s, mbs)
                if row is not None and not ok[row]:
                    return False
        need = self.memory_need(world, s, ckpt, mbs, gas) * (1.0 + self.margin(world, s))
        return need <= world.hw.capacity_bytes * self.free_fraction

    # ----------------------------------------------------------------------------------------- host RAM
    def host_ram_bytes(self, world: World, s: Structure) -> int:
        """Host RAM of the busiest node (``estimator.host.ram``): it depends on the structure, not on the GPU
        type, the micro-batch or the checkpointing."""
        key = (world.num_nodes, world.gpus_per_node, s)
        if key not in self._host_ram:
            layout = self.layout(world, s)
            assert layout is not None
            self.stats.host_checks += 1
            job = self.job(world, s, self.ckpts[0], 1, 1)
            ckpt = checkpoint_size(job, self.shape, layout)
            self._host_ram[key] = host_ram(job, self.shape, layout, ckpt, self.host_options).per_node
        return self._host_ram[key]

    def ram_limit(self, world: World) -> RamLimit:
        """The node's RAM limit: its server's, or that of the server ``estimate()`` suggests for the GPU."""
        key = (world.hw.key, world.gpus_per_node)
        if key not in self._ram_limits:
            server = world.hw.server
            if server is None:
                probe = EstimateRequest(hardware=self._hardware(world))
                server = choose_server(job_of(probe), None, world.hw.gpu, self.catalog)
            self._ram_limits[key] = ram_limit(server)
        return self._ram_limits[key]

    def host_fits(self, world: World, s: Structure) -> bool:
        need, limit = self.host_ram_bytes(world, s), self.ram_limit(world)
        if limit.fits(need):
            return True
        key = (world.hw.key, world.num_nodes, world.gpus_per_node)
        miss = self.stats.host_misses.get(key)
        if miss is None or need < miss.need_bytes:
            self.stats.host_misses[key] = HostMiss(world, need, limit)
        return False

    def _largest_fit(self, world: World, s: Structure, ckpt: str, splits: list[tuple[int, int]], lo: int) -> int:
        """Index of the largest micro-batch that fits (memory grows with it); ``lo`` is known to fit or -1."""
        if lo < 0:
            if not self.fits(world, s, ckpt, *splits[0]):
                return -1
            lo = 0
        hi = len(splits)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.fits(world, s, ckpt, *splits[mid]) else (lo, mid)
        return lo

    # ------------------------------------------------------------------------------------------- screen
    def _group_floors(self, world: World) -> tuple[scr.Floors, list[int]]:
        """The memory floors of a group's structures (they do not depend on the GPU type) and each structure's
        row among them (-1: no valid layout)."""
        key = self._group_key(world)
        if key not in self._floors:
            floors: list[MemoryFloor] = []
            margins: list[float] = []
            rows: list[int] = []
            for s in self.structures(world):
                layout = self.layout(world, s)
                if layout is None or not self.variants(world, s):
                    rows.append(-1)
                    continue
                rows.append(len(floors))
                floors.append(memory_floor(self.job(world, s, self.ckpts[0], 1, 1), self.shape, layout))
                margins.append(self.margin(world, s))
            self._floors[key] = (scr.Floors.of(floors, margins), rows)
        return self._floors[key]

    def _screen_rows(self, world: World) -> _ScreenRows:
        """The (structure, micro-batch) rows of a group, as arrays (they do not depend on the GPU type)."""
        key = self._group_key(world)
        if key not in self._rows:
            floors, rows = self._group_floors(world)
            floor_row: list[int] = []
            micro: list[int] = []
            first: list[int] = []
            start: dict[Structure, tuple[int, dict[int, int]]] = {}
            for s, r in zip(self.structures(world), rows, strict=True):
                if r < 0:
                    first.append(-1)
                    continue
                splits = self.variants(world, s)
                first.append(len(micro))
                start[s] = len(micro), {mbs: j for j, (mbs, _) in enumerate(splits)}
                floor_row += [r] * len(splits)
                micro += [mbs for mbs, _ in splits]
            self._rows[key] = _ScreenRows(floors, np.asarray(floor_row, dtype=np.int64),
                                          np.asarray(micro, dtype=np.int64), np.asarray(first, dtype=np.int64), start)
        return self._rows[key]

    def screen_world(self, world: World) -> set[int]:
        """Screen every (structure, micro-batch) layout of ``world`` at once (:mod:`estimator.planner.screen`):
        keep which micro-batches cannot fit, for :meth:`fits`, and return the indices of the structures whose
        lightest layout cannot fit (or that have no valid layout): nothing of them can."""
        rows = self._screen_rows(world)
        ok = scr.may_fit(rows.floors, rows.floor_row, rows.micro, self.training.seq_len,
                         world.hw.capacity_bytes * self.free_fraction)
        self._screened[(world.hw.key, world.num_nodes, world.gpus_per_node)] = ok
        self.stats.layouts_screened += len(rows.micro) * len(self.ckpts)
        lightest = np.append(ok, True)[rows.first]  # a structure without rows (first = -1) reads False below
        return set(np.flatnonzero(~lightest | (rows.first < 0)).tolist())

    # --------------------------------------------------------------------------------------------- time
    def time(self, world: World, s: Structure, ckpt: str, mbs: int, gas: int) -> StepTime:
        """The step-time model (``timing.step_time_model``: the same stage and seconds as ``step_time``)."""
        layout = self.layout(world, s)
        assert layout is not None
        self.stats.time_evaluations += 1
        job = self.job(world, s, ckpt, mbs, gas)
        return step_time_model(job, self.shape, layout, world.hw.gpu, world.hw.server)

    def lower_bound(self, world: World, s: Structure, splits: list[tuple[int, int]]) -> float:
        """Seconds no variant of ``s`` can beat (module docstring)."""
        most_micro_batches = splits[0][1]
        fewest = splits[-1]
        per_mb = self._micro_batch_s(world, s, fewest[0])
        if per_mb is None:  # no micro-batch model: the FLOPs at the best GEMM rate
            rates = rates_for(world.hw.gpu, self.training.precision)
            compute = self._model_flops / world.size / max(rates.gemm_flops, rates.fp8_flops)
            bubble = compute * (s.pp - 1) / (s.vp * most_micro_batches) if s.pp > 1 else 0.0
        else:
            compute = fewest[1] * per_mb
            smallest = self._micro_batch_s(world, s, splits[0][0]) or 0.0
            bubble = (s.pp - 1) / s.vp * smallest if s.pp > 1 else 0.0
        return compute + bubble + self._tp_bound(world, s, fewest)

    def _micro_batch_s(self, world: World, s: Structure, mbs: int) -> float | None:
        """Forward + backward seconds of one micro-batch without recomputation (``timing.micro_batch``) at one
        accumulation step (the fewest weight-gradient bytes): less than any variant's per-micro-batch time."""
        key = (world.hw.gpu.id, s.framework, s.sharding, s.tp, s.cp, s.pp, s.ep, mbs)
        if key not in self._micro:
            # the first structure to ask prices it (its node count's layout): one the screen dropped may have
            owner = self._micro_owner.get(key, (world, s))
            self._micro[key] = _micro_batch_seconds(self, *owner, mbs)
        return self._micro[key]

    def _claim_bound(self, world: World, s: Structure, splits: list[tuple[int, int]]) -> None:
        """What :meth:`lower_bound` of a screened-out structure would have priced first: the micro-batch times
        are shared across node counts, so the structure that asks first sets them, with or without the screen."""
        def key(mbs: int) -> tuple[object, ...]:
            return (world.hw.gpu.id, s.framework, s.sharding, s.tp, s.cp, s.pp, s.ep, mbs)

        fewest = key(splits[-1][0])
        if fewest in self._micro:
            priced = self._micro[fewest] is not None
        else:
            owner = self._micro_owner.setdefault(fewest, (world, s))
            priced = self.layout(*owner) is not None
        if priced:  # lower_bound asks for the smallest micro-batch only then
            smallest = key(splits[0][0])
            if smallest not in self._micro:
                self._micro_owner.setdefault(smallest, (world, s))

    def _tp_bound(self, world: World, s: Structure, split: tuple[int, int]) -> float:
        if s.tp <= 1:
            return 0.0
        from estimator.training.comm import collective_time, place_group

        fabric = fabric_for(world.hw.gpu, world.hw.server, world.gpus_per_node)
        group = place_group(s.tp, 1, fabric.scale_up)
        mbs, gas = split
        nbytes = 2.0 * mbs * self.training.seq_len / s.cp * self.shape.dims.hidden_size
        pair = collective_time("allgather", nbytes, group, fabric) + collective_time("reducescatter", nbytes,
                                                                                   group, fabric)
        layers = -(-self.shape.dims.num_layers // s.pp)  # the fullest stage of an uneven split
        return gas * pair * TP_COLLECTIVE_PAIRS_PER_LAYER * layers

    # ------------------------------------------------------------------------------------------- search
    def evaluate(self, world: World, s: Structure, splits: list[tuple[int, int]]) -> tuple[Found | None, bool]:
        """The fastest fitting variant of ``s`` and whether every variant fits without checkpointing."""
        layout = self.layout(world, s)
        if layout is None or not self.fits(world, s, self.ckpts[-1], *splits[0]) or not self.host_fits(world, s):
            return None, False
        self.stats.structures_evaluated += 1
        levels: list[tuple[str, int]] = []
        lo = -1
        for ckpt in self.ckpts:
            k = self._largest_fit(world, s, ckpt, splits, lo)
            if k > lo:
                levels.append((ckpt, k))
            lo = max(lo, k)
            if k == len(splits) - 1:
                break
        fits_all = bool(levels) and levels[0] == (self.ckpts[0], len(splits) - 1)
        best: Found | None = None
        for ckpt, k in levels:
            if ckpt == "full" and best is not None and not _recompute_may_pay(best.step):
                break
            for found in self._probe(world, s, layout, ckpt, splits, k):
                if best is None or found.step_time_s < best.step_time_s:
                    best = found
        return best, fits_all

    def _probe(self, world: World, s: Structure, layout: Layout, ckpt: str, splits: list[tuple[int, int]],
               k: int) -> list[Found]:
        out: list[Found] = []
        for i in range(k, max(-1, k - MAX_PIPELINE_PROBES), -1):
            mbs, gas = splits[i]
            t = self.time(world, s, ckpt, mbs, gas)
            if out and t.step_time_s >= out[-1].step_time_s:
                break
            out.append(Found(world, s, ckpt, mbs, gas, layout.dp, t, self.request(world, s, ckpt, mbs, gas),
                             self.memory_total(world, s, ckpt, mbs, gas), self.memory_need(world, s, ckpt, mbs, gas),
                             self.host_ram_bytes(world, s)))
            if s.pp == 1:
                break
        return out

    @staticmethod
    def _duplicate(found: list[Found], new: Found) -> bool:
        """Keep one layout per structure up to virtual stages (they differ by a sliver of bubble)."""
        for i, f in enumerate(found):
            if f.structure.without_vp == new.structure.without_vp:
                if new.step_time_s < f.step_time_s:
                    found[i] = new
                return True
        return False

    def any_fit(self, world: World) -> Structure | None:
        """A structure with a variant that fits (the most memory-saving ones are tried first), or ``None``."""
        structs = sorted(self.structures(world), key=lambda s: (-s.saving, -s.model_parallel, s.tp))
        budget.charge(len(structs) * ANY_FIT_COST)
        for s in structs:
            budget.check_time()
            splits = self.variants(world, s)
            if (splits and self.layout(world, s) is not None and self.fits(world, s, self.ckpts[-1], *splits[0])
                    and self.host_fits(world, s)):
                return s
        return None

    def search_world(self, world: World) -> list[Found]:
        """The ``keep`` fastest structures of one world (their best variants), fastest first."""
        structs = self.structures(world)
        if not self.prepaid:  # plan() charges its whole space up front; the reverse questions world by world
            budget.charge(self.space_size(world))
        self.stats.worlds += 1
        self.stats.structures += len(structs)
        order = []
        ruled = self.screen_world(world) if self.screen else set()
        any_splits = False
        for i, s in enumerate(structs):
            splits = self.variants(world, s)
            if splits:
                any_splits = True
                if i in ruled:  # nothing of it fits: the exact search would only find that out
                    self.stats.screened_out += 1
                    self._claim_bound(world, s, splits)
                    continue
                order.append((self.lower_bound(world, s, splits), s.saving, i, s, splits))
        order.sort(key=lambda o: (o[0], o[1], o[2]))
        found: list[Found] = []
        times: list[float] = []
        dominated: dict[tuple[object, ...], int] = {}
        for idx, (bound, _, _, s, splits) in enumerate(order):
            budget.check_time()
            if len(found) >= self.keep and bound >= times[self.keep - 1]:
                self.stats.pruned_by_bound += len(order) - idx
                break
            if s.chain in dominated and s.saving > dominated[s.chain]:
                self.stats.pruned_by_dominance += 1
                continue
            best, fits_all = self.evaluate(world, s, splits)
            if fits_all:
                dominated[s.chain] = min(dominated.get(s.chain, s.saving), s.saving)
            if best is not None and not self._duplicate(found, best):
                pos = bisect.bisect(times, best.step_time_s)
                times.insert(pos, best.step_time_s)
                found.insert(pos, best)
        if not found:
            host = (world.hw.key, world.num_nodes, world.gpus_per_node) in self.stats.host_misses
            reason = "no valid layout" if not any_splits else "host ram" if host else "nothing fits"
            self.stats.empty_worlds.append((world, reason))
        return found[: self.keep]


@dataclass(frozen=True)
class _ScreenRows:
    """A group's screen rows: each (structure, micro-batch) as its structure's floor row and its micro-batch;
    ``first`` the first row of each structure (-1: none), ``start`` each screened structure's first row and its
    micro-batches' offsets."""

    floors: scr.Floors
    floor_row: npt.NDArray[np.int64]
    micro: npt.NDArray[np.int64]
    first: npt.NDArray[np.int64]
    start: dict[Structure, tuple[int, dict[int, int]]]

    def row(self, s: Structure, mbs: int) -> int | None:
        entry = self.start.get(s)
        if entry is None:
            return None
        offset = entry[1].get(mbs)
        return None if offset is None else entry[0] + offset


def _model_flops_per_step(shape: CachedShape, training: Any, sequences: int) -> float:
    """Forward + backward FLOPs of one step without recomputation: 6 N T for the linears (4 N T with a frozen
    base: no weight gradients) and 3.5x the causal attention forward (``estimator.training.flops`` counts the same)."""
    a = shape.dims
    tokens = float(sequences * training.seq_len)
    linear = shape.active_params() - shape.embedding_params() + (a.vocab_size * a.hidden_size
                                                                if a.tied_embeddings else 0)
    per_param = 6.0 if training.method == "full" else 4.0
    s = float(training.seq_len)
    w = min(s, float(a.sliding_window or s))
    pairs = s * w - w * w / 2.0
    d = float(shape.head_dim)
    attn_fwd = 2.0 * a.num_attention_heads * pairs * 2.0 * d * a.num_layers * sequences
    return per_param * linear * tokens + 3.5 * attn_fwd


def _recompute_may_pay(t: StepTime) -> bool:
    """Full recomputation costs about one more forward (a third of the compute); a larger micro-batch can only
    win that back from what is paid per micro-batch: exposed communication, offload traffic, the bubble."""
    return t.exposed_communication_s + t.offload_s + t.bubble_s > FULL_RECOMPUTE_SHARE * t.compute_s


def _micro_batch_seconds(ctx: SearchContext, world: World, s: Structure, mbs: int) -> float | None:
    layout = ctx.layout(world, s)
    if layout is None:
        return None
    try:
        from estimator.training.flops import workload
        from estimator.training.timing import micro_batch, style_for
    except ImportError:  # pragma: no cover - the step-time model renamed its parts
        return None
    job = ctx.job(world, s, "none", mbs, 1)
    rates = rates_for(world.hw.gpu, ctx.training.precision)
    work = workload(job, ctx.shape, layout)
    return float(micro_batch(job, ctx.shape, layout, work, rates, style_for(job, layout)).total)
