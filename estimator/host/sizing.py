"""Whole-node sizing (issue #8): host RAM, local NVMe, network and power of the nodes a training job runs on.

Entry points: :func:`host_sizing` (everything, as a frozen :class:`HostSizing`) and :func:`host_result` (the
response's :class:`~estimator.response.HostResult`). The parts live in ``ram.py`` (RAM),
``checkpoint.py`` (checkpoint bytes), ``network.py`` (inter-node traffic), ``tensors.py`` (per-tensor shapes)
and ``estimator/host_options.py`` (defaults and options, ``data/host_defaults.yaml``).

Catalog objects are read by attribute (``server.max_ram_gib``, ``ram_gib_configured``, ``memory_type``,
``dimm_slots``, ``nvme_bays``, ``nics``, ``max_power_kw``, ``gpu_count``; ``gpu.tdp_w``, ``memory_bytes``,
``bf16_tflops_dense``); a missing attribute falls back to the defaults file and says so in the notes.

Host RAM limit of a node (:func:`ram_limit`): the server's ``max_ram_gib``; when the catalog does not know it
(or no server is chosen), ``ram.default_max_ram_gib`` of the defaults file (32x 128 GB, the largest common
2-socket configuration), with a warning. A server whose configured RAM equals its maximum (the DGX systems) is
a fixed configuration: its RAM is part of the server, so no DIMMs are recommended or billed separately.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, TypeVar

from estimator.construct import trusted
from estimator.facility.rack import (
    btu_per_hour,
    default_rack_kw,
    default_rack_units,
    node_peak_power_w,
    nodes_per_rack,
)
from estimator.host.network import NetworkTraffic, inter_node_traffic
from estimator.host.ram import HostRam, host_ram
from estimator.host_options import GIB, HostOptions, host_defaults, resolved_options_for
from estimator.job import Job
from estimator.memo import BoundedMemo, ObjectMemo
from estimator.messages import Num, Text, join
from estimator.model.spec import ModelShape
from estimator.response import HostResult
from estimator.training.checkpoint import CheckpointSize, checkpoint_size, checkpoint_target
from estimator.training.layout import Layout
from hardware_catalog import Catalog, Gpu, Server

__all__ = [
    "DimmConfig",
    "HostSizing",
    "NicConfig",
    "NvmeConfig",
    "RamLimit",
    "host_result",
    "host_sizing",
    "ram_limit",
    "recommend_dimms",
    "recommend_nics",
    "recommend_nvme",
]

TB: Final = 10**12
_COMPUTE_PURPOSES: Final = {"gpu-fabric", "compute", "east-west", "backend", "scale-out"}


@dataclass(frozen=True)
class DimmConfig:
    count: int
    size_gib: int
    memory_type: str = "DDR5"
    fixed: bool = False  # the server's own, non-configurable RAM (``count`` is 1 and ``size_gib`` the total)

    @property
    def total_gib(self) -> int:
        return self.count * self.size_gib

    def __str__(self) -> str:
        if self.fixed:
            return Text("%(total)s GiB %(type)s (fixed configuration of the server)", total=self.total_gib,
                        type=self.memory_type)
        return Text("%(count)sx %(size)s GB %(type)s RDIMM (%(total)s GiB)", count=self.count, size=self.size_gib,
                    type=self.memory_type, total=self.total_gib)


@dataclass(frozen=True)
class RamLimit:
    """The most host RAM one node can hold: the server's published maximum, else the default ceiling."""

    bytes: int
    known: bool  # the catalog gives the server's maximum
    fixed: bool  # the server ships with exactly that much (configured == maximum)
    memory_type: str
    server_name: str | None

    def fits(self, need_bytes: int) -> bool:
        return need_bytes <= self.bytes

    def describe(self) -> str:
        gib = Num(self.bytes / GIB, ",.0f")
        if self.known:
            if self.fixed:
                return Text("the %(server)s ships with %(gib)s GiB", server=self.server_name, gib=gib)
            return Text("the %(server)s takes at most %(gib)s GiB", server=self.server_name, gib=gib)
        where = Text("the catalog has no RAM maximum for the %(server)s", server=self.server_name) \
            if self.server_name else Text("no server is chosen")
        return Text("%(where)s; the default ceiling is %(gib)s GiB, 32x 128 GB, the largest common 2-socket "
                    "configuration", where=where, gib=gib)


@dataclass(frozen=True)
class NvmeConfig:
    count: int
    size_tb: float
    write_bytes_per_s_each: float

    @property
    def total_bytes(self) -> int:
        return int(self.count * self.size_tb * TB)

    def __str__(self) -> str:
        return Text("%(count)sx %(tb)s TB NVMe", count=self.count, tb=Num(self.size_tb, "g"))


@dataclass(frozen=True)
class NicConfig:
    count: int
    gbps: int

    @property
    def total_gbps(self) -> int:
        return self.count * self.gbps

    def __str__(self) -> str:
        return f"{self.count}x {self.gbps} Gb/s"


