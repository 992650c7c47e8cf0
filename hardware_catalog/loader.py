"""Load and validate the hardware catalog: YAML data files in, frozen pydantic models out.

Layout of a data directory (``hardware_catalog/data/`` by default)::

    meta.yaml              as_of date and schema version
    gpus/<id>.yaml         one accelerator per file; the file name is the id
    servers/<id>.yaml      one server variant (server model x GPU type) per file
    interconnects.yaml     links (NVLink, PCIe, InfiniBand, RoCE, xGMI) and measured collective bus bandwidth
    storage.yaml           local NVMe and shared storage throughput classes
    cloud_offers.yaml      dated $/GPU-hour per provider and GPU
    tco_defaults.yaml      TCO assumptions, each with unit, source and date

Every entry carries ``sources`` (citation, url, date); a figure that comes from elsewhere names its own in
``field_sources``; ``uncertain`` lists the fields where sources disagree. Units are in the field names:
``_gbps`` is GB/s (bytes), ``gbit_`` is Gb/s (bits), ``_w`` watts, ``_kw`` kilowatts, ``_gib`` GiB.

Errors::

    CatalogError (ValueError)          a data file is malformed, inconsistent or unsourced (names the file)
    UnknownCatalogIdError (KeyError)   an id not in the catalog (lists close matches)
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hardware_catalog.urls import WebUrl

__all__ = [
    "DEFAULT_DATA_DIR",
    "Cable",
    "Catalog",
    "CatalogError",
    "CloudOffer",
    "Collective",
    "CollectiveMeasurement",
    "Gpu",
    "Interconnect",
    "Nic",
    "Optic",
    "Server",
    "Source",
    "StorageClass",
    "Switch",
    "TcoDefault",
    "TcoDefaults",
    "UnknownCatalogIdError",
    "load_catalog",
]

DEFAULT_DATA_DIR = Path(__file__).resolve().parent / "data"
DATE_PATTERN = r"^\d{4}(-\d{2}(-\d{2})?)?$"
MIB = 2**20

#: theoretical x16 bandwidth per direction in GB/s by PCIe generation (hpc-notes PCIe table, PCI-SIG)
PCIE_X16_GBPS_PER_DIRECTION: dict[int, float] = {3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0}

FormFactor = Literal["SXM", "PCIe", "NVL", "OAM"]
GpuFabric = Literal["nvswitch", "nvlink-mesh", "nvlink-bridge-pairs", "pcie", "infinity-fabric"]
NicKind = Literal["infiniband-ndr", "infiniband-hdr", "infiniband-xdr", "roce", "ethernet"]
NicPurpose = Literal["gpu-fabric", "frontend"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
SourceKind = Literal[
    "datasheet", "vendor-document", "benchmark", "measured", "secondary", "derived", "price-list", "assumption"
]


class CatalogError(ValueError):
    """A data file is malformed, inconsistent or lacks a source. ``path`` names the file when known."""

    def __init__(self, message: str, path: Path | str | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.message = f"{self.path}: {message}" if self.path else message
        super().__init__(self.message)


class UnknownCatalogIdError(KeyError):
    """An id that is not in the catalog; the message lists close matches."""

    def __init__(self, kind: str, entry_id: str, known: Iterable[str]) -> None:
        self.kind = kind
        self.entry_id = entry_id
        self.suggestions = _close_matches(entry_id, list(known))
        hint = f"; close matches: {', '.join(self.suggestions)}" if self.suggestions else ""
        self.message = f"unknown {kind} id {entry_id!r}{hint}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


def _close_matches(word: str, known: list[str]) -> list[str]:
    contains = [k for k in known if word.lower() in k.lower()]
    fuzzy = difflib.get_close_matches(word.lower(), known, n=5, cutoff=0.5)
    return list(dict.fromkeys([*contains, *fuzzy]))[:5]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Source(_Frozen):
    """Where a figure comes from. ``date`` is when it was published (or retrieved, if ``date_is_retrieval``)."""

    citation: str = Field(min_length=3)
    url: WebUrl = None
    date: str = Field(pattern=DATE_PATTERN)
    date_is_retrieval: bool = False
    kind: SourceKind = "secondary"


class _Sourced(_Frozen):
    """An entry whose figures all carry a source: ``sources`` for the entry, ``field_sources`` per field."""

    sources: tuple[Source, ...] = Field(min_length=1)
    field_sources: dict[str, tuple[Source, ...]] = Field(default_factory=dict)
    uncertain: tuple[str, ...] = ()
    notes: str | None = None

    @model_validator(mode="after")
    def _known_field_names(self) -> _Sourced:
        names = set(type(self).model_fields)
        unknown = sorted({*self.field_sources, *self.uncertain} - names)
        if unknown:
            raise ValueError(f"field_sources/uncertain name fields that do not exist: {unknown}")
        empty = sorted(k for k, v in self.field_sources.items() if not v)
        if empty:
            raise ValueError(f"field_sources with no source: {empty}")
        return self

    def sources_for(self, field: str) -> tuple[Source, ...]:
        """The sources of one figure: its own if it has them, else the entry's."""
        return self.field_sources.get(field, self.sources)

    def is_uncertain(self, field: str) -> bool:
        return field in self.uncertain

    def figures(self) -> dict[str, float]:
        """Every numeric figure that is set (booleans and ids excluded), by field name."""
        return {k: float(v) for k, v in self if isinstance(v, int | float) and not isinstance(v, bool)}


