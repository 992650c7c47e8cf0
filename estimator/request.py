"""The request contract shared by Python, the CLI and the REST API.

Field names and values are a contract with quoting tools (issue #2): keep them. Every model is frozen and
forbids unknown fields, so a typo such as ``"micro_batchsize"`` is a validation error naming the field
instead of a silently ignored default.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from estimator.host_config import HostInput

__all__ = [
    "MAX_ACCUMULATION_STEPS",
    "EstimateRequest",
    "Hardware",
    "HfConfigModel",
    "ModelArch",
    "ModelInput",
    "Parallelism",
    "Training",
]


MAX_ACCUMULATION_STEPS = 1_000_000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


Method = Literal["full", "lora", "qlora"]
Precision = Literal["bf16-mixed", "bf16-true", "fp32", "fp8-mixed"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "adafactor", "lion"]
OptimizerImpl = Literal["fused", "foreach", "for-loop"]
Checkpointing = Literal["none", "selective", "full"]
Sharding = Literal["none", "zero1", "zero2", "zero3", "fsdp", "hsdp"]
Offload = Literal["none", "optimizer", "optimizer+params"]
Framework = Literal["pytorch", "deepspeed", "megatron"]
Attention = Literal["flash", "sdpa", "eager"]
PipelineSchedule = Literal["1f1b", "interleaved", "gpipe"]


class ModelArch(_Frozen):
    """A transformer described by its shape. Multi-head latent attention (DeepSeek) uses the ``*_lora_rank``
    and ``*_head_dim`` fields; a mixture of experts sets ``num_experts`` > 1."""

    name: str = "custom"
    num_layers: int = Field(gt=0, le=1000)
    hidden_size: int = Field(gt=0, le=131072)
    num_attention_heads: int = Field(gt=0, le=1024)
    num_kv_heads: int | None = Field(default=None, gt=0, le=1024)
    head_dim: int | None = Field(default=None, gt=0, le=4096)
    ffn_hidden_size: int = Field(gt=0, le=1048576)
    vocab_size: int = Field(gt=0, le=4_000_000)
    tied_embeddings: bool = False
    num_experts: int = Field(default=1, ge=1, le=4096)
    experts_per_token: int = Field(default=1, ge=1, le=256)
    moe_ffn_hidden_size: int | None = Field(default=None, gt=0)
    num_shared_experts: int = Field(default=0, ge=0, le=64)
    first_dense_layers: int = Field(default=0, ge=0)
    gated_mlp: bool = True
    attention_bias: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    qk_nope_head_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    sliding_window: int | None = Field(default=None, gt=0)
    norms_per_layer: int = Field(default=2, ge=0, le=8)
    final_logit_softcapping: float | None = Field(default=None, gt=0, description="Gemma 2: tanh cap on logits")
    attn_logit_softcapping: float | None = Field(default=None, gt=0,
                                                 description="Gemma 2: tanh cap on attention scores (no flash)")
    learned_position_embeddings: int = Field(default=0, ge=0)
    source: str = ""
    published_params: int | None = Field(default=None, gt=0, description="published parameter count")

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelArch:
        kv = self.num_kv_heads or self.num_attention_heads
        if self.num_attention_heads % kv:
            raise ValueError("num_attention_heads must be a multiple of num_kv_heads")
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token cannot exceed num_experts")
        if self.first_dense_layers > self.num_layers:
            raise ValueError("first_dense_layers cannot exceed num_layers")
        return self


class HfConfigModel(_Frozen):
    """A Hugging Face ``config.json`` pasted as JSON."""

    hf_config: dict[str, Any]


ModelInput = str | HfConfigModel | ModelArch


class Training(_Frozen):
    method: Method = "full"
    lora_rank: int = Field(default=16, ge=1, le=4096)
    lora_targets: Literal["all-linear", "attention"] = "all-linear"
    precision: Precision = "bf16-mixed"
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "fused"
    micro_batch_size: int = Field(default=1, ge=1, le=65536)
    seq_len: int = Field(default=4096, ge=1, le=10_000_000)
    gradient_accumulation_steps: int = Field(default=1, ge=1, le=MAX_ACCUMULATION_STEPS)
    activation_checkpointing: Checkpointing = "none"
    train_tokens: float | None = Field(default=None, gt=0)
    attention: Attention = "flash"
    pipeline_schedule: PipelineSchedule = "1f1b"
    virtual_stages: int = Field(default=1, ge=1, le=64)


class Parallelism(_Frozen):
    sharding: Sharding = "none"
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    cp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=1024)
    sequence_parallel: bool = False
    offload: Offload = "none"
    framework: Framework = "pytorch"
    hsdp_shard_size: int | None = Field(default=None, ge=1, description="GPUs per shard group for HSDP")

    @property
    def normalized_sharding(self) -> Sharding:
        """``"fsdp"`` is ZeRO-3 (full shard); the others as given."""
        return "zero3" if self.sharding == "fsdp" else self.sharding


class Hardware(_Frozen):
    gpu: str = "h100-sxm5-80gb"
    server: str | None = None
    num_nodes: int = Field(default=1, ge=1, le=100_000)
    gpus_per_node: int = Field(default=8, ge=1, le=64)

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node


class EstimateRequest(_Frozen):
    model: ModelInput = "llama-3.1-70b"
    training: Training = Training()
    parallelism: Parallelism = Parallelism()
    hardware: Hardware = Hardware()
    host: HostInput | None = Field(default=None, description="whole-node sizing choices (checkpoints, dataset, "
                                   "rack power); null: the defaults shown in HostInput")

    @property
    def dp(self) -> int:
        """Data-parallel degree = num_nodes x gpus_per_node / (tp x pp x cp)."""
        p = self.parallelism
        return self.hardware.world_size // (p.tp * p.pp * p.cp)