class HostSizing:
    ram: Final[HostRam]
    dimms: Final[DimmConfig | None]
    server_max_ram_bytes: Final[int | None]
    checkpoint: Final[CheckpointSize]
    checkpoint_target: Final[str]
    checkpoint_write_s: Final[float]
    checkpoint_write_bytes_per_s_needed: Final[float]
    nvme_bytes: Final[int]
    nvme: Final[NvmeConfig | None]
    dataset_bytes: Final[int]
    dataset_read_bytes_per_s: Final[float]
    network: Final[NetworkTraffic]
    network_bytes_per_s_needed: Final[float]
    network_bytes_per_s_average: Final[float]
    nics: Final[NicConfig | None]
    fabric: Final[str]
    step_time_s: Final[float]
    compute_s: Final[float]
    step_time_source: Final[str]
    power_w_peak: Final[float]
    power_w_average: Final[float]
    btu_per_h: Final[float]
    nodes_per_rack: Final[int]
    fits_server: Final[bool]
    warnings: Final[list[str]]
    notes: Final[list[str]]

    def __init__(self, ram: HostRam, dimms: DimmConfig | None, server_max_ram_bytes: int | None,
                 checkpoint: CheckpointSize, checkpoint_target: str, checkpoint_write_s: float,
                 checkpoint_write_bytes_per_s_needed: float, nvme_bytes: int, nvme: NvmeConfig | None,
                 dataset_bytes: int, dataset_read_bytes_per_s: float, network: NetworkTraffic,
                 network_bytes_per_s_needed: float, network_bytes_per_s_average: float,
                 nics: NicConfig | None, fabric: str, step_time_s: float, compute_s: float,
                 step_time_source: str, power_w_peak: float, power_w_average: float, btu_per_h: float,
                 nodes_per_rack: int, fits_server: bool, warnings: list[str], notes: list[str]) -> None:
        self.ram = ram
        self.dimms = dimms
        self.server_max_ram_bytes = server_max_ram_bytes
        self.checkpoint = checkpoint
        self.checkpoint_target = checkpoint_target
        self.checkpoint_write_s = checkpoint_write_s
        self.checkpoint_write_bytes_per_s_needed = checkpoint_write_bytes_per_s_needed
        self.nvme_bytes = nvme_bytes
        self.nvme = nvme
        self.dataset_bytes = dataset_bytes
        self.dataset_read_bytes_per_s = dataset_read_bytes_per_s
        self.network = network
        self.network_bytes_per_s_needed = network_bytes_per_s_needed
        self.network_bytes_per_s_average = network_bytes_per_s_average
        self.nics = nics
        self.fabric = fabric
        self.step_time_s = step_time_s
        self.compute_s = compute_s
        self.step_time_source = step_time_source
        self.power_w_peak = power_w_peak
        self.power_w_average = power_w_average
        self.btu_per_h = btu_per_h
        self.nodes_per_rack = nodes_per_rack
        self.fits_server = fits_server
        self.warnings = warnings
        self.notes = notes


# ----------------------------------------------------------------------------------------------- catalog access
T = TypeVar("T")
_PER_SERVER: Final[dict[tuple[str, int], tuple[Any, Any]]] = {}


def _per_server(kind: str, server: Server | None, compute: Callable[[Any], T]) -> T:
    """``compute(server)``, memoised per server object (the entry keeps the server, so a reused ``id`` cannot
    match another one): what the catalog says about a server does not change between estimates."""
    key = (kind, id(server))
    found = _PER_SERVER.get(key)
    if found is not None and found[0] is server:
        value: T = found[1]
        return value
    if len(_PER_SERVER) > 1024:
        _PER_SERVER.clear()
    value = compute(server)
    _PER_SERVER[key] = (server, value)
    return value


def _attr(obj: Any, *names: str, default: Any = None) -> Any:
    if obj is None:
        return default
    for name in names:
        value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if value is not None:
            return value
    return default


def _server_nics(server: Server | None) -> list[tuple[int, float, str, str]]:
    """(count, Gb/s, kind, purpose) of every NIC group of a catalog server."""
    out = []
    for nic in _attr(server, "nics", default=[]) or []:
        out.append((int(_attr(nic, "count", default=1)), float(_attr(nic, "gbps", "speed_gbps", default=0)),
                    str(_attr(nic, "kind", "type", default="")), str(_attr(nic, "purpose", default="compute"))))
    return out


def _compute_nic_gbps(server: Server | None) -> float | None:
    return _per_server("compute_nic_gbps", server, _compute_nic_gbps_uncached)


def _compute_nic_gbps_uncached(server: Server | None) -> float | None:
    nics = _server_nics(server)
    if not nics:
        return None
    return sum(c * s for c, s, _, purpose in nics if purpose.lower() in _COMPUTE_PURPOSES)


# ----------------------------------------------------------------------------------------------------- timing
def _step_times(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu,
                time: Any) -> tuple[float, float, str]:
    """(step time, compute time, source): the step-time model's when given, else FLOPs at a fallback MFU."""
    if time is not None and _attr(time, "step_time_s", default=0) > 0:
        step = float(time.step_time_s)
        compute = float(_attr(time, "compute_s", default=step)) or step
        return step, compute, "step-time model"
    t = job.training
    d = host_defaults()
    tokens = layout.tokens_per_step(t)
    mult = 6.0 if t.method == "full" else 4.0  # LoRA: no weight gradients of the frozen base
    if t.activation_checkpointing == "full":
        mult += 2.0
    flops = mult * shape.active_params() * tokens
    key = {"fp32": "tf32_tflops_dense", "fp8-mixed": "fp8_tflops_dense"}.get(t.precision, "bf16_tflops_dense")
    peak = float(_attr(gpu, key, "bf16_tflops_dense", default=0.0) or 0.0)
    if peak <= 0:
        peak = 300.0
    compute = flops / (layout.world_size * peak * 1e12 * d.num("network", "fallback_mfu"))
    return compute, compute, Text("%(mfu)s MFU (no step-time model)", mfu=Num(d.num("network", "fallback_mfu"), ".0%"))