class Gpu(_Sourced):
    """One accelerator. FLOP/s are dense (never the 2:4 sparsity figure); NVLink is per GPU, both directions."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    vendor: str
    arch: str
    form_factor: FormFactor
    memory_gb: float = Field(gt=0)
    memory_type: str
    memory_bytes: int = Field(gt=0)
    memory_reserved_bytes: int | None = Field(default=None, ge=0)
    hbm_bandwidth_gbps: float = Field(gt=0)
    fp64_tflops: float | None = Field(default=None, ge=0)
    fp32_tflops: float = Field(gt=0)
    tf32_tflops_dense: float = Field(gt=0)
    bf16_tflops_dense: float = Field(gt=0)
    fp16_tflops_dense: float = Field(gt=0)
    fp8_tflops_dense: float | None = Field(default=None, gt=0)
    fp4_tflops_dense: float | None = Field(default=None, gt=0)
    nvlink_gen: int | None = Field(default=None, ge=1, le=6)
    nvlink_gbps_bidir: float = Field(ge=0)
    scale_up_link: str | None = None
    scale_up_gbps_bidir: float = Field(ge=0)
    pcie_gen: int = Field(ge=3, le=6)
    pcie_gbps_per_direction: float = Field(gt=0)
    tdp_w: float = Field(gt=0)
    sm_count: int | None = Field(default=None, gt=0)
    launch_year: int = Field(ge=2015, le=2035)
    price_usd_low: float | None = Field(default=None, gt=0)
    price_usd_high: float | None = Field(default=None, gt=0)
    price_date: str | None = Field(default=None, pattern=DATE_PATTERN)

    @model_validator(mode="after")
    def _units_consistent(self) -> Gpu:
        _check_gpu_units(self)
        return self

    @property
    def price_usd_mid(self) -> float | None:
        """Midpoint of the price range, or the one end that is known."""
        ends = [p for p in (self.price_usd_low, self.price_usd_high) if p is not None]
        return sum(ends) / len(ends) if ends else None


def _check_gpu_units(g: Gpu) -> None:
    problems: list[str] = []
    ratio = g.memory_bytes / (g.memory_gb * 1e9)
    if not 0.9 <= ratio <= 1.1:
        problems.append(f"memory_bytes is {ratio:.2f}x memory_gb (expected within 10%; bytes, not GiB?)")
    if not 100 <= g.hbm_bandwidth_gbps <= 50_000:
        problems.append(f"hbm_bandwidth_gbps={g.hbm_bandwidth_gbps} is not in GB/s")
    if not g.fp32_tflops <= g.tf32_tflops_dense <= g.bf16_tflops_dense:
        problems.append("expected fp32 <= tf32 <= bf16 TFLOP/s (a sparse or vector figure?)")
    for low, high in (("bf16", "fp8"), ("fp8", "fp4")):
        hi, lo = getattr(g, f"{high}_tflops_dense"), getattr(g, f"{low}_tflops_dense")
        if hi is not None and lo is not None and hi < lo:
            problems.append(f"{high} TFLOP/s below {low}")
    nominal = PCIE_X16_GBPS_PER_DIRECTION[g.pcie_gen]
    if abs(g.pcie_gbps_per_direction - nominal) > 0.1 * nominal:
        problems.append(f"pcie_gbps_per_direction={g.pcie_gbps_per_direction} does not match gen{g.pcie_gen}")
    if g.price_usd_low and g.price_usd_high and g.price_usd_low > g.price_usd_high:
        problems.append("price_usd_low > price_usd_high")
    if problems:
        raise ValueError("; ".join(problems))


class Nic(_Frozen):
    """``count`` network ports at ``gbps`` each. NIC speeds are quoted in bits, so here ``gbps`` is Gb/s (the one
    exception to the GB/s convention); NDR200 is ``kind: infiniband-ndr, gbps: 200``."""

    count: int = Field(ge=1)
    gbps: float = Field(gt=0, description="line rate per port in Gb/s (bits)")
    kind: NicKind
    purpose: NicPurpose
    model: str | None = None
    cages: int | None = Field(default=None, ge=1, description="OSFP/QSFP cages these ports leave the node by: "
                              "fewer cages than ports means twin-port cages (DGX H100/B200: 4 cages for 8 NICs)")

    @property
    def gbytes_per_s(self) -> float:
        """Line rate of all ``count`` ports in GB/s (bytes)."""
        return self.count * self.gbps / 8


class Server(_Sourced):
    """One server variant: a chassis with one GPU type. Configured figures (MLPerf submissions) are not maxima."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    vendor: str
    gpu_id: str
    gpu_count: int = Field(ge=1, le=72, description="GPUs in one node (at most 72: an NVL72 rack described as "
                           "one node; the catalog's NVL72 entries are four-GPU trays)")
    gpu_tdp_w: float | None = Field(
        default=None, gt=0, description="per-GPU power of this server's GPU SKU when it differs from the GPU's TDP"
    )
    gpu_fabric: GpuFabric
    intra_node_gbps_bidir_per_gpu: float = Field(gt=0)
    pcie_gen: int = Field(ge=3, le=6)
    cpu_model: str | None = None
    cpu_sockets: int = Field(ge=1, le=8)
    cores_per_cpu: int | None = Field(default=None, ge=1)
    max_ram_gib: float | None = Field(default=None, gt=0)
    ram_gib_configured: float | None = Field(default=None, gt=0)
    dimm_slots: int | None = Field(default=None, ge=1)
    memory_type: Literal["DDR4", "DDR5", "LPDDR5X"] | None = Field(
        default=None, description="system memory generation, set by the CPU platform (EPYC 7002/7003: DDR4; "
        "Xeon 4th Gen and later, EPYC 9004 and later: DDR5; Grace: LPDDR5X soldered next to the CPU, so a fixed "
        "amount: set max_ram_gib = ram_gib_configured)")
    nvme_bays: int | None = Field(default=None, ge=0)
    nvme_tb_configured: float | None = Field(default=None, ge=0)
    nics: tuple[Nic, ...] = ()
    rack_units: int = Field(ge=1, le=48)
    max_power_kw: float | None = Field(default=None, gt=0)
    psu: str | None = None
    weight_kg_low: float | None = Field(default=None, gt=0)
    weight_kg_high: float | None = Field(default=None, gt=0)
    price_usd: float | None = Field(default=None, gt=0)
    price_usd_high: float | None = Field(default=None, gt=0)
    price_date: str | None = Field(default=None, pattern=DATE_PATTERN)
    placeholder: bool = False
    nvlink_domain_gpus: int | None = Field(
        default=None, ge=1, le=1152, description="GPUs in one NVLink domain when it spans more than this node "
        "(GB200 NVL72: 72 across 18 trays); null: the node's own GPUs")
    rack_nodes: int | None = Field(
        default=None, ge=1, le=72, description="a rack-scale system: the nodes (compute trays) one rack holds. "
        "The rack comes whole, with its NVLink switch trays, power shelves and liquid cooling (GB200 / GB300 NVL72: "
        "18 trays of 4 GPUs); null: an ordinary server, racked by power and space")
    rack_power_kw: float | None = Field(
        default=None, gt=0, description="a rack-scale system: the whole rack's maximum power (kW), switch trays "
        "and power-shelf losses included; max_power_kw is then this rack's power shared over its rack_nodes")

    @property
    def nvlink_domain(self) -> int:
        """GPUs that reach each other over NVLink: ``nvlink_domain_gpus``, else the node's GPUs (one NVSwitch
        board or mesh), 2 for NVLink-bridged pairs, 1 over PCIe."""
        if self.nvlink_domain_gpus is not None:
            return self.nvlink_domain_gpus
        if self.gpu_fabric == "nvlink-bridge-pairs":
            return min(2, self.gpu_count)
        return 1 if self.gpu_fabric == "pcie" else self.gpu_count

    @model_validator(mode="after")
    def _price_has_date(self) -> Server:
        if self.price_usd is not None and self.price_date is None:
            raise ValueError("price_usd needs price_date")
        domain = self.nvlink_domain_gpus
        if domain is not None and domain > self.gpu_count and domain % self.gpu_count:
            raise ValueError(f"nvlink_domain_gpus ({domain}) spans whole nodes: a multiple of gpu_count "
                             f"({self.gpu_count})")
        if (self.rack_nodes is None) != (self.rack_power_kw is None):
            raise ValueError("rack_nodes and rack_power_kw go together (a rack-scale system)")
        return self

    @property
    def scale_up_gpus(self) -> int:
        """GPUs one collective reaches without the NICs: the NVLink domain when it spans nodes (NVL72: 72), else
        the node's GPUs (PCIe and bridged cards reach the node's other GPUs over PCIe, not the network)."""
        return max(self.gpu_count, self.nvlink_domain_gpus or 0)

    def nic_gbit(self, purpose: NicPurpose = "gpu-fabric") -> float:
        """Total line rate of the NICs for ``purpose``, in Gb/s."""
        return sum(n.count * n.gbps for n in self.nics if n.purpose == purpose)


