"""The cluster contract: ``POST /api/v1/clusters`` request and response (field names are a contract: add, never
rename), and the nccl-tests check's result. Plain pydantic (listed in ``estimator.native.PURE_MODULES``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from estimator.request import EstimateRequest

__all__ = [
    "FABRIC_CHOICES",
    "ClusterCost",
    "ClusterDesign",
    "ClusterPower",
    "ClusterRack",
    "ClusterRequest",
    "ClusterResponse",
    "ClusterTco",
    "FabricChoice",
    "NcclCheck",
    "NcclRow",
    "NcclTest",
    "OtherFabric",
    "PartLine",
    "ScalingPoint",
]

FabricChoice = Literal["ib-ndr", "ib-xdr", "roce-400", "roce-800"]
FABRIC_CHOICES: tuple[FabricChoice, ...] = ("ib-ndr", "ib-xdr", "roce-400", "roce-800")


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ClusterRequest(_In):
    server: str = Field(min_length=1, max_length=200, description="the node (a catalog server id)")
    num_nodes: int = Field(ge=1, le=100_000, description="nodes on the compute fabric")
    fabric: FabricChoice = Field(
        default="ib-ndr", description="ib-ndr: InfiniBand NDR 400G on Quantum-2 QM9700 (64 ports); ib-xdr: XDR 800G "
        "on Quantum-X800 Q3400 (144 ports; needs 800G NICs); roce-400 / roce-800: Spectrum-X Ethernet (RoCE) on "
        "Spectrum-4 SN5600 (128 x 400G or 64 x 800G)")
    oversubscription: float = Field(default=1.0, ge=1.0, le=8.0,
                                    description="leaf downlink : uplink ratio; 1 = non-blocking (the reference "
                                    "architectures' choice). An explicit choice: it cuts spines and optics and "
                                    "divides the bandwidth between leaves")
    switch_ports: int | None = Field(default=None, ge=2, le=1024,
                                     description="ports of each switch to use (null: all of them at the fabric's "
                                     "speed); more than the switch has is refused")
    ufm: bool = Field(default=True, description="a UFM fabric-manager appliance on the fabric (InfiniBand; one node "
                      "slot and 4 links, as in the DGX SuperPOD table)")
    job: EstimateRequest | None = Field(default=None, description="a training job for the scaling curve: its "
                                        "parallelism per node is kept and data parallelism grows with the nodes")
    scaling_threshold: float = Field(default=0.8, gt=0, le=1.0,
                                     description="scaling efficiency under which the curve says why")
    rack_kw: float | None = Field(default=None, gt=0, le=1000, description="kW per rack (null: the TCO default)")


class PartLine(_Out):
    """One line of the fabric's parts list."""

    kind: Literal["switch", "optic", "cable", "appliance", "server"]
    sku: str
    name: str
    role: str = Field(description="where it sits: leaf, spine, core, node side, node-leaf, ...")
    quantity: int
    unit_price_usd: float | None
    total_usd: float | None
    unit_power_w: float | None
    total_power_w: float | None
    rack_units: int = 0
    source: str = Field(description="the catalog entry's first source (its citation)")


class ClusterDesign(_Out):
    fabric: FabricChoice
    fabric_name: str
    switch: str
    switch_name: str
    radix: int = Field(description="switch ports used at the fabric's speed")
    link_gbit: float
    rails: int = Field(description="GPU-fabric NICs per node (one rail each)")
    twin_port_node_cages: bool
    tiers: int
    scalable_units: int = Field(description="units of leaf_down_ports node slots, one leaf per rail each")
    slots_per_unit: int
    pods: int
    leaves: int
    spines: int
    cores: int
    switches: int
    leaf_down_ports: int
    leaf_up_ports: int
    oversubscription: float
    node_links: int
    ufm_links: int
    leaf_spine_links: int
    spine_core_links: int
    node_and_ufm_cables: int
    cables: int
    switch_transceivers: int
    node_transceivers: int
    gpus: int
    nvlink_domain_gpus: int = Field(description="GPUs in one NVLink domain: tensor/expert/context parallelism "
                                    "stays inside it; the fabric carries data and pipeline parallelism")
    nvlink_domain_nodes: int = Field(default=1, description="nodes in one NVLink domain (an NVL72 rack: 18 "
                                     "four-GPU trays); the fabric joins domains")
    nvlink_domains: int = Field(default=0, description="NVLink domains on the fabric (racks of a rack-scale "
                                "system, else nodes); a partial last domain counts")
    notes: list[str] = Field(default_factory=list)