# -------------------------------------------------------------------------------------------------------- RAM
def ram_limit(server: Server | None) -> RamLimit:
    """The node's host RAM limit (module docstring)."""
    return _per_server("ram_limit", server, _ram_limit)


def _ram_limit(server: Server | None) -> RamLimit:
    max_gib = float(_attr(server, "max_ram_gib", default=0) or 0)
    configured = float(_attr(server, "ram_gib_configured", default=0) or 0)
    kind = str(_attr(server, "memory_type", default="DDR5"))
    name = _attr(server, "name", default=None)
    if max_gib:
        return RamLimit(int(max_gib * GIB), True, configured == max_gib, kind, name)
    return RamLimit(int(host_defaults().num("ram", "default_max_ram_gib") * GIB), False, False, kind, name)


def _dimm_options(server: Server | None) -> tuple[DimmConfig, ...]:
    return _per_server("dimm_options", server, _dimm_options_uncached)


def _dimm_options_uncached(server: Server | None) -> tuple[DimmConfig, ...]:
    d = host_defaults()
    limit = ram_limit(server)
    slots = int(_attr(server, "dimm_slots", default=0) or 0)
    counts = [c for c in d.get("ram", "dimm_counts") if not slots or (c <= slots and slots % c == 0)]
    if slots and slots not in counts:
        counts.append(slots)
    sizes = [s for s in d.get("ram", "dimm_sizes_gib")
             if limit.memory_type == "DDR5" or s not in d.get("ram", "ddr5_only_dimm_sizes_gib")]
    out = [DimmConfig(c, s, limit.memory_type) for c in counts for s in sizes]
    return tuple(o for o in out if o.total_gib * GIB <= limit.bytes)


_DIMMS: Final[ObjectMemo[DimmConfig | None]] = ObjectMemo(4096)
_NVMES: Final[ObjectMemo[NvmeConfig | None]] = ObjectMemo(4096)


def recommend_dimms(need_bytes: int, server: Server | None) -> DimmConfig | None:
    """The smallest usual DIMM set (of the server's memory type) holding the need plus the headroom; for a
    fixed-configuration server its own RAM, when that is enough. Memoised per server object and need."""
    return _DIMMS.get_or_compute((server,), (need_bytes,), lambda: _recommend_dimms(need_bytes, server))