class Interconnect(_Sourced):
    """A link or fabric generation. ``gbps_per_direction`` is GB/s; ``gbit_per_port`` is Gb/s."""

    id: str
    name: str
    kind: Literal["pcie", "nvlink", "nvswitch", "nvlink-c2c", "infiniband", "roce", "xgmi"]
    gen: int | None = None
    lanes: int | None = None
    links_per_gpu: int | None = None
    gbps_per_direction: float | None = Field(default=None, gt=0)
    gbps_per_direction_encoded: float | None = Field(default=None, gt=0)
    gbps_bidir_per_gpu: float | None = Field(default=None, gt=0)
    gbit_per_port: float | None = Field(default=None, gt=0)
    measured_gbps_per_direction_low: float | None = Field(default=None, gt=0)
    measured_gbps_per_direction_high: float | None = Field(default=None, gt=0)
    latency_us: float | None = Field(default=None, gt=0)
    latency_us_low_latency_protocol: float | None = Field(default=None, gt=0)
    switches_per_8gpu_board: int | None = None


class CollectiveMeasurement(_Sourced):
    """A measured (or maintainer-expected) nccl-tests bus bandwidth on one fabric."""

    fabric: str
    collective: Collective
    busbw_gbps: float = Field(gt=0)
    busbw_gbps_high: float | None = Field(default=None, gt=0)
    algbw_gbps: float | None = Field(default=None, gt=0)
    n_gpus: int = Field(ge=2)
    n_nodes: int = Field(default=1, ge=1)
    gpu_ids: tuple[str, ...] = ()
    gpu_fabric: GpuFabric | None = None
    algorithm: Literal["nvls", "ring", "tree", "any"] = "any"
    message_bytes: int | None = Field(default=None, gt=0)
    measurement: Literal["user-report", "maintainer-confirmed", "maintainer-expectation", "maintainer-statement"]
    representative: bool = False