class ClusterPower(_Out):
    switches_w: float
    switch_optics_w: float
    fabric_w: float = Field(description="switches + their optics")
    node_optics_w: float = Field(description="node-side modules, drawn from the nodes' own power")
    nodes_w: float = Field(description="the nodes at their catalog maximum power")
    total_kw: float


class ClusterRack(_Out):
    nodes_per_rack: int
    compute_racks: int
    switch_rack_units: int
    network_racks: int = Field(description="racks for the switches at rack_units_per_rack less 2 U for patching")
    rack_kw: float
    network_rack_kw: float = Field(description="switches + optics per network rack")


class ClusterCost(_Out):
    fabric_usd: float
    fabric_usd_per_node: float
    fabric_usd_per_gpu: float
    servers_usd: float | None
    total_usd: float | None
    unpriced_parts: list[str] = Field(default_factory=list,
                                      description="parts with no catalog price (left out of the totals)")


class ClusterTco(_Out):
    years: int
    capex_usd: float
    fabric_power_usd_per_year: float
    nodes_power_usd_per_year: float
    total_usd: float
    note: str


class OtherFabric(_Out):
    name: str
    purpose: str
    sized: bool = False
    note: str


class ScalingPoint(_Out):
    nodes: int
    gpus: int
    dp: int
    step_time_s: float
    tokens_per_s: float
    mfu: float
    scaling_efficiency: float
    communication_s: float
    exposed_communication_s: float
    bubble_s: float
    time_to_train_s: float | None
    cost_usd: float | None
    fits: bool
    reasons: list[str] = Field(default_factory=list)
    collectives_s: dict[str, float] = Field(default_factory=dict, description="seconds per step of each "
                                            "parallelism's collectives, and how much of each is exposed (the "
                                            "estimate's breakdown: tensor_parallel_s, data_parallel_exposed_s, ...)")
    fabric_traffic: list[str] = Field(default_factory=list, description="parallelisms whose collectives cross "
                                      "the compute fabric at this size (tensor, context, expert, data, pipeline): "
                                      "on an NVL72 only data and pipeline while the other groups fit its 72 GPUs")
    nvlink_traffic: list[str] = Field(default_factory=list, description="parallelisms whose collectives stay "
                                      "inside the NVLink domain")


class ClusterResponse(_Out):
    request: ClusterRequest
    design: ClusterDesign
    parts: list[PartLine]
    power: ClusterPower
    rack: ClusterRack
    cost: ClusterCost
    tco: ClusterTco | None
    other_fabrics: list[OtherFabric]
    scaling: list[ScalingPoint] = Field(default_factory=list)
    nccl_commands: list[str] = Field(default_factory=list, description="nccl-tests command lines to run on the "
                                     "delivered nodes")
    svg: str = Field(default="", description="the topology drawing (SVG)")
    catalog_version: str


class NcclRow(_Out):
    size_bytes: int
    algbw_gbps: float
    busbw_gbps: float
    expected_busbw_gbps: float | None
    ratio: float | None
    status: Literal["ok", "low", "small", "above"]


class NcclTest(_Out):
    collective: str
    n_gpus: int | None
    n_nodes: int | None
    gpu_name: str | None
    algorithm_env: str | None
    peak_busbw_gbps: float
    peak_size_bytes: int
    expected_busbw_gbps: float | None
    expectation_source: str | None
    path: str
    verdict: Literal["healthy", "degraded", "overstated", "unknown"]
    summary: str
    causes: list[str] = Field(default_factory=list)
    rows: list[NcclRow]


class NcclCheck(_Out):
    tests: list[NcclTest]
    warnings: list[str] = Field(default_factory=list)
    healthy: bool
