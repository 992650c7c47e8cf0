"""The request contract shared by Python, the CLI and the REST API.

Field names and values are a contract with quoting tools (issue #2): keep them. Every model is frozen and
forbids unknown fields, so a typo such as ``"micro_batchsize"`` is a validation error naming the field
instead of a silently ignored default.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from estimator.host_options import HostInput
from estimator.rules import derived as rules
from estimator.rules import stacks
from estimator.tco.run_cost import CostChoice

__all__ = [
    "DEFAULT_GPU",
    "MAX_ACCUMULATION_STEPS",
    "MAX_GPUS_PER_NODE",
    "MAX_TRAIN_TOKENS",
    "ClusterChoice",
    "EstimateRequest",
    "FabricKind",
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
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "adafactor", "lion", "paged-adamw-8bit", "paged-adamw", "adamw-4bit",
                    "muon", "ao-adamw-8bit"]
OptimizerImpl = Literal["fused", "foreach", "for-loop"]
Checkpointing = Literal["none", "selective", "full"]
Sharding = Literal["none", "zero1", "zero2", "zero3", "fsdp", "hsdp"]
Offload = Literal["none", "optimizer", "optimizer+params"]
Framework = Literal["pytorch", "deepspeed", "megatron"]
Attention = Literal["flash", "sdpa", "eager"]
PipelineSchedule = Literal["1f1b", "interleaved", "gpipe"]
TpPlan = rules.TpPlan
#: how the loss is computed from the last hidden state (estimator.rules.stacks: each kernel and its source)
LossKernel = Literal["materialized", "chunked", "fused"]
#: fused kernels patched into the model (Liger: RMSNorm, SwiGLU, RoPE)
FusedKernels = Literal["none", "liger"]
#: saved activations copied to pinned host memory during forward and back for backward
ActivationOffloading = Literal["none", "checkpoints", "all"]
#: PyTorch's CUDA caching allocator setting (``PYTORCH_CUDA_ALLOC_CONF``; estimator.training.allocator)
Allocator = Literal["default", "expandable_segments"]
#: the fine-tuning stack whose documented defaults fill the fields a request leaves out (estimator.rules.stacks)
Stack = Literal["transformers", "trl", "axolotl", "llama-factory", "torchtune", "unsloth"]

#: The tensor-parallel plan each framework applies when ``parallelism.tp_plan`` is null. Megatron-LM always
#: splits the vocabulary (``VocabParallelEmbedding``, ``ColumnParallelLinear`` output layer and
#: ``vocab_parallel_cross_entropy``, ``megatron/core/tensor_parallel/layers.py``); "pytorch" means the
#: torchtitan-style DTensor plan (``torchtitan/models/llama3/infra/parallelize.py`` ``apply_tp``: embedding
#: ``RowwiseParallel``, LM head ``ColwiseParallel`` with sharded logits under ``loss_parallel()``); DeepSpeed's
#: AutoTP (``deepspeed/module_inject/auto_tp.py``) replaces the linear layers only, leaving the embedding whole
#: on every rank and all-reducing the LM head's output, as Hugging Face transformers' own plan does
#: (``tp_plan="auto"``: the model's ``base_model_tp_plan`` has no embedding entry, the LM head is
#: ``"colwise_gather_output"``, the loss is ``ForCausalLMLoss`` on the full logits).
DEFAULT_TP_PLAN: dict[str, str] = {"pytorch": "vocab-parallel", "megatron": "vocab-parallel",
                                   "deepspeed": "replicated-embeddings"}


def _not_bool(value: Any) -> Any:
    """JSON ``true``/``false`` is not a number: pydantic's lax mode would read ``true`` as 1."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not true or false")
    return value


# An integer field that refuses booleans (numeric strings stay accepted: the web form submits text).
Int = Annotated[int, BeforeValidator(_not_bool)]
OptInt = Annotated[int | None, BeforeValidator(_not_bool)]
OptFloat = Annotated[float | None, BeforeValidator(_not_bool)]
Float = Annotated[float, BeforeValidator(_not_bool)]


def _field_error(model: str, field: str, value: Any, message: str) -> ValidationError:
    """A model-level rule's error located at one field (``model.hidden_size``), not at the model."""
    return ValidationError.from_exception_data(model, [InitErrorDetails(
        type=PydanticCustomError("value_error", message), loc=(field,), input=value)])