class StorageClass(_Sourced):
    """Throughput of a storage class in GB/s, per drive (local NVMe) or per client node (shared)."""

    id: str
    name: str
    kind: Literal["local-nvme", "nfs", "parallel-fs"]
    scope: Literal["per-drive", "per-node"]
    pcie_gen: int | None = None
    read_gbps: float = Field(gt=0)
    write_gbps: float | None = Field(default=None, gt=0)


class CloudOffer(_Sourced):
    """A dated cloud price, per GPU-hour (instance price / GPUs per instance)."""

    id: str
    provider: str
    instance: str
    gpu_id: str
    gpus_per_instance: int = Field(ge=1)
    region: str | None = None
    offer_kind: Literal["on-demand", "capacity-block", "reserved-only"] = "on-demand"
    on_demand_usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    on_demand_usd_per_instance_hour: float | None = Field(default=None, gt=0)
    reserved_usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    reserved_term_months: int | None = Field(default=None, ge=1)
    reserved_3yr_usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    gpu_only_price: bool = False
    date: str = Field(pattern=DATE_PATTERN)

    @model_validator(mode="after")
    def _has_a_price(self) -> CloudOffer:
        if self.on_demand_usd_per_gpu_hour is None and self.reserved_usd_per_gpu_hour is None:
            raise ValueError("an offer needs an on-demand or a reserved price")
        if (self.reserved_usd_per_gpu_hour is None) != (self.reserved_term_months is None):
            raise ValueError("reserved_usd_per_gpu_hour and reserved_term_months go together")
        return self


