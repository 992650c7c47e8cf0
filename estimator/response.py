"""The response contract: typed, frozen results; bytes are integers, times are seconds."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from estimator.cluster.contract import (
    ClusterCost,
    ClusterDesign,
    ClusterPower,
    ClusterRack,
    ClusterRequest,
    ClusterTco,
    PartLine,
)
from estimator.messages import Message
from estimator.tco.run_cost import CostResult

#: The estimator's version, in every response (training and serving) and recorded with every saved quote and plan,
#: so that a saved result can be recomputed and audited.
ESTIMATOR_VERSION = "0.1.0"

__all__ = [
    "ESTIMATOR_VERSION",
    "EstimateFabric",
    "EstimateResponse",
    "HostResult",
    "LayoutSummary",
    "MemoryBreakdown",
    "MemoryResult",
    "ModelSummary",
    "Suggestion",
    "TimeResult",
    "TrainResult",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MemoryBreakdown(_Frozen):
    """Bytes on the busiest GPU at the moment of its peak, by kind. The items add up to
    ``peak_allocated_bytes`` (parameters .. temporary) plus ``overhead`` (what only nvidia-smi sees)."""

    parameters: int
    gradients: int
    optimizer_states: int
    activations: int
    logits: int
    temporary: int
    overhead: int


class MemoryResult(_Frozen):
    breakdown_bytes: MemoryBreakdown
    peak_allocated_bytes: int = Field(description="torch.cuda.max_memory_allocated() on the busiest GPU")
    total_bytes: int = Field(description="what nvidia-smi would show at the peak")
    capacity_bytes: int
    fits: bool
    headroom_bytes: int = Field(description="capacity_bytes - total_bytes (negative when it does not fit)")
    max_micro_batch_size: int = Field(description="largest micro-batch that fits, 0 if none")
    error_bar_pct: float
    peak_phase: str = Field(description="forward, backward or optimizer: when the peak happens")
    busiest_rank: Message = Field(description="which GPU is the busiest, in words")
    reserved_peak_bytes: int = Field(default=0, description="torch.cuda.max_memory_reserved() at the peak: the "
                                     "allocated peak plus what the caching allocator keeps reserved around it under "
                                     "training.allocator (its large transient allocations fragment the default "
                                     "allocator's pool; estimator.training.allocator), without managed_bytes, "
                                     "which the allocator does not hold")
    reserved_error_bar_pct: float = Field(default=0.0, description="error bar of reserved_peak_bytes (held-out H200 "
                                          "runs; docs/allocator.md)")
    fit_verdict: Literal["fits", "at_risk", "does_not_fit"] = Field(
        default="fits", description="does_not_fit when fits is false; at_risk when it fits but the headroom left by "
        "the reserved peak (or by the allocated peak and its hard overhead) is inside that estimate's error bar; "
        "fits otherwise")
    managed_bytes: int = Field(default=0, description="of total_bytes, the bytes in CUDA managed memory (bitsandbytes "
                               "paged optimizer states): resident on the GPU, counted by nvidia-smi / NVML, not by "
                               "torch.cuda.max_memory_allocated(), which reads peak_allocated_bytes - managed_bytes")


class TimeResult(_Frozen):
    step_time_s: float
    compute_s: float
    communication_s: float
    exposed_communication_s: float
    bubble_s: float
    optimizer_s: float
    offload_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    error_bar_pct: float
    flops_per_step: float = 0.0
    breakdown_s: dict[str, float] = Field(default_factory=dict)


class TrainResult(_Frozen):
    time_to_train_s: float
    gpu_hours: float
    energy_kwh: float
    checkpoint_bytes: int
    checkpoint_write_s: float
    steps: int
    dataset_read_bytes_per_s: float


class HostResult(_Frozen):
    ram_bytes_per_node: int
    ram_bytes_per_process: int
    ram_breakdown_bytes: dict[str, int]
    nvme_bytes: int
    checkpoint_bytes: int
    checkpoint_write_s: float
    dataset_read_bytes_per_s: float
    network_bytes_per_s_per_node: float
    power_w_per_node: float
    fits_server: bool
    warnings: list[Message] = Field(default_factory=list)
    recommended_ram_gib: int = 0
    recommended_nics: Message = ""
    ram_peak_phase: str = ""
    recommended_dimms: Message = ""
    recommended_nvme: Message = ""
    checkpoint_bytes_per_node: int = 0
    checkpoint_target: str = ""
    dataset_bytes: int = 0
    network_bytes_per_step_per_node: int = 0
    fabric: Message = ""
    power_w_average: float = 0.0
    power_btu_per_h: float = 0.0
    nodes_per_rack: int = 0
    notes: list[Message] = Field(default_factory=list)
    # issue 33 item 4: pinned host memory of activation offloading (training.activation_offloading), part of
    # ram_bytes_per_process / ram_bytes_per_node (the breakdown's offloaded_activations): one process, its node
    pinned_offload_bytes: int = 0
    pinned_offload_bytes_per_node: int = 0


class ModelSummary(_Frozen):
    name: str
    total_params: int
    active_params: int
    trainable_params: int
    published_params: int | None
    num_layers: int
    hidden_size: int
    vocab_size: int


class LayoutSummary(_Frozen):
    world_size: int
    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    sharding: str
    shard_group_size: int
    global_batch_tokens: int
    gpu: str
    server: str | None
    virtual_stages: int = Field(default=1, description="model chunks per pipeline rank (interleaved schedule)")
    stage_layers: list[int] = Field(default_factory=list, description="decoder layers on each pipeline rank, "
                                    "first to last (its virtual chunks summed); empty without pipeline parallelism")
    pipeline_split: str = Field(default="even", description="even | weighted (the embedding and the loss each "
                                "count as a layer: Megatron-LM account_for_embedding/loss_in_pipeline_split, "
                                "torchtitan) | given (first_stage_layers / last_stage_layers)")


class Suggestion(_Frozen):
    """One change to the request that does not fit: ``changes`` maps dotted request fields to new values."""

    summary: Message
    changes: dict[str, object]
    total_bytes: int = Field(description="per-GPU total (as nvidia-smi would show it) with the change")
    fits: bool


class EstimateFabric(_Frozen):
    """The compute fabric of a multi-node estimate (issue 32): what ``POST /api/v1/clusters`` answers for
    ``request`` (the same function, :func:`estimator.cluster.design_cluster`, so the same figures), less the
    drawing, the scaling curve and the nccl-tests lines. Its switches, optics, cables and UFM appliance are the
    estimate's bill-of-materials lines (those carrying ``fabric_role``)."""

    request: ClusterRequest = Field(description="the cluster request this fabric answers: POST it to "
                                    "/api/v1/clusters to see the same figures with the topology drawn")
    design: ClusterDesign
    parts: list[PartLine] = Field(description="the fabric's parts (switches, optics, cables, UFM); the servers "
                                  "are the bill of materials' own line")
    power: ClusterPower
    rack: ClusterRack = Field(description="the rack plan: compute racks, the switches' rack units and network racks")
    cost: ClusterCost
    tco: ClusterTco | None = Field(description="ownership TCO with this fabric's parts as the networking capex and "
                                   "its switches and optics' power; null when the server has no catalog price")
    notes: list[Message] = Field(default_factory=list)


