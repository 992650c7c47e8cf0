"""The inference request contract (``POST /api/v1/inference-estimates``, ``capplan infer``).

Frozen, unknown fields refused (a typo is a 422 naming the field). Defaults are the engines' own, with their
sources in :mod:`estimator.inference.engines`; ``null`` means "the engine's default for this GPU".
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from estimator.request import MAX_GPUS_PER_NODE, Int, ModelInput, OptFloat, OptInt
from estimator.tco import TcoAssumptions

__all__ = [
    "Engine",
    "InferenceHardware",
    "InferenceRequest",
    "ServingConfig",
    "ServingCost",
    "WeightsFormat",
    "Workload",
]

Engine = Literal["vllm", "sglang", "tensorrt-llm"]
WeightsFormat = Literal["bf16", "fp16", "fp8", "int8", "int4-awq", "int4-gptq"]
KvCacheDtype = Literal["auto", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2"]


def _error_at(loc: tuple[str, ...], value: Any, message: str) -> ValidationError:
    """A cross-field rule's error located at one nested field (``serving.tensor_parallel_size``)."""
    return ValidationError.from_exception_data("InferenceRequest", [InitErrorDetails(
        type=PydanticCustomError("value_error", message), loc=loc, input=value)])


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InferenceHardware(_Frozen):
    gpu: str = "h200-sxm-141gb"
    server: str | None = Field(default=None, description="a catalog server; null: the cheapest carrying the GPU")
    gpus_per_node: Int = Field(default=8, ge=1, le=MAX_GPUS_PER_NODE)


class ServingConfig(_Frozen):
    """The engine's start-up settings, named as ``vllm serve`` names them."""

    tensor_parallel_size: Int = Field(default=1, ge=1, le=64)
    pipeline_parallel_size: Int = Field(default=1, ge=1, le=64)
    enable_expert_parallel: bool = False
    weights: WeightsFormat = "bf16"
    group_size: Int = Field(default=128, ge=16, le=8192, description="AWQ/GPTQ quantization group size")
    zero_points: bool = Field(default=True, description="AWQ/GPTQ asymmetric (zero points stored)")
    kv_cache_dtype: KvCacheDtype = "auto"
    max_model_len: Int = Field(default=8192, ge=16, le=10_000_000)
    gpu_memory_utilization: OptFloat = Field(default=None, gt=0, le=1, allow_inf_nan=False,
                                             description="vLLM --gpu-memory-utilization, SGLang "
                                             "--mem-fraction-static, TensorRT-LLM free_gpu_memory_fraction; "
                                             "null: the engine's default")
    block_size: OptInt = Field(default=None, ge=1, le=1024, description="KV tokens per block; null: engine's")
    max_num_batched_tokens: OptInt = Field(default=None, ge=16, le=10_000_000)
    max_num_seqs: OptInt = Field(default=None, ge=1, le=100_000)
    enforce_eager: bool = False
    sliding_window_layers: OptInt = Field(default=None, ge=0, le=1000,
                                          description="layers that use the model's sliding window; null: all, "
                                          "or every other one for Gemma 2 (modeling_gemma2.py layer_types)")


class Workload(_Frozen):
    input_tokens: Int = Field(default=1024, ge=1, le=10_000_000)
    output_tokens: Int = Field(default=256, ge=1, le=10_000_000)
    concurrency: OptInt = Field(default=None, ge=1, le=100_000,
                                description="requests in flight per engine replica; null: as many as fit")
    request_rate_per_s: OptFloat = Field(default=None, gt=0, le=1e7, allow_inf_nan=False,
                                         description="requests a second arriving at the node (instead of "
                                         "concurrency): the concurrency that serves them in steady state")
    ttft_target_s: OptFloat = Field(default=None, gt=0, le=3600, allow_inf_nan=False)
    tpot_target_s: OptFloat = Field(default=None, gt=0, le=60, allow_inf_nan=False)


class ServingCost(_Frozen):
    basis: Literal["own", "cloud"] = "own"
    cloud_offer: str | None = Field(default=None, description="a catalog cloud offer id; null: the cheapest")
    server_price_usd: OptFloat = Field(default=None, gt=0, le=1e10, allow_inf_nan=False)
    assumptions: TcoAssumptions = Field(default_factory=TcoAssumptions)


class InferenceRequest(_Frozen):
    model: ModelInput = "llama-3.1-8b"
    engine: Engine = "vllm"
    hardware: InferenceHardware = InferenceHardware()
    serving: ServingConfig = ServingConfig()
    workload: Workload = Workload()
    cost: ServingCost = Field(default_factory=ServingCost)

    @model_validator(mode="after")
    def _check(self) -> InferenceRequest:
        s, w = self.serving, self.workload
        group = s.tensor_parallel_size * s.pipeline_parallel_size
        if group > self.hardware.gpus_per_node:
            raise _error_at(("serving", "tensor_parallel_size"), s.tensor_parallel_size,
                           f"tensor_parallel_size x pipeline_parallel_size = {group} exceeds gpus_per_node="
                           f"{self.hardware.gpus_per_node}")
        if w.concurrency is not None and w.request_rate_per_s is not None:
            raise _error_at(("workload", "request_rate_per_s"), w.request_rate_per_s,
                            "give concurrency or request_rate_per_s, not both")
        if w.input_tokens + w.output_tokens > s.max_model_len:
            raise _error_at(("workload", "output_tokens"), w.output_tokens,
                           f"input_tokens + output_tokens = {w.input_tokens + w.output_tokens} exceeds "
                           f"serving.max_model_len={s.max_model_len}")
        return self