class Switch(_Sourced):
    """A fabric switch. ``ports`` at ``gbit_per_port`` (Gb/s) leave by ``cages`` cages; ``breakout_ports`` at
    ``breakout_gbit`` is the same silicon split (SN5600: 64 x 800G or 128 x 400G). Power without optics."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    vendor: str
    fabric_kind: Literal["infiniband", "ethernet"]
    ports: int = Field(ge=2)
    gbit_per_port: float = Field(gt=0)
    cages: int = Field(ge=1)
    breakout_ports: int | None = Field(default=None, ge=2)
    breakout_gbit: float | None = Field(default=None, gt=0)
    rack_units: int = Field(ge=1, le=48)
    power_w: float = Field(gt=0, description="typical power of the switch without its optics (W)")
    price_usd: float | None = Field(default=None, gt=0)
    price_date: str | None = Field(default=None, pattern=DATE_PATTERN)

    def radix(self, gbit: float) -> int:
        """Ports at ``gbit`` Gb/s: the native count, or the breakout count when that is the speed asked."""
        if self.breakout_ports is not None and self.breakout_gbit is not None and abs(gbit - self.breakout_gbit) < 1e-9:
            return self.breakout_ports
        return self.ports


class Optic(_Sourced):
    """A pluggable transceiver: ``ports`` logical ports (2 for a twin-port OSFP) at ``gbit_per_port`` each."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    form_factor: str
    ports: int = Field(ge=1, le=2)
    gbit_per_port: float = Field(gt=0)
    side: Literal["switch", "node"]
    power_w: float = Field(gt=0)
    price_usd: float | None = Field(default=None, gt=0)
    price_date: str | None = Field(default=None, pattern=DATE_PATTERN)