class EstimateResponse(_Frozen):
    model: ModelSummary
    layout: LayoutSummary
    memory: MemoryResult
    time: TimeResult | None = None
    train: TrainResult | None = None
    host: HostResult | None = None
    bill_of_materials: list[dict[str, object]] = Field(default_factory=list)
    assumptions: list[Message] = Field(default_factory=list)
    warnings: list[Message] = Field(default_factory=list)
    suggestions: list[Suggestion] = Field(default_factory=list,
                                          description="when it does not fit: changes that would make it fit")
    fit_suggestions: list[Suggestion] = Field(
        default_factory=list, description="when memory.fit_verdict is at_risk or does_not_fit: the allocator setting "
        "(training.allocator) or a chunked / fused loss (training.loss_kernel) where that alone makes it fit, with "
        "the GiB of reserved memory it frees; total_bytes is the reserved peak plus the memory outside the allocator")
    estimator_version: str
    catalog_version: str
    cost: CostResult | None = Field(default=None, description="the run priced on one cost basis (own or rent): "
                                    "rate per GPU-hour, source, date, confidence, total and assumptions")
    fabric: EstimateFabric | None = Field(default=None, description="the compute fabric of a multi-node job on a "
                                          "catalog server whose GPU-fabric NICs a fabric takes (request.cluster); "
                                          "null on one node, and where no fabric takes the server's NICs (an "
                                          "assumption line says why)")
