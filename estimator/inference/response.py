"""The inference response contract: typed, frozen; bytes are integers, times seconds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from estimator.messages import Message

__all__ = ["CurvePoint", "InferenceResponse", "MemoryBudget", "ServingCostResult", "SpeedResult"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MemoryBudget(_Frozen):
    """One GPU at start-up, as the engine splits it (engines.py names each rule's source)."""

    total_bytes: int = Field(description="torch.cuda.mem_get_info() total")
    fraction: float = Field(description="gpu_memory_utilization / mem_fraction_static / free_gpu_memory_fraction")
    fraction_source: Message
    budget_bytes: int
    weights_bytes: int
    activation_peak_bytes: int = Field(description="torch peak increase of the profile run")
    non_torch_bytes: int
    cuda_graph_bytes: int
    cuda_context_bytes: int
    kv_cache_bytes: int
    headroom_bytes: int = Field(description="left outside the budget after the context and CUDA graphs")
    kv_bytes_per_token: int = Field(description="all layers on this GPU")
    kv_bytes_per_token_layer: int
    block_size: int
    num_blocks: int
    kv_tokens: int = Field(description="tokens the KV pool holds ('GPU KV cache size' in vLLM's log)")
    max_requests_at_full_context: int = Field(description="requests of max_model_len at once")
    max_requests_for_workload: int = Field(description="requests of input + output tokens at once (per replica)")
    longest_request_tokens: int
    error_bar_pct: float


class CurvePoint(_Frozen):
    concurrency: int
    ttft_s: float
    tpot_s: float
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_node: float


class SpeedResult(_Frozen):
    concurrency: int = Field(description="requests in flight per replica for the figures below: the request's "
                             "concurrency, the one that keeps up with its request rate, the most within its "
                             "latency targets, else as many as the KV pool holds")
    replicas_per_node: int
    prefill_s: float
    decode_step_s: float
    ttft_s: float
    tpot_s: float
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_node: float
    input_tokens_per_s_per_node: float
    curve: list[CurvePoint]
    max_concurrency_within_targets: int | None = Field(
        description="largest concurrency per replica meeting ttft_target_s / tpot_target_s (null: no target)")
    error_bar_pct: float


class ServingCostResult(_Frozen):
    """$ per million tokens and yearly capacity of the node (the OpenAPI component `ServingCostResult`; the
    training estimate's cost is `CostResult`)."""

    basis: str
    node_usd_per_hour: float
    usd_per_million_output_tokens: float
    usd_per_million_input_tokens: float
    yearly_output_tokens: float
    yearly_input_tokens: float
    utilisation: float
    source: Message
    price_date: str | None
    error_bar_pct: float


class InferenceResponse(_Frozen):
    engine: str
    model: str
    gpu: str
    server: str | None
    starts: bool
    errors: list[Message] = Field(description="the engine's own start-up error when it will not start")
    warnings: list[Message]
    command: str
    memory: MemoryBudget
    speed: SpeedResult | None
    cost: ServingCostResult | None
    assumptions: list[Message]
    estimator_version: str
