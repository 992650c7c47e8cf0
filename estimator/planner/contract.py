"""The planner's contract: what ``POST /api/v1/plans`` takes and returns.

A :class:`PlanRequest` is the estimate contract with ``parallelism`` and ``hardware`` optional, plus
``constraints``, the global batch and the objective. Fields of ``parallelism``, ``hardware`` and the layout
fields of ``training`` (micro-batch, accumulation, checkpointing, virtual stages) that the request sets are
*pinned*; everything else is searched. Models are frozen and forbid unknown fields, like the estimate contract.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from estimator.host_options import HostInput
from estimator.messages import Message
from estimator.request import EstimateRequest, Hardware, ModelInput, Parallelism, Training
from estimator.response import EstimateResponse
from estimator.tco.run_cost import CostChoice

__all__ = [
    "DEFAULT_BATCH_TOKENS",
    "Constraints",
    "EnvVar",
    "Exports",
    "Objective",
    "Plan",
    "PlanCost",
    "PlanLayout",
    "PlanMechanisms",
    "PlanRequest",
    "PlanResponse",
    "Pricing",
    "SearchStats",
    "VariedMechanism",
]

Objective = Literal["time", "cost"]
Pricing = Literal["on-demand", "reserved", "owned"]
#: the fine-tuning stacks' memory mechanisms (issue 29, docs/stacks.md) the planner may change from the request's
#: training section: each is a field of ``training``
VariedMechanism = Literal["loss_kernel", "fused_kernels", "activation_offloading", "optimizer"]

#: Without a global batch, about 2**20 tokens (rounded to a power-of-two number of sequences): the order of
#: the 0.5M-4M token batches of Llama-class pre-training and large fine-tunes.
DEFAULT_BATCH_TOKENS = 2**20

#: most ids in ``constraints.gpus`` / ``servers`` (repeats are searched once, unknown ids are errors, so the
#: search never covers more options than the catalog holds; this only bounds the parsing)
MAX_IDS = 1024


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Constraints(_Frozen):
    gpus: tuple[str, ...] | None = Field(default=None, max_length=MAX_IDS,
                                         description="catalog GPU ids allowed (default: all; repeats count once)")
    servers: tuple[str, ...] | None = Field(default=None, max_length=MAX_IDS,
                                            description="catalog server ids allowed (repeats count once)")
    max_nodes: int = Field(default=16, ge=1, le=1024)
    budget_usd: float | None = Field(default=None, gt=0, description="cost of the whole run (needs train_tokens)")
    deadline_days: float | None = Field(default=None, gt=0, description="time to train (needs train_tokens)")
    min_headroom_pct: float = Field(default=0.0, ge=0, le=50,
                                    description="keep this share of GPU memory free (beyond the overhead)")
    memory_margin_pct: float | None = Field(
        default=None, ge=0, le=100,
        description="safety margin on the estimated GPU memory, in percent of it: a layout fits when its memory "
                    "times (1 + margin) fits; null (default): each layout's own memory error bar (the estimate's "
                    "error_bar_pct), 0: no margin")


class PlanRequest(_Frozen):
    model: ModelInput = "llama-3.1-70b"
    training: Training = Training()
    parallelism: Parallelism | None = Field(default=None, description="fields given here are pinned")
    hardware: Hardware | None = Field(default=None, description="fields given here are pinned")
    host: HostInput | None = Field(default=None, description="whole-node sizing choices, as in the estimate "
                                   "contract; they set the host RAM every plan must fit in its server")
    constraints: Constraints = Constraints()
    global_batch_size: int | None = Field(default=None, ge=1, le=1 << 24, description="sequences per step")
    global_batch_tokens: int | None = Field(default=None, ge=1, description="tokens per step (or sequences)")
    objective: Objective = "time"
    pricing: Pricing = Field(default="on-demand", description="cloud on-demand, cloud reserved, or owned servers")
    top_k: int = Field(default=10, ge=1, le=200, description="plans returned besides the Pareto front")
    vary_mechanisms: tuple[VariedMechanism, ...] = Field(
        default=(), max_length=4,
        description="the fine-tuning stack mechanisms the planner may change from `training`'s values, as one more "
        "axis of the search (issue 29, docs/stacks.md): \"loss_kernel\" (a fused loss: Liger fused linear "
        "cross-entropy, Cut Cross-Entropy), \"fused_kernels\" (Liger's kernels, on the model families Liger "
        "patches), \"activation_offloading\" (to pinned host memory: \"checkpoints\" under full checkpointing, "
        "else \"all\"), \"optimizer\" (AdamW to bitsandbytes' 8-bit AdamW, \"adamw-8bit\": other numerics, so "
        "only when asked). Only what the stack runs on each layout is proposed; a plan that changes one says so in "
        "`mechanism_changes`, with the GiB it saves and its step-time cost. Empty (default): the request's values "
        "only")
    cost: CostChoice | None = Field(
        default=None, description="refines `pricing` as in the estimate contract: `utilisation`, "
        "`electricity_usd_per_kwh` and `pue` of owned servers, `provider_class` of cloud offers; `pricing` "
        "chooses the basis, so `cost.basis`, `cost.pricing` and `cost.offer_id` are refused here")

    @field_validator("cost")
    @classmethod
    def _cost_refines_pricing(cls, cost: CostChoice | None) -> CostChoice | None:
        taken = [f"cost.{k}" for k in ("basis", "pricing", "offer_id")
                 if cost is not None and k in cost.model_fields_set]
        if taken:
            raise ValueError(f"{', '.join(taken)}: the planner prices every option by `pricing` "
                             "(on-demand, reserved or owned); leave it out")
        return cost

    @model_validator(mode="after")
    def _check(self) -> PlanRequest:
        if self.global_batch_size is not None and self.global_batch_tokens is not None:
            raise ValueError("give global_batch_size (sequences) or global_batch_tokens, not both")
        if self.global_batch_tokens is not None and self.global_batch_tokens < self.training.seq_len:
            raise ValueError("global_batch_tokens is less than one sequence of training.seq_len")
        c = self.constraints
        if (c.budget_usd is not None or c.deadline_days is not None) and not self.training.train_tokens:
            raise ValueError("budget_usd and deadline_days need training.train_tokens")
        return self

    @property
    def sequences_per_step(self) -> int:
        """The global batch in sequences."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        if self.global_batch_tokens is not None:
            return self.global_batch_tokens // self.training.seq_len
        return int(2 ** max(0, round(math.log2(max(1.0, DEFAULT_BATCH_TOKENS / self.training.seq_len)))))

    @property
    def tokens_per_step(self) -> int:
        """The global batch in tokens (sequences x ``training.seq_len``; every layout of a plan has it)."""
        return self.sequences_per_step * self.training.seq_len