class ModelArch(_Frozen):
    """A transformer described by its shape. Multi-head latent attention (DeepSeek) uses the ``*_lora_rank``
    and ``*_head_dim`` fields; a mixture of experts sets ``num_experts`` > 1. Every size has an upper bound
    (a few times the largest published model's) so that absurd shapes are refused, not computed."""

    name: str = Field(default="custom", max_length=200)
    num_layers: Int = Field(gt=0, le=1000)
    hidden_size: Int = Field(gt=0, le=131072)
    num_attention_heads: Int = Field(gt=0, le=1024)
    num_kv_heads: OptInt = Field(default=None, gt=0, le=1024)
    head_dim: OptInt = Field(default=None, gt=0, le=4096)
    ffn_hidden_size: Int = Field(gt=0, le=1048576)
    vocab_size: Int = Field(gt=0, le=4_000_000)
    tied_embeddings: bool = False
    num_experts: Int = Field(default=1, ge=1, le=4096)
    experts_per_token: Int = Field(default=1, ge=1, le=256)
    moe_ffn_hidden_size: OptInt = Field(default=None, gt=0, le=1048576)
    num_shared_experts: Int = Field(default=0, ge=0, le=64)
    first_dense_layers: Int = Field(default=0, ge=0, le=1000)
    gated_mlp: bool = True
    attention_bias: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    q_lora_rank: OptInt = Field(default=None, gt=0, le=131072)
    kv_lora_rank: OptInt = Field(default=None, gt=0, le=131072)
    qk_rope_head_dim: OptInt = Field(default=None, gt=0, le=4096)
    qk_nope_head_dim: OptInt = Field(default=None, gt=0, le=4096)
    v_head_dim: OptInt = Field(default=None, gt=0, le=4096)
    sliding_window: OptInt = Field(default=None, gt=0, le=10_000_000)
    norms_per_layer: Int = Field(default=2, ge=0, le=8)
    norm_fp32_scale: bool = Field(default=False, description="the RMSNorm scales by (1 + weight) in fp32 (Gemma, "
                                  "Gemma 2 / 3 GemmaRMSNorm): a trained weight keeps the fp32 normalised tensor")
    fused_projections: bool = Field(default=False, description="q, k and v are one qkv_proj linear and the gate "
                                    "and up projections one gate_up_proj (Phi-3): one LoRA adapter each")
    parallel_residual: bool = Field(default=False, description="attention and MLP both read the layer input "
                                    "(one residual add: GPT-NeoX use_parallel_residual, GPT-J, Falcon parallel_attn)")
    qk_norm: bool = Field(default=False, description="an RMSNorm on every query and key head before the rotary "
                          "embedding (Qwen3, Gemma 3, OLMo 2: q_norm / k_norm)")
    final_logit_softcapping: OptFloat = Field(default=None, gt=0, le=1e6, allow_inf_nan=False,
                                              description="Gemma 2: tanh cap on logits")
    attn_logit_softcapping: OptFloat = Field(default=None, gt=0, le=1e6, allow_inf_nan=False,
                                             description="Gemma 2: tanh cap on attention scores (no flash)")
    learned_position_embeddings: Int = Field(default=0, ge=0, le=10_000_000)
    source: str = Field(default="", max_length=2000)
    published_params: OptInt = Field(default=None, gt=0, le=10**14, description="published parameter count")

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelArch:
        kv = self.num_kv_heads or self.num_attention_heads
        if self.num_attention_heads % kv:
            raise _field_error("ModelArch", "num_kv_heads", self.num_kv_heads,
                               f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                               f"num_kv_heads={kv}")
        if self.head_dim is None and self.kv_lora_rank is None and self.hidden_size % self.num_attention_heads:
            raise _field_error("ModelArch", "hidden_size", self.hidden_size,
                               f"hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                               f"{self.num_attention_heads}: give head_dim")
        if self.experts_per_token > self.num_experts:
            raise _field_error("ModelArch", "experts_per_token", self.experts_per_token,
                               "experts_per_token cannot exceed num_experts")
        if self.first_dense_layers > self.num_layers:
            raise _field_error("ModelArch", "first_dense_layers", self.first_dense_layers,
                               "first_dense_layers cannot exceed num_layers")
        return self


class HfConfigModel(_Frozen):
    """A Hugging Face ``config.json`` pasted as JSON."""

    hf_config: dict[str, Any]


ModelInput = str | HfConfigModel | ModelArch


MAX_TRAIN_TOKENS = 1e16  # 10,000 x the largest published pre-training runs (~15T tokens)


class Training(_Frozen):
    method: Method = "full"
    lora_rank: Int = Field(default=16, ge=1, le=4096)
    lora_targets: Literal["all-linear", "attention", "qkv"] = Field(
        default="all-linear", description="linears with LoRA adapters: all of them, the attention projections "
        "(q, k, v, o), or q, k and v only (NeMo 1.x's default attention_qkv, Megatron-Bridge's LoRA performance "
        "recipes' linear_qkv)")
    precision: Precision = "bf16-mixed"
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "fused"
    micro_batch_size: Int = Field(default=1, ge=1, le=65536)
    seq_len: Int = Field(default=4096, ge=1, le=10_000_000)
    gradient_accumulation_steps: Int = Field(default=1, ge=1, le=MAX_ACCUMULATION_STEPS)
    activation_checkpointing: Checkpointing = "none"
    train_tokens: OptFloat = Field(default=None, gt=0, le=MAX_TRAIN_TOKENS, allow_inf_nan=False)
    attention: Attention = "flash"
    packed_document_tokens: OptInt = Field(
        default=None, ge=1, le=10_000_000, description="packed sequences: mean tokens per document packed into "
        "each sequence; attention runs within each document (FlashAttention varlen / Transformer Engine THD; "
        "not with eager attention). null: one document per sequence")
    pipeline_schedule: PipelineSchedule = "1f1b"
    virtual_stages: Int = Field(default=1, ge=1, le=64)
    lora_dropout: Float = Field(default=0.0, ge=0.0, lt=1.0, allow_inf_nan=False,
                                description="dropout on the LoRA adapters' input (peft LoraConfig.lora_dropout; "
                                "0.05 is common): above 0, every adapted linear keeps its own dropout mask and "
                                "output for backward")
    lora_kernel: Literal["peft", "fused"] | None = Field(
        default=None, description="how the LoRA adapters run: \"peft\" (Hugging Face peft lora.Linear on each "
        "linear: its own A and B GEMMs, the dropout, scale and add as separate kernels) or \"fused\" (one adapter on "
        "the combined QKV and gate/up projections, the adapter's matmuls, scale and add in fused kernels: NeMo "
        "AutoModel's use_triton LoRA, Megatron-Bridge / NeMo LoRA inside Transformer Engine layers); null: the "
        "framework's default (megatron fused, pytorch and deepspeed peft). Step time only: the activation memory is "
        "peft's either way")

    stack: Stack = Field(
        default="transformers", description="the fine-tuning stack that runs the job: its documented defaults fill "
        "the fields this request leaves out (estimator.rules.stacks lists each default and its source; the estimate's "
        "assumptions name the ones applied). \"transformers\": Hugging Face Trainer + peft, the estimator's "
        "historical behaviour")
    loss_kernel: LossKernel | None = Field(
        default="materialized", description="how the loss is computed: \"materialized\" (Hugging Face "
        "ForCausalLMLoss: the full logits upcast to fp32 and kept for backward), \"chunked\" (TRL "
        "loss_type=\"chunked_nll\", torchtune CEWithChunkedOutputLoss: the logits one chunk at a time) or \"fused\" "
        "(Liger fused linear cross-entropy, Apple Cut Cross-Entropy, Unsloth: the full logits never exist); left out "
        "or null: the stack's default (transformers: materialized)")
    fused_kernels: FusedKernels | None = Field(
        default="none", description="fused kernels patched into the model: \"liger\" (Liger RMSNorm, SwiGLU, RoPE: "
        "use_liger_kernel / liger_kernel: true / enable_liger_kernel) or \"none\"; left out or null: the stack's "
        "default")
    activation_offloading: ActivationOffloading | None = Field(
        default="none", description="saved activations copied to pinned host memory: \"checkpoints\" (each "
        "checkpointed layer's input: Unsloth use_gradient_checkpointing=\"unsloth\", axolotl gradient_checkpointing: "
        "offload; needs activation_checkpointing \"full\"), \"all\" (every saved tensor: torchtune / TRL "
        "activation_offloading) or \"none\"; left out or null: the stack's default. GPU memory down, host RAM and "
        "PCIe traffic up")
    allocator: Allocator = Field(
        default="default", description="PyTorch's CUDA caching allocator: \"default\" (PYTORCH_CUDA_ALLOC_CONF unset: "
        "one cudaMalloc segment per large request, split and cached) or \"expandable_segments\" "
        "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one segment per stream that grows in 20 MiB pages). It "
        "sets memory.reserved_peak_bytes and memory.fit_verdict (estimator.training.allocator); the allocated peak "
        "is the same either way")

    @model_validator(mode="after")
    def _stack_defaults(self) -> Training:
        """Fill the fields the request leaves out (or null) with the stack's documented defaults
        (:data:`estimator.rules.stacks.STACK_DEFAULTS`); a field the request sets wins. Filled in place (the model is
        frozen once validated), so ``model_fields_set`` still says what the request itself gave."""
        for field, value in stacks.stack_fill(self).items():
            object.__setattr__(self, field, value)
        return self

    @model_validator(mode="after")
    def _check_stack_combinations(self) -> Training:
        """A combination a stack's own code refuses is refused here, with that code's reason."""
        refusal = stacks.training_refusal(self)
        if refusal is not None:
            field, message = refusal
            raise _field_error("Training", field, getattr(self, field), message)
        return self

    @model_validator(mode="after")
    def _check_schedule(self) -> Training:
        """Virtual pipeline stages are chunks of the interleaved 1F1B schedule (Narayanan et al. 2021, Sec. 2.2;
        Megatron ``--num-layers-per-virtual-pipeline-stage``); 1F1B and GPipe run one chunk per rank."""
        if self.virtual_stages > 1 and self.pipeline_schedule != "interleaved":
            raise _field_error("Training", "virtual_stages", self.virtual_stages,
                               f"virtual_stages={self.virtual_stages} needs pipeline_schedule \"interleaved\"")
        return self


class Parallelism(_Frozen):
    sharding: Sharding = "none"
    tp: Int = Field(default=1, ge=1, le=1024)
    pp: Int = Field(default=1, ge=1, le=1024)
    cp: Int = Field(default=1, ge=1, le=1024)
    ep: Int = Field(default=1, ge=1, le=1024)
    sequence_parallel: bool = False
    offload: Offload = "none"
    framework: Framework = "pytorch"
    tp_comm_overlap: Literal["auto", "on", "off"] = Field(
        default="auto", description="overlap tensor-parallel all-gather / reduce-scatter with the GEMMs they feed "
        "(Megatron-Core --tp-comm-overlap, Transformer Engine userbuffers; needs sequence_parallel); auto: on for "
        "framework megatron with sequence_parallel, off otherwise")
    first_stage_layers: OptInt = Field(default=None, ge=0, le=1000,
                                       description="decoder layers on the first pipeline stage (Megatron-LM "
                                       "--decoder-first-pipeline-num-layers); null: placed by the framework's rule")
    last_stage_layers: OptInt = Field(default=None, ge=0, le=1000,
                                      description="decoder layers on the last pipeline stage (Megatron-LM "
                                      "--decoder-last-pipeline-num-layers); null: placed by the framework's rule")
    hsdp_shard_size: OptInt = Field(default=None, ge=1, le=1_000_000,
                                    description="data-parallel ranks per HSDP shard group (null: one node's worth); "
                                    "with context parallelism the group spans this x cp GPUs")
    tp_plan: TpPlan | None = Field(default=None, description="how tensor parallelism treats the vocabulary: "
                                   "\"vocab-parallel\" (embedding, LM head and logits split by tp: Megatron-LM, "
                                   "torchtitan) or \"replicated-embeddings\" (Hugging Face transformers "
                                   "tp_plan=\"auto\", accelerate, DeepSpeed AutoTP: the embedding whole on every "
                                   "rank, the LM head's output gathered, the loss on the full logits); null: the "
                                   "framework's default (pytorch and megatron vocab-parallel, deepspeed "
                                   "replicated-embeddings)")

    @model_validator(mode="after")
    def _check_hsdp(self) -> Parallelism:
        if self.hsdp_shard_size is not None and self.sharding != "hsdp":
            raise _field_error("Parallelism", "hsdp_shard_size", self.hsdp_shard_size,
                               f"hsdp_shard_size applies to sharding \"hsdp\" only, not {self.sharding!r}")
        if self.tp_plan == "replicated-embeddings" and self.framework == "megatron":
            raise _field_error("Parallelism", "tp_plan", self.tp_plan,
                               "Megatron-LM always splits the vocabulary over the tensor-parallel ranks "
                               "(VocabParallelEmbedding): use \"vocab-parallel\" or leave tp_plan empty")
        return self

    @property
    def resolved_tp_plan(self) -> TpPlan:
        """``tp_plan``, or the framework's default (:data:`DEFAULT_TP_PLAN`) when it is null."""
        return rules.resolved_tp_plan(self.tp_plan, self.framework, DEFAULT_TP_PLAN)

    @property
    def normalized_sharding(self) -> Sharding:
        """``"fsdp"`` is ZeRO-3 (full shard); the others as given."""
        return rules.normalized_sharding(self.sharding)  # type: ignore[return-value]


#: the GPU of a request that names none (a server's own GPU replaces it: estimator.estimate.resolve_hardware)
DEFAULT_GPU = "h100-sxm5-80gb"


#: the most GPUs one node may have: the largest NVLink domain sold as one system (GB200 / GB300 NVL72: 72), so
#: that a request without a catalog server can describe such a rack as one 72-GPU node. A catalog NVL72 is
#: four-GPU trays whose NVLink domain (``nvlink_domain_gpus``) spans 18 of them.
MAX_GPUS_PER_NODE = 72


class Hardware(_Frozen):
    gpu: str = DEFAULT_GPU
    server: str | None = None
    num_nodes: Int = Field(default=1, ge=1, le=100_000)
    gpus_per_node: Int = Field(default=8, ge=1, le=MAX_GPUS_PER_NODE)

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node


#: the compute fabric kinds of :mod:`estimator.cluster` (``estimator.cluster.contract.FABRIC_CHOICES``; a test holds
#: the two the same: the contract imports this module, so it cannot be imported here)
FabricKind = Literal["ib-ndr", "ib-xdr", "roce-400", "roce-800"]


class ClusterChoice(_Frozen):
    """The request's ``cluster`` object: the compute fabric of a multi-node job (issue 32), designed by
    :func:`estimator.cluster.design_cluster` as ``POST /api/v1/clusters`` does."""

    fabric: FabricKind | None = Field(
        default=None, description="ib-ndr (InfiniBand NDR 400G, Quantum-2 QM9700), ib-xdr (XDR 800G, Quantum-X800), "
        "roce-400 / roce-800 (Spectrum-X RoCE on SN5600); null: ib-ndr on 400G GPU-fabric NICs, ib-xdr on 800G ones "
        "(POST /api/v1/clusters' default is ib-ndr)")
    oversubscription: float = Field(default=1.0, ge=1.0, le=8.0, allow_inf_nan=False,
                                    description="leaf downlink : uplink ratio; 1 = non-blocking (the default)")
    ufm: bool = Field(default=True, description="a UFM fabric-manager appliance on an InfiniBand fabric")


class EstimateRequest(_Frozen):
    model: ModelInput = "llama-3.1-70b"
    training: Training = Training()
    parallelism: Parallelism = Parallelism()
    hardware: Hardware = Hardware()
    host: HostInput | None = Field(default=None, description="whole-node sizing choices (checkpoints, dataset, "
                                   "rack power); null: the defaults shown in HostInput")
    cost: CostChoice | None = Field(default=None, description="how to price the run (own or rent); null: a "
                                    "chosen server is owned, else the cheapest hyperscaler on-demand offer")
    cluster: ClusterChoice | None = Field(default=None, description="the compute fabric of a multi-node job (its "
                                          "switches, optics and cables join the bill of materials, its capex and "
                                          "power the response's fabric TCO); null: the defaults shown in "
                                          "ClusterChoice")

    @property
    def dp(self) -> int:
        """Data-parallel degree = num_nodes x gpus_per_node / (tp x pp x cp)."""
        p = self.parallelism
        return rules.data_parallel(self.hardware.world_size, p.tp, p.pp, p.cp)