class Cable(_Sourced):
    """A cable carrying one link (fibre between two transceivers, or a copper DAC)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    medium: Literal["fiber", "copper"]
    gbit: float = Field(gt=0)
    reach_m: float = Field(gt=0)
    price_usd: float | None = Field(default=None, gt=0)
    price_date: str | None = Field(default=None, pattern=DATE_PATTERN)


class TcoDefault(_Frozen):
    """One TCO assumption with its unit and where the default comes from."""

    value: float | str
    unit: str
    description: str
    source: str = Field(min_length=3)
    url: WebUrl = None
    date: str = Field(pattern=DATE_PATTERN)
    uncertain: bool = False


class TcoDefaults(_Frozen):
    assumptions: dict[str, TcoDefault]

    def value(self, name: str) -> float | str:
        try:
            return self.assumptions[name].value
        except KeyError:
            raise UnknownCatalogIdError("TCO assumption", name, self.assumptions) from None


class Catalog(_Frozen):
    """The whole catalog. ``version`` = ``<as_of>.<sha256 of the data files, 12 hex>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    as_of: str
    gpus: dict[str, Gpu]
    servers: dict[str, Server]
    interconnects: dict[str, Interconnect]
    collective_efficiency: tuple[CollectiveMeasurement, ...]
    storage: dict[str, StorageClass]
    cloud_offers: list[CloudOffer]
    tco_defaults: TcoDefaults
    switches: dict[str, Switch] = Field(default_factory=dict)
    optics: dict[str, Optic] = Field(default_factory=dict)
    cables: dict[str, Cable] = Field(default_factory=dict)

    def gpu(self, gpu_id: str) -> Gpu:
        return _lookup(self.gpus, "GPU", gpu_id)

    def server(self, server_id: str) -> Server:
        return _lookup(self.servers, "server", server_id)

    def interconnect(self, interconnect_id: str) -> Interconnect:
        return _lookup(self.interconnects, "interconnect", interconnect_id)

    def switch(self, switch_id: str) -> Switch:
        return _lookup(self.switches, "switch", switch_id)

    def optic(self, optic_id: str) -> Optic:
        return _lookup(self.optics, "optic", optic_id)

    def cable(self, cable_id: str) -> Cable:
        return _lookup(self.cables, "cable", cable_id)

    def cloud_offer(self, offer_id: str) -> CloudOffer:
        return _lookup({o.id: o for o in self.cloud_offers}, "cloud offer", offer_id)

    def offers_for(self, gpu_id: str) -> list[CloudOffer]:
        """Cloud offers for one GPU, cheapest on-demand first (reserved-only offers last)."""
        offers = [o for o in self.cloud_offers if o.gpu_id == gpu_id]
        return sorted(offers, key=lambda o: (o.on_demand_usd_per_gpu_hour is None, o.on_demand_usd_per_gpu_hour))

    def collectives(self, fabric: str | None = None, collective: str | None = None) -> list[CollectiveMeasurement]:
        return [
            m
            for m in self.collective_efficiency
            if (fabric is None or m.fabric == fabric) and (collective is None or m.collective == collective)
        ]

    def busbw_gbps(self, fabric: str, collective: str) -> float:
        """The representative measured bus bandwidth (GB/s) of ``collective`` on ``fabric`` (nccl-tests busbw)."""
        rows = self.collectives(fabric, collective)
        if not rows:
            known = sorted({f"{m.fabric}/{m.collective}" for m in self.collective_efficiency})
            raise UnknownCatalogIdError("fabric/collective", f"{fabric}/{collective}", known)
        chosen = [m for m in rows if m.representative] or rows
        return chosen[0].busbw_gbps

    def fabric_for(self, server_id: str) -> str | None:
        """The collective-efficiency fabric id measured on this server's GPU and fabric, if any."""
        server = self.server(server_id)
        for m in self.collective_efficiency:
            if m.n_nodes == 1 and server.gpu_id in m.gpu_ids and m.gpu_fabric == server.gpu_fabric:
                return m.fabric
        return None


T = TypeVar("T")


def _lookup(items: Mapping[str, T], kind: str, entry_id: str) -> T:
    try:
        return items[entry_id]
    except KeyError:
        raise UnknownCatalogIdError(kind, entry_id, items) from None


# --------------------------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that rejects duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path) -> Any:
    try:
        with path.open("rb") as fh:
            return yaml.load(fh, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except FileNotFoundError:
        raise CatalogError("file is missing", path) from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"not valid YAML: {exc}", path) from None


M = TypeVar("M", bound=BaseModel)


def _validate(model: type[M], data: Any, path: Path, where: str = "") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<entry>'}: {e['msg']}" for e in exc.errors())
        raise CatalogError(f"{where}{details}", path) from None


def _mapping(data: Any, path: Path, key: str | None = None) -> Any:
    if not isinstance(data, dict):
        raise CatalogError("expected a mapping at the top level", path)
    if key is None:
        return data
    if key not in data:
        raise CatalogError(f"missing top-level key {key!r}", path)
    return data[key]


def _entries(model: type[M], items: Any, path: Path) -> list[M]:
    if not isinstance(items, list):
        raise CatalogError("expected a list of entries", path)
    out = []
    for i, item in enumerate(items):
        label = item.get("id", item.get("fabric", i)) if isinstance(item, dict) else i
        out.append(_validate(model, item, path, where=f"entry {label!r}: "))
    return out