# An environment variable a plan's launch should set (estimator.planner.exports.nccl), with its reason.
class EnvVar(_Frozen):
    name: str
    value: str
    reason: Message
    when: Message = Field(default="always", description="'always', or the condition under which to set it")


# A plan's launcher configs (estimator.planner.exports.launch builds them).
class Exports(_Frozen):
    torchrun: str = Field(description="the launch command of one node (run it on every node)")
    torchrun_argv: list[str]
    deepspeed_config: dict[str, Any] | None = Field(description="ds_config.json of a DeepSpeed plan")
    accelerate_config: dict[str, Any] | None = Field(description="`accelerate launch --config_file` contents")
    accelerate_config_yaml: str | None
    megatron_args: list[str] | None = Field(description="Megatron-LM arguments of a Megatron plan")
    environment: list[EnvVar] = Field(description="NCCL (and CUDA) environment variables, each with its reason")
    notes: list[Message] = Field(default_factory=list)
    nccl_tests: list[str] = Field(default_factory=list, description="nccl-tests command lines to run on the "
                                  "delivered nodes before training (`capplan nccl-check` reads their output)")


class PlanLayout(_Frozen):
    """One point of the search: everything a launcher needs to know."""

    gpu: str
    server: str | None
    num_nodes: int
    gpus_per_node: int
    world_size: int
    framework: str
    sharding: str
    offload: str
    dp: int
    tp: int
    pp: int
    virtual_stages: int
    cp: int
    ep: int
    sequence_parallel: bool
    hsdp_shard_size: int | None
    activation_checkpointing: str
    micro_batch_size: int
    gradient_accumulation_steps: int
    global_batch_size: int
    seq_len: int
    tp_plan: str | None = Field(default=None, description="the tensor-parallel plan the estimate assumed "
                                "(parallelism.tp_plan, or the framework's default); null without TP")
    nvlink_domain_gpus: int | None = Field(default=None, description="GPUs a collective reaches without the NICs: "
                                           "the node, or the NVLink domain when it spans nodes (GB200 / GB300 "
                                           "NVL72: 72); null reads as gpus_per_node")

    @property
    def scale_up_gpus(self) -> int:
        return max(self.gpus_per_node, self.nvlink_domain_gpus or 0)

    @property
    def label(self) -> str:
        parts = [f"{self.num_nodes}x{self.gpus_per_node} {self.server or self.gpu}", self.framework,
                 {"none": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3/FSDP",
                  "hsdp": "HSDP"}.get(self.sharding, self.sharding)]
        parts += [f"{k}{v}" for k, v in (("TP", self.tp), ("PP", self.pp), ("VP", self.virtual_stages),
                                         ("CP", self.cp), ("EP", self.ep)) if v > 1]
        if self.offload != "none":
            parts.append(f"offload {self.offload}")
        parts.append(f"MBS {self.micro_batch_size} x GA {self.gradient_accumulation_steps}")
        parts.append(f"ckpt {self.activation_checkpointing}")
        return " | ".join(parts)