def _recommend_dimms(need_bytes: int, server: Server | None) -> DimmConfig | None:
    d = host_defaults()
    need_gib = need_bytes * (1 + d.num("ram", "headroom_fraction")) / GIB
    limit = ram_limit(server)
    if limit.fixed:
        total = int(limit.bytes // GIB)
        return DimmConfig(1, total, limit.memory_type, fixed=True) if total >= need_gib else None
    slots = int(_attr(server, "dimm_slots", default=0) or 0) or 32
    ok = [o for o in _dimm_options(server) if o.total_gib >= need_gib]
    if not ok:
        return None
    return min(ok, key=lambda o: (o.total_gib, abs(o.count - slots / 2)))


# ------------------------------------------------------------------------------------------------ storage
_WRITE_GBPS: Final[dict[tuple[int, tuple[str, ...], str, int | None], tuple[Any, float | None]]] = {}


def _catalog_write_gbps(catalog: Catalog | None, kinds: tuple[str, ...], scope: str,
                        pcie_gen: int | None) -> float | None:
    """Write GB/s of the catalog's storage class of that kind and scope (closest PCIe generation), memoised per
    storage table (the entry keeps the table, so a reused ``id`` cannot match another one)."""
    storage = _attr(catalog, "storage", default={}) or {}
    key = (id(storage), kinds, scope, pcie_gen)
    found = _WRITE_GBPS.get(key)
    if found is not None and found[0] is storage:
        return found[1]
    if len(_WRITE_GBPS) > 256:
        _WRITE_GBPS.clear()
    value = _storage_write_gbps(storage, kinds, scope, pcie_gen)
    _WRITE_GBPS[key] = (storage, value)
    return value


def _storage_write_gbps(storage: Any, kinds: tuple[str, ...], scope: str, pcie_gen: int | None) -> float | None:
    rows = [s for s in storage.values() if _attr(s, "kind") in kinds and _attr(s, "scope") == scope
            and _attr(s, "write_gbps")]
    if not rows:
        return None
    if pcie_gen is not None:
        rows.sort(key=lambda s: abs(int(_attr(s, "pcie_gen", default=pcie_gen) or pcie_gen) - pcie_gen))
    return float(_attr(rows[0], "write_gbps"))


def _nvme_write_bps(server: Server | None, catalog: Catalog | None = None) -> float:
    d = host_defaults()
    gen = int(_attr(server, "pcie_gen", default=4) or 4)
    from_catalog = _catalog_write_gbps(catalog, ("local-nvme",), "per-drive", gen)
    if from_catalog:
        return from_catalog * 1e9
    return d.num("storage", "nvme_write_gbps_gen5" if gen >= 5 else "nvme_write_gbps_gen4") * 1e9


def _shared_write_bps(catalog: Catalog) -> float:
    from_catalog = _catalog_write_gbps(catalog, ("parallel-fs", "nfs"), "per-node", None)
    return (from_catalog or host_defaults().num("storage", "shared_fs_write_gbps_per_node")) * 1e9


@lru_cache(maxsize=256)
def _nvme_options(bays: int, sizes_tb: tuple[float, ...]) -> tuple[tuple[int, int, float], ...]:
    """(total bytes, count, drive TB) of every drive set, smallest first and, at equal size, most drives first."""
    return tuple(sorted(((int(c * s * TB), c, s) for c in range(1, bays + 1) for s in sizes_tb),
                        key=lambda o: (o[0], -o[1])))


def recommend_nvme(need_bytes: int, need_write_bps: float, server: Server | None,
                   catalog: Catalog) -> NvmeConfig | None:
    """The smallest drive set (most drives at equal size) holding ``need_bytes`` and writing ``need_write_bps``;
    memoised per server and catalog object and need."""
    return _NVMES.get_or_compute((server, catalog), (need_bytes, need_write_bps),
                                 lambda: _recommend_nvme(need_bytes, need_write_bps, server, catalog))


def _recommend_nvme(need_bytes: int, need_write_bps: float, server: Server | None,
                    catalog: Catalog) -> NvmeConfig | None:
    d = host_defaults()
    bays = int(_attr(server, "nvme_bays", default=8) or 8)
    each = _nvme_write_bps(server, catalog)
    for total, count, size in _nvme_options(bays, tuple(d.get("storage", "nvme_drive_tb"))):
        if total >= need_bytes and count * each >= need_write_bps:
            return NvmeConfig(count, size, each)
    return None


def _dataset(job: Job, shape: ModelShape, options: HostOptions) -> tuple[int, int]:
    """(dataset bytes, bytes per token) of the pre-tokenised training data."""
    d = host_defaults()
    per_token = int(d.num("storage", "bytes_per_token_small_vocab" if shape.dims.vocab_size < 65500
                          else "bytes_per_token_large_vocab"))
    if options.dataset_bytes is not None:
        return options.dataset_bytes, per_token
    tokens = job.training.train_tokens or 0
    return int(tokens * per_token), per_token


# ------------------------------------------------------------------------------------------------ network
def recommend_nics(need_gbps: float, gpus_per_node: int, pcie_gen: int = 5) -> NicConfig | None:
    """Smallest standard GPU-fabric NIC set with at least ``need_gbps``: 1, 2, 4 or 8 NICs (at most one per
    GPU), each no faster than its PCIe x16 slot carries (Gen4 x16 ~ 256 Gb/s, Gen5 ~ 512 Gb/s: 800 Gb/s needs
    Gen6, ConnectX-8); ties go to fewer, faster NICs (fewer switch ports and cables)."""
    # the options in (total Gb/s, count) order, stably sorted: the first that is enough is the minimum
    return next((o for o in _nic_options_by_size(gpus_per_node, pcie_gen) if o.count * o.gbps >= need_gbps), None)


@lru_cache(maxsize=256)
def _nic_options_by_size(gpus_per_node: int, pcie_gen: int) -> tuple[NicConfig, ...]:
    return tuple(sorted(_nic_options(gpus_per_node, pcie_gen), key=lambda o: (o.total_gbps, o.count)))


@lru_cache(maxsize=256)
def _nic_options(gpus_per_node: int, pcie_gen: int) -> tuple[NicConfig, ...]:
    """Every NIC set :func:`recommend_nics` chooses from: 1, 2, 4 or 8 NICs (at most one per GPU) of the usual
    speeds that the PCIe slot carries."""
    d = host_defaults()
    slot_gbps = {3: 128, 4: 256, 5: 512}.get(pcie_gen, 1024)
    counts = [c for c in (1, 2, 4, 8) if c <= max(1, gpus_per_node)]
    speeds = [int(s) for s in d.get("network", "nic_speeds_gbps") if int(s) <= slot_gbps]
    return tuple(NicConfig(c, s) for c in counts for s in speeds)


def _fabric_note(job: Job, layout: Layout, traffic: NetworkTraffic, utilisation: float,
                 nics: NicConfig | None) -> str:
    if layout.num_nodes <= 1:
        return Text("Single node: no inter-node fabric is needed for training (NVLink inside the node).")
    d = host_defaults()
    ports = layout.num_nodes * (nics.count if nics else layout.gpus_per_node)
    switch_ports = int(d.num("network", "switch_ports_400g"))
    parts: list[str] = []
    if traffic.latency_sensitive:
        parts.append(Text("Tensor, context or expert parallelism crosses nodes: many small blocking messages, so "
                          "InfiniBand NDR's lower latency and adaptive routing matter; prefer it over RoCE."))
    allreduce = sum(v for k, v in traffic.by_kind.items() if "all-reduce" in k)
    if allreduce > 0.5 * traffic.bytes_per_step_per_node and utilisation > 0.5:
        parts.append(Text("Gradient all-reduce dominates and the links are busy: InfiniBand NDR with SHARP "
                          "in-network reduction moves (n-1)/(n+1) instead of 2(n-1)/n of the buffer (nccl-tests "
                          "PERFORMANCE.md), about half; RoCE has no equivalent."))
    if ports > switch_ports:
        parts.append(Text("%(ports)s NIC ports need more than one %(switch)s-port switch (a leaf-spine fabric): "
                          "congestion control and adaptive routing matter; InfiniBand NDR, or a tuned RoCE fabric "
                          "(Llama 3 trained on both, arXiv 2407.21783 Sec. 3.3.1).", ports=ports,
                          switch=switch_ports))
    if not parts:
        parts.append(Text("400 GbE RoCE and InfiniBand NDR are equivalent here (400 Gb/s per port either way); "
                          "the step uses about %(share)s of the recommended NICs' budget.",
                          share=Num(utilisation, ".0%")))
    return join(parts)


# --------------------------------------------------------------------------------------------------- power
def _power(layout: Layout, gpu: Gpu, server: Server | None) -> tuple[float, float, str]:
    d = host_defaults()
    ratio = d.num("power", "server_watts_per_gpu_tdp")
    peak = node_peak_power_w(gpu, server, layout.gpus_per_node, ratio)  # estimator.facility.rack, shared with the TCO
    source = "catalog max_power_kw" if _attr(server, "max_power_kw", default=None) else \
        Text("%(ratio)s x GPU TDP (DGX H100 ratio)", ratio=ratio)
    return peak, peak * d.num("power", "average_draw_fraction"), source


def _nodes_per_rack(peak_w: float, server: Server | None, rack_kw: float) -> int:
    rack_nodes = _attr(server, "rack_nodes", default=None)
    if rack_nodes:  # a rack-scale system (NVL72): its trays come in its own whole rack, at its own power
        return int(rack_nodes)
    ru = int(_attr(server, "rack_units", "ru", "height_u", default=0) or 0)
    units, reserved = default_rack_units()  # the rack plan's geometry too (estimator.facility.rack)
    return nodes_per_rack(peak_w / 1000, rack_kw, ru, units, reserved)


# ---------------------------------------------------------------------------------------------------- steps
class _Messages:
    """What the steps tell the reader, in the order they say it."""

    def __init__(self) -> None:
        self.warnings: Final[list[str]] = []
        self.notes: Final[list[str]] = []


@dataclass(frozen=True)
class _RamStep:
    ram: HostRam
    dimms: DimmConfig | None
    server_max_ram_bytes: int | None
    fits: bool


class _StorageStep:
    target: Final[str]
    write_s: Final[float]
    write_bytes_per_s_needed: Final[float]
    nvme_bytes: Final[int]
    nvme: Final[NvmeConfig | None]
    dataset_bytes: Final[int]
    dataset_read_bytes_per_s: Final[float]
    fits: Final[bool]

    def __init__(self, target: str, write_s: float, write_bytes_per_s_needed: float, nvme_bytes: int,
                 nvme: NvmeConfig | None, dataset_bytes: int, dataset_read_bytes_per_s: float, fits: bool) -> None:
        self.target = target
        self.write_s = write_s
        self.write_bytes_per_s_needed = write_bytes_per_s_needed
        self.nvme_bytes = nvme_bytes
        self.nvme = nvme
        self.dataset_bytes = dataset_bytes
        self.dataset_read_bytes_per_s = dataset_read_bytes_per_s
        self.fits = fits


class _NetworkStep:
    traffic: Final[NetworkTraffic]
    bytes_per_s_needed: Final[float]
    bytes_per_s_average: Final[float]
    nics: Final[NicConfig | None]
    fabric: Final[str]
    fits: Final[bool]

    def __init__(self, traffic: NetworkTraffic, bytes_per_s_needed: float, bytes_per_s_average: float,
                 nics: NicConfig | None, fabric: str, fits: bool) -> None:
        self.traffic = traffic
        self.bytes_per_s_needed = bytes_per_s_needed
        self.bytes_per_s_average = bytes_per_s_average
        self.nics = nics
        self.fabric = fabric
        self.fits = fits


@dataclass(frozen=True)
class _PowerStep:
    peak_w: float
    average_w: float
    nodes_per_rack: int


_RAM_STEPS: Final[ObjectMemo[tuple[_RamStep, list[str], list[str]]]] = ObjectMemo(1024)


def _ram_step(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
              o: HostOptions, ckpt: CheckpointSize, out: _Messages) -> _RamStep:
    """Host RAM against the server (or the default ceiling) and the usual DIMM configurations. Memoised on the
    objects it reads (the memoised :func:`host_ram` result, the GPU, the server, the shape), the GPUs per node
    and the model loading; the messages it adds are replayed."""
    ram = host_ram(job, shape, layout, ckpt, o)

    def compute() -> tuple[_RamStep, list[str], list[str]]:
        step = _Messages()
        return _ram_step_uncached(ram, shape, layout, gpu, server, o, step), step.warnings, step.notes

    result, warnings, notes = _RAM_STEPS.get_or_compute((ram, gpu, server, shape),
                                                        (layout.gpus_per_node, o.model_loading), compute)
    out.warnings.extend(warnings)
    out.notes.extend(notes)
    return result


def _ram_step_uncached(ram: HostRam, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
                       o: HostOptions, out: _Messages) -> _RamStep:
    d = host_defaults()
    limit = ram_limit(server)
    max_ram = limit.bytes if limit.known else None
    dimms = recommend_dimms(ram.per_node, server)
    ram_fits = limit.fits(ram.per_node)
    warnings, notes = out.warnings, out.notes
    if not ram_fits:
        warnings.append(Text("Host RAM: the node needs %(gib)s GiB, more than it can hold (%(limit)s). Offload "
                             "less, shard over more nodes, or load the model on the meta device.",
                             gib=Num(ram.per_node / GIB, ",.0f"), limit=limit.describe()))
    else:
        if not limit.known:
            warnings.append(Text("Host RAM: %(limit)s; check the %(gib)s GiB per node against the server's "
                                 "specification.", limit=limit.describe(), gib=Num(ram.per_node / GIB, ",.0f")))
        if dimms is None:
            headroom = host_defaults().num("ram", "headroom_fraction")
            warnings.append(Text("Host RAM: no common %(type)s DIMM configuration holds %(gib)s GiB with the "
                                 "%(headroom)s headroom.", type=limit.memory_type, gib=Num(ram.per_node / GIB, ",.0f"),
                                 headroom=Num(headroom, ".0%")))
    gpu_mem = int(_attr(gpu, "memory_bytes", default=0) or 0) * layout.gpus_per_node
    if gpu_mem and ram.per_node > d.num("ram", "nvidia_host_to_gpu_memory_ratio") * gpu_mem:
        notes.append(Text("Host RAM is more than %(ratio)sx the node's GPU memory (the DGX ratio): CPU offload is "
                          "what needs it.", ratio=Num(d.num("ram", "nvidia_host_to_gpu_memory_ratio"), "g")))
    if ram.node_phase == "load":
        notes.append(Text("Host RAM peaks while the model loads (%(loading)s); training needs %(gib)s GiB per "
                          "node.", loading=o.model_loading, gib=Num(ram.train_phase_node_bytes / GIB, ",.0f")))
    if o.model_loading != "every-rank" and layout.gpus_per_node > 1:
        every = shape.total_params() * d.num("ram", "model_load_bytes_per_param") * layout.gpus_per_node
        notes.append(Text("Loading the full model in every process (plain from_pretrained per rank) would need "
                          "%(gib)s GiB per node for the weights alone.", gib=Num(every / GIB, ",.0f")))
    return _RamStep(ram, dimms, max_ram, ram_fits)


def _storage_step(job: Job, shape: ModelShape, layout: Layout, server: Server | None, catalog: Catalog,
                  o: HostOptions, ckpt: CheckpointSize, steps_per_s: float, time: Any, out: _Messages) -> _StorageStep:
    """Checkpoints (target, write time and rate), the dataset and the local NVMe that holds them
    (:func:`_storage_plan`), and the dataloader's read rate at the step's throughput."""
    plan, warnings, notes, per_token = _storage_plan(job, shape, layout, server, catalog, o, ckpt)
    out.warnings.extend(warnings)
    out.notes.extend(notes)
    tokens_per_s_node = layout.tokens_per_step(job.training) * steps_per_s / layout.num_nodes
    if time is not None and _attr(time, "tokens_per_s", default=0):
        tokens_per_s_node = float(time.tokens_per_s) / layout.num_nodes
    read_bps = tokens_per_s_node * per_token
    return _StorageStep(plan.target, plan.write_s, plan.write_bytes_per_s_needed, plan.nvme_bytes, plan.nvme,
                        plan.dataset_bytes, read_bps, plan.fits)


_StoragePlan = tuple[_StorageStep, list[str], list[str], int]
_STORAGE: Final[ObjectMemo[_StoragePlan]] = ObjectMemo(1024)


def _storage_plan(job: Job, shape: ModelShape, layout: Layout, server: Server | None, catalog: Catalog,
                  o: HostOptions, ckpt: CheckpointSize) -> _StoragePlan:
    """(the storage step without its read rate, its warnings, its notes, dataset bytes per token): none of it
    depends on the step time or the batch shape, so it is memoised on the objects it reads (the memoised
    checkpoint size, the resolved options, the server, the catalog), the nodes, the token budget and whether
    the vocabulary is small (:func:`_dataset`); the messages are replayed."""
    key = (layout.num_nodes, job.training.train_tokens, shape.dims.vocab_size < 65500)
    return _STORAGE.get_or_compute((ckpt, o, server, catalog), key,
                                   lambda: _storage_plan_uncached(job, shape, layout, server, catalog, o, ckpt))


def _storage_plan_uncached(job: Job, shape: ModelShape, layout: Layout, server: Server | None,
                           catalog: Catalog, o: HostOptions, ckpt: CheckpointSize) -> _StoragePlan:
    d = host_defaults()
    warnings: list[str] = []
    notes: list[str] = []
    target = checkpoint_target(layout.num_nodes, o.checkpoint_target)
    interval = float(o.checkpoint_interval_s or 3600)
    share = float(o.checkpoint_max_time_share or 0.05)
    per_node_ckpt = ckpt.per_node_bytes
    need_write = per_node_ckpt / interval if o.async_checkpoint else per_node_ckpt / (share * interval)
    dataset, per_token = _dataset(job, shape, o)
    if not dataset:
        notes.append(Text("No dataset size: set training.train_tokens (or the dataset_bytes option) to size it."))
    dataset_local = dataset if o.dataset_on_local_nvme else 0
    kept = int(o.checkpoints_kept or 2)
    scratch = int(d.num("storage", "scratch_gib") * GIB)
    nvme_need = dataset_local + scratch + (kept * per_node_ckpt if target == "local" else 0)
    nvme = recommend_nvme(nvme_need, need_write if target == "local" else 0.0, server, catalog)
    if nvme is None:
        ckpt_local = kept * per_node_ckpt if target == "local" else 0
        warnings.append(Text("Local NVMe: %(tb)s TB (dataset %(data)s TB, checkpoints %(ckpt)s TB) at %(rate)s GB/s "
                             "does not fit the server's %(bays)s bays; stream the dataset or write the checkpoints "
                             "to shared storage.", tb=Num(nvme_need / TB, ",.1f"), data=Num(dataset_local / TB, ",.1f"),
                             ckpt=Num(ckpt_local / TB, ",.1f"), rate=Num(need_write / 1e9, ",.1f"),
                             bays=int(_attr(server, "nvme_bays", default=8) or 8)))
    if target == "local":
        write_bps = (nvme.count * nvme.write_bytes_per_s_each) if nvme else (
            int(_attr(server, "nvme_bays", default=8) or 8) * _nvme_write_bps(server, catalog))
    else:
        write_bps = _shared_write_bps(catalog)
    ckpt_write_s = per_node_ckpt / write_bps
    blocking = 0.0 if o.async_checkpoint else ckpt_write_s
    if blocking > share * interval:
        warnings.append(Text("Checkpointing: writing %(gb)s GB per node at %(rate)s GB/s takes %(s)s s, over "
                             "%(share)s of the %(interval)s s interval; it needs %(need)s GB/s, or asynchronous "
                             "checkpointing.", gb=Num(per_node_ckpt / 1e9, ",.0f"), rate=Num(write_bps / 1e9, ",.1f"),
                             s=Num(ckpt_write_s, ",.0f"), share=Num(share, ".0%"), interval=Num(interval, ",.0f"),
                             need=Num(need_write / 1e9, ",.1f")))
    step = _StorageStep(target, ckpt_write_s, need_write, nvme_need, nvme, dataset, 0.0, nvme is not None)
    return step, warnings, notes, per_token


def _network_step(job: Job, shape: ModelShape, layout: Layout, server: Server | None, o: HostOptions,
                  compute_s: float, steps_per_s: float, out: _Messages) -> _NetworkStep:
    """Inter-node bytes per step against the NICs a node takes (and the server's own compute NICs)."""
    d = host_defaults()
    warnings = out.warnings
    traffic = inter_node_traffic(job, shape, layout)
    budget = float(o.comm_budget_fraction or 0.5)
    need_net = traffic.bytes_per_step_per_node / (compute_s * budget) if compute_s > 0 else 0.0
    avg_net = traffic.bytes_per_step_per_node * steps_per_s
    eff = d.num("network", "nic_efficiency")
    need_gbps = need_net * 8 / 1e9 / eff
    pcie = int(_attr(server, "pcie_gen", default=5) or 5)
    nics = recommend_nics(need_gbps, layout.gpus_per_node, pcie) if layout.num_nodes > 1 else None
    net_fits = True
    if layout.num_nodes > 1 and nics is None:
        warnings.append(Text("Network: the step needs %(gbps)s Gb/s per node, more than the NICs a node takes: "
                             "inter-node traffic will dominate the step. Use a layout that keeps it inside the node "
                             "(HSDP, larger gradient accumulation).", gbps=Num(need_gbps, ",.0f")))
        net_fits = False
    server_gbps = _compute_nic_gbps(server)
    if layout.num_nodes > 1 and server_gbps is not None and server_gbps * eff < need_gbps * eff:
        warnings.append(Text("Network: the server's compute NICs give %(has)s Gb/s, the step needs %(gbps)s Gb/s "
                             "per node.", has=Num(server_gbps, ",.0f"), gbps=Num(need_gbps, ",.0f")))
        net_fits = False
    utilisation = need_gbps / nics.total_gbps if nics else 0.0
    fabric = _fabric_note(job, layout, traffic, utilisation, nics)
    if layout.tp > layout.gpus_per_node:
        warnings.append(Text("Tensor parallelism spans nodes: its all-reduces run over the network."))
    return _NetworkStep(traffic, need_net, avg_net, nics, fabric, net_fits)


_POWER: Final[ObjectMemo[tuple[_PowerStep, list[str], str]]] = ObjectMemo(1024)


def _power_step(layout: Layout, gpu: Gpu, server: Server | None, o: HostOptions, out: _Messages) -> _PowerStep:
    """Power at load and on average, and how many nodes a rack's power budget takes; memoised per GPU and
    server object, GPUs per node and budget (the messages it adds are replayed)."""
    rack_kw = float(o.rack_kw_budget or default_rack_kw())
    step, warnings, note = _POWER.get_or_compute(
        (gpu, server), (layout.gpus_per_node, rack_kw), lambda: _power_step_uncached(layout, gpu, server, rack_kw))
    out.warnings.extend(warnings)
    out.notes.append(note)
    return step


def _power_step_uncached(layout: Layout, gpu: Gpu, server: Server | None,
                         rack_kw: float) -> tuple[_PowerStep, list[str], str]:
    peak_w, avg_w, power_source = _power(layout, gpu, server)
    per_rack = _nodes_per_rack(peak_w, server, rack_kw)
    warnings: list[str] = []
    if per_rack < 1:
        warnings.append(Text("Power: one node draws %(kw)s kW, over the %(rack)s kW rack budget.",
                             kw=Num(peak_w / 1000, ",.1f"), rack=Num(rack_kw, "g")))
    note = Text("Power at load %(kw)s kW per node (%(source)s), about %(avg)s kW on average while "
                "training; %(per_rack)s node(s) per %(rack)s kW rack.", kw=Num(peak_w / 1000, ",.1f"),
                source=power_source, avg=Num(avg_w / 1000, ",.1f"), per_rack=per_rack,
                rack=Num(rack_kw, "g"))
    return _PowerStep(peak_w, avg_w, per_rack), warnings, note


# --------------------------------------------------------------------------------------------------- main
# the response text keeps the module name of before the house move (responses stay byte-identical)
_CHECKPOINT_SOURCE: Final = "estimator.host_checkpoint"  # house-rewrite: keep
_CHECKPOINT_NOTE: Final = Text("Checkpoint bytes are those of %(source)s (per sharding layout).",
                               source=_CHECKPOINT_SOURCE)


def host_sizing(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
                catalog: Catalog, time: Any = None, train: Any = None,
                options: HostOptions | None = None) -> HostSizing:
    """Size the rest of the node for one training layout, step by step: RAM, storage, network, power (see the
    module docstring). Each step adds its warnings and notes in that order."""
    o = options.resolved() if options is not None else resolved_options_for(job.request)
    out = _Messages()
    ckpt = checkpoint_size(job, shape, layout)
    ram = _ram_step(job, shape, layout, gpu, server, o, ckpt, out)
    step_s, compute_s, step_source = _step_times(job, shape, layout, gpu, time)
    steps_per_s = 1.0 / step_s if step_s > 0 else 0.0
    storage = _storage_step(job, shape, layout, server, catalog, o, ckpt, steps_per_s, time, out)
    net = _network_step(job, shape, layout, server, o, compute_s, steps_per_s, out)
    power = _power_step(layout, gpu, server, o, out)
    if server is None:
        out.notes.append(Text("No server chosen: sized for a generic node with the GPUs of the request."))
    if train is not None and _attr(train, "checkpoint_bytes", default=None):
        out.notes.append(_CHECKPOINT_NOTE)
    return HostSizing(
        ram=ram.ram, dimms=ram.dimms, server_max_ram_bytes=ram.server_max_ram_bytes, checkpoint=ckpt,
        checkpoint_target=storage.target, checkpoint_write_s=storage.write_s,
        checkpoint_write_bytes_per_s_needed=storage.write_bytes_per_s_needed, nvme_bytes=storage.nvme_bytes,
        nvme=storage.nvme, dataset_bytes=storage.dataset_bytes,
        dataset_read_bytes_per_s=storage.dataset_read_bytes_per_s, network=net.traffic,
        network_bytes_per_s_needed=net.bytes_per_s_needed, network_bytes_per_s_average=net.bytes_per_s_average,
        nics=net.nics, fabric=net.fabric, step_time_s=step_s, compute_s=compute_s, step_time_source=step_source,
        power_w_peak=power.peak_w, power_w_average=power.average_w, btu_per_h=btu_per_hour(power.peak_w),
        nodes_per_rack=power.nodes_per_rack, fits_server=ram.fits and storage.fits and net.fits,
        warnings=out.warnings, notes=out.notes)


def _nic_words(sizing: HostSizing, layout: Layout) -> str:
    """The recommended NICs in words, memoised on the NIC set, whether the job spans nodes and whether there is
    one NIC per GPU."""
    nics = sizing.nics
    key = (layout.num_nodes <= 1, nics, nics is not None and nics.count == layout.gpus_per_node)
    return _NIC_WORDS.get_or_compute(key, lambda: _nic_words_uncached(nics, layout))


_NIC_WORDS: Final[BoundedMemo[tuple[object, ...], str]] = BoundedMemo(256)


def _nic_words_uncached(nics: NicConfig | None, layout: Layout) -> str:
    if layout.num_nodes <= 1:
        return Text("none for training (single node); 1x 100-200 Gb/s for storage and management")
    if nics is None:
        return Text("more than a node can take (the network would dominate the step)")
    kind = Text("InfiniBand NDR or 400 GbE RoCE") if nics.gbps == 400 else (
        Text("InfiniBand XDR or 800 GbE") if nics.gbps == 800 else Text("InfiniBand HDR or 200 GbE RoCE")
        if nics.gbps == 200 else "100 GbE RoCE")
    if nics.count == layout.gpus_per_node:
        return Text("%(nics)s, one per GPU (%(kind)s)", nics=nics, kind=kind)
    return Text("%(nics)s (%(kind)s)", nics=nics, kind=kind)


_WORDS: Final[BoundedMemo[DimmConfig | NvmeConfig, str]] = BoundedMemo(1024)


def _words(config: DimmConfig | NvmeConfig | None) -> str:
    """``str(config)`` (the plain English words of a recommended DIMM or NVMe set), memoised per set; ``""``
    for none."""
    if config is None:
        return ""
    return _WORDS.get_or_compute(config, lambda: str(config))


def host_result(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
                catalog: Catalog, time: Any = None, train: Any = None,
                options: HostOptions | None = None) -> HostResult:
    """The response's ``host`` block (its lists and dicts copied: :func:`estimator.construct.trusted`)."""
    s = host_sizing(job, shape, layout, gpu, server, catalog, time=time, train=train, options=options)
    return trusted(
        HostResult, ram_bytes_per_node=s.ram.per_node, ram_bytes_per_process=s.ram.per_process,
        ram_breakdown_bytes=s.ram.node_items, nvme_bytes=s.nvme_bytes,
        checkpoint_bytes=s.checkpoint.total_bytes, checkpoint_write_s=s.checkpoint_write_s,
        dataset_read_bytes_per_s=s.dataset_read_bytes_per_s,
        network_bytes_per_s_per_node=s.network_bytes_per_s_needed, power_w_per_node=s.power_w_peak,
        fits_server=s.fits_server, warnings=s.warnings,
        recommended_ram_gib=s.dimms.total_gib if s.dimms else 0, recommended_nics=_nic_words(s, layout),
        ram_peak_phase=s.ram.node_phase, recommended_dimms=_words(s.dimms), recommended_nvme=_words(s.nvme),
        checkpoint_bytes_per_node=s.checkpoint.per_node_bytes, checkpoint_target=s.checkpoint_target,
        dataset_bytes=s.dataset_bytes, network_bytes_per_step_per_node=s.network.bytes_per_step_per_node,
        fabric=s.fabric, power_w_average=s.power_w_average, power_btu_per_h=s.btu_per_h,
        nodes_per_rack=s.nodes_per_rack, notes=s.notes, pinned_offload_bytes=s.ram.pinned_offload_per_process,
        pinned_offload_bytes_per_node=s.ram.pinned_offload_per_node)