def _by_id(entries: list[Any], path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in entries:
        if entry.id in out:
            raise CatalogError(f"duplicate id {entry.id!r}", path)
        out[entry.id] = entry
    return out


def _one_per_file(model: type[M], folder: Path) -> dict[str, M]:
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise CatalogError("no *.yaml files", folder)
    out: dict[str, M] = {}
    for path in files:
        entry = _validate(model, _mapping(_read_yaml(path), path), path)
        entry_id = str(getattr(entry, "id"))  # noqa: B009 - every per-file model has an id
        if entry_id != path.stem:
            raise CatalogError(f"id {entry_id!r} does not match the file name", path)
        if entry_id in out:
            raise CatalogError(f"duplicate id {entry_id!r}", path)
        out[entry_id] = entry
    return out


def _data_files(data_dir: Path) -> Iterator[Path]:
    yield from sorted(p for p in data_dir.rglob("*.yaml") if p.is_file())


def catalog_digest(data_dir: Path) -> str:
    """sha256 over every data file's relative path and bytes, first 12 hex digits."""
    digest = hashlib.sha256()
    for path in _data_files(data_dir):
        digest.update(path.relative_to(data_dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _cross_check(catalog: Catalog, data_dir: Path) -> None:
    for server in catalog.servers.values():
        path = data_dir / "servers" / f"{server.id}.yaml"
        gpu = catalog.gpus.get(server.gpu_id)
        if gpu is None:
            raise CatalogError(str(UnknownCatalogIdError("GPU", server.gpu_id, catalog.gpus)), path)
        if server.max_power_kw is not None and server.max_power_kw * 1000 < server.gpu_count * gpu.tdp_w:
            raise CatalogError("max_power_kw is below the GPUs' total TDP (kW vs W?)", path)
    for offer in catalog.cloud_offers:
        if offer.gpu_id not in catalog.gpus:
            unknown = UnknownCatalogIdError("GPU", offer.gpu_id, catalog.gpus)
            raise CatalogError(f"offer {offer.id!r}: {unknown}", data_dir / "cloud_offers.yaml")
    for m in catalog.collective_efficiency:
        missing = [g for g in m.gpu_ids if g not in catalog.gpus]
        if missing:
            raise CatalogError(f"{m.fabric}: unknown gpu_ids {missing}", data_dir / "interconnects.yaml")


def _fabric_parts(path: Path) -> dict[str, Any]:
    """``fabric.yaml``: the switches, optics and cables of cluster fabrics (absent in an older data directory)."""
    if not path.is_file():
        return {}
    data = _mapping(_read_yaml(path), path)
    return {
        "switches": _by_id(_entries(Switch, _mapping(data, path, "switches"), path), path),
        "optics": _by_id(_entries(Optic, _mapping(data, path, "optics"), path), path),
        "cables": _by_id(_entries(Cable, _mapping(data, path, "cables"), path), path),
    }


def _load(data_dir: Path) -> Catalog:
    meta_path = data_dir / "meta.yaml"
    meta = _mapping(_read_yaml(meta_path), meta_path)
    inter_path, storage_path = data_dir / "interconnects.yaml", data_dir / "storage.yaml"
    offers_path, tco_path = data_dir / "cloud_offers.yaml", data_dir / "tco_defaults.yaml"
    inter = _mapping(_read_yaml(inter_path), inter_path)
    catalog = Catalog(
        version=f"{meta.get('as_of')}.{catalog_digest(data_dir)}",
        as_of=str(meta.get("as_of")),
        gpus=_one_per_file(Gpu, data_dir / "gpus"),
        servers=_one_per_file(Server, data_dir / "servers"),
        interconnects=_by_id(_entries(Interconnect, _mapping(inter, inter_path, "links"), inter_path), inter_path),
        collective_efficiency=tuple(
            _entries(CollectiveMeasurement, _mapping(inter, inter_path, "collective_efficiency"), inter_path)
        ),
        storage=_by_id(
            _entries(StorageClass, _mapping(_read_yaml(storage_path), storage_path, "classes"), storage_path),
            storage_path,
        ),
        cloud_offers=list(
            _by_id(
                _entries(CloudOffer, _mapping(_read_yaml(offers_path), offers_path, "offers"), offers_path), offers_path
            ).values()
        ),
        tco_defaults=_validate(TcoDefaults, _mapping(_read_yaml(tco_path), tco_path), tco_path),
        **_fabric_parts(data_dir / "fabric.yaml"),
    )
    _cross_check(catalog, data_dir)
    return catalog


@lru_cache(maxsize=1)
def _default_catalog() -> Catalog:
    return _load(DEFAULT_DATA_DIR)


def load_catalog(data_dir: Path | str | None = None) -> Catalog:
    """Load and validate the catalog in ``data_dir`` (the packaged data when ``None``; that one is cached).

    Raises :class:`CatalogError` naming the file for a malformed file, a duplicate id, an unknown ``gpu_id``,
    inconsistent units or a figure without a source.
    """
    if data_dir is None:
        return _default_catalog()
    return _load(Path(data_dir))