class PlanCost(_Frozen):
    pricing: str = Field(description="on-demand | reserved | owned (the option the cost was taken from)")
    source: str = Field(description="the cloud offer or server the price comes from")
    usd_per_gpu_hour: float
    usd_per_hour: float
    cost_usd: float | None = Field(description="the whole run (null without training.train_tokens)")
    usd_per_million_tokens: float
    price_date: str | None = None
    basis: str | None = Field(default=None, description="own | rent: the cost basis (estimator.tco.run_cost)")
    label: Message | None = Field(default=None, description="what is priced, in words (owned server or offer)")
    confidence: str | None = Field(default=None, description="high | medium | low: the price's confidence")
    gpu_hours: float | None = None
    total_usd: float | None = Field(default=None, description="the whole run on this basis (= cost_usd)")
    assumptions: list[Message] = Field(default_factory=list)
    flags: list[Message] = Field(default_factory=list, description="why this option is priced another way, if it is")


class PlanMechanisms(_Frozen):
    """What a plan changed of the request's fine-tuning stack mechanisms (``PlanRequest.vary_mechanisms``)."""

    changes: dict[str, str] = Field(description="dotted request field -> the value this plan uses, e.g. "
                                    "{\"training.loss_kernel\": \"fused\"}")
    summary: Message = Field(description="the change in words, with what it saves and costs when measured (the "
                             "estimate's ways out say it the same way)")
    saved_bytes: int | None = Field(description="peak allocated GPU memory per GPU the change saves on this plan's "
                                    "layout (the request's mechanisms minus this plan's); null when the request's "
                                    "own mechanisms are refused on this layout")
    step_time_delta_s: float | None = Field(description="step seconds the change adds on this layout (negative: "
                                            "faster); null as saved_bytes")


class Plan(_Frozen):
    rank: int
    id: str = Field(description="stable key of the layout")
    layout: PlanLayout
    label: Message
    request: EstimateRequest = Field(description="the estimate request of this plan (POST it to /estimates)")
    estimate: EstimateResponse
    cost: PlanCost | None
    step_time_s: float
    time_to_train_s: float | None
    pareto: bool = Field(description="on the time-vs-cost Pareto front")
    memory_need_bytes: int = Field(default=0, description="GPU memory that must fit on the busiest GPU: allocated "
                                   "at the peak plus the overhead the allocator cannot give back")
    host_ram_bytes_per_node: int = Field(default=0, description="host RAM of the busiest node")
    exports: Exports
    mechanism_changes: PlanMechanisms | None = Field(
        default=None, description="the fine-tuning stack mechanisms this plan changed from the request "
        "(`vary_mechanisms`); null: the request's own")


class SearchStats(_Frozen):
    space_size: int = Field(description="layouts in the search space (every combination, before pruning)")
    hardware_options: int
    worlds: int = Field(description="(hardware, node count, GPUs per node) groups searched")
    structures: int = Field(description="parallel layouts (without micro-batch and checkpointing) enumerated")
    structures_evaluated: int
    pruned_by_bound: int = Field(description="layouts never evaluated: their lower bound was already beaten")
    pruned_by_dominance: int
    memory_checks: int
    time_evaluations: int
    full_estimates: int
    layouts_screened: int = Field(default=0, description="layouts the vectorised memory screen checked at once "
                                  "(estimator/planner/screen.py)")
    screened_out: int = Field(default=0, description="structures the screen showed cannot fit: never bounded "
                              "nor estimated")
    candidates_per_s: float = Field(description="space_size / elapsed_s")
    elapsed_s: float


class PlanResponse(_Frozen):
    objective: Objective
    plans: list[Plan] = Field(description="ranked by the objective, then the other one")
    pareto_front: list[str] = Field(description="ids of the plans on the time-vs-cost front, fastest first")
    explanation: list[Message] = Field(description="why the winner beats the runner-up, in plain words")
    notes: list[Message] = Field(default_factory=list)
    search: SearchStats
