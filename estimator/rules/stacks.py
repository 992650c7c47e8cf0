"""The fine-tuning stacks people run (issue 29): each stack's documented defaults, the combinations a stack's own
code refuses, and the assumption lines an estimate shows for them.

``training.stack`` names the stack; :func:`apply_stack_defaults` fills the request fields the request leaves out
(or null) from :data:`STACK_DEFAULTS`, so an explicit field always wins, and the resolved request carries every
value (its JSON shows what was estimated). ``"transformers"`` (the default) is the estimator's historical
behaviour: the materialised loss, no fused kernels, no offloading, so a request without the new fields is
estimated exactly as before.

Sources (read for this module; file @ commit):

- TRL ``trl/trainer/sft_config.py`` @016013e8: ``loss_type`` unset means ``"chunked_nll"`` ("the ``lm_head``
  projection is computed on non-ignored tokens only ... and the cross-entropy is processed in chunks of tokens";
  "Not compatible with ``use_liger_kernel``", which makes it ``"nll"`` and Liger's fused linear cross-entropy
  runs instead); ``gradient_checkpointing`` defaults to True; ``activation_offloading`` False.
- torchtune ``torchtune/modules/loss/ce_chunked_output_loss.py`` (``CEWithChunkedOutputLoss``, 8 chunks, "saves
  memory by only upcasting one chunk at a time") and ``recipes/configs/llama3_1/8B_lora_single_device.yaml``
  (``enable_activation_checkpointing: True``, ``enable_activation_offloading: False``) (meta-pytorch/torchtune,
  as read for shared/reference/stacks-fabrics-nccl.md).
- Unsloth ``unsloth/models/loader.py`` @015bdef0 (``load_in_4bit = True``), ``unsloth/models/llama.py``
  @015bdef0 (``use_gradient_checkpointing = "unsloth"``: each checkpointed layer input copied to host memory;
  the fused, chunked cross-entropy).
- LLaMA-Factory ``src/llamafactory/hparams/model_args.py`` @ff6d4d12: ``disable_gradient_checkpointing=False``
  (checkpointing on), ``enable_liger_kernel=False``, ``use_unsloth_gc=False``.
- axolotl ``src/axolotl/utils/schemas/config.py`` @70be5461: ``liger_kernel``, the ``cut_cross_entropy`` plugin
  and ``gradient_checkpointing: offload`` (``"unsloth"`` is deprecated to ``"offload"``) are opt-in keys: no
  stack-wide default changes the loss, the kernels or offloading.
- Hugging Face transformers ``src/transformers/loss/loss_utils.py`` (``ForCausalLMLoss``: logits upcast to fp32,
  cross-entropy on the full logits) and ``TrainingArguments`` (``gradient_checkpointing=False``).
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from estimator.messages import Text

__all__ = [
    "BNB_DTENSOR_REASON",
    "BNB_OPTIMIZERS",
    "MEASURED",
    "MODELLED",
    "STACK_DEFAULTS",
    "StackDefault",
    "liger_patches",
    "liger_warnings",
    "mechanism_notes",
    "request_refusal",
    "stack_assumptions",
    "stack_fill",
    "training_refusal",
    "unmeasured_mechanisms",
]


class Training(Protocol):
    """The training fields the stacks' rules read: ``estimator.request.Training`` (the contract, which imports this
    module to fill and check a request, so the rules name what they read rather than import the model back)."""

    @property
    def stack(self) -> str: ...
    @property
    def loss_kernel(self) -> str | None: ...
    @property
    def fused_kernels(self) -> str | None: ...
    @property
    def activation_offloading(self) -> str | None: ...
    @property
    def activation_checkpointing(self) -> str: ...
    @property
    def optimizer(self) -> str: ...
    @property
    def optimizer_impl(self) -> str: ...

#: the request fields a stack may fill, in the order they are applied (the loss depends on the kernels)
NEW_FIELDS: Final = ("fused_kernels", "loss_kernel", "activation_offloading")


class StackDefault:
    """One documented default of a stack: the request field, its value and the file that sets it."""

    __slots__ = ("field", "source", "value")

    def __init__(self, field: str, value: str, source: str) -> None:
        self.field = field
        self.value = value
        self.source = source


_TRANSFORMERS_LOSS = "transformers src/transformers/loss/loss_utils.py ForCausalLMLoss"
_TRANSFORMERS_ARGS = "transformers src/transformers/training_args.py"
_TRL = "trl/trainer/sft_config.py @016013e8"
_TORCHTUNE = "torchtune recipes/configs/llama3_1/8B_lora_single_device.yaml"
_UNSLOTH_LOADER = "unsloth/models/loader.py @015bdef0"
_UNSLOTH_LLAMA = "unsloth/models/llama.py @015bdef0"
_LLAMA_FACTORY = "LLaMA-Factory src/llamafactory/hparams/model_args.py @ff6d4d12"
_AXOLOTL = "axolotl src/axolotl/utils/schemas/config.py @70be5461"

#: each stack's defaults for the request's fields. Fields a stack leaves alone keep the request's own default.
STACK_DEFAULTS: Final[dict[str, tuple[StackDefault, ...]]] = {
    "transformers": (
        StackDefault("loss_kernel", "materialized", _TRANSFORMERS_LOSS),
        StackDefault("fused_kernels", "none", _TRANSFORMERS_ARGS + " use_liger_kernel=False"),
        StackDefault("activation_offloading", "none", _TRANSFORMERS_ARGS + " (no activation offloading)"),
    ),
    "trl": (
        StackDefault("loss_kernel", "chunked", _TRL + " loss_type=\"chunked_nll\""),
        StackDefault("fused_kernels", "none", _TRL + " use_liger_kernel=False"),
        StackDefault("activation_offloading", "none", _TRL + " activation_offloading=False"),
        StackDefault("activation_checkpointing", "full", _TRL + " gradient_checkpointing=True"),
    ),
    "axolotl": (
        StackDefault("loss_kernel", "materialized", _AXOLOTL + " (cut_cross_entropy is an opt-in plugin)"),
        StackDefault("fused_kernels", "none", _AXOLOTL + " (liger_kernel is opt-in)"),
        StackDefault("activation_offloading", "none", _AXOLOTL + " (gradient_checkpointing: offload is opt-in)"),
    ),
    "llama-factory": (
        StackDefault("loss_kernel", "materialized", _LLAMA_FACTORY + " (the transformers loss)"),
        StackDefault("fused_kernels", "none", _LLAMA_FACTORY + " enable_liger_kernel=False"),
        StackDefault("activation_offloading", "none", _LLAMA_FACTORY + " use_unsloth_gc=False"),
        StackDefault("activation_checkpointing", "full", _LLAMA_FACTORY + " disable_gradient_checkpointing=False"),
    ),
    "torchtune": (
        StackDefault("loss_kernel", "chunked", "torchtune torchtune/modules/loss/ce_chunked_output_loss.py "
                     "CEWithChunkedOutputLoss (num_output_chunks=8)"),
        StackDefault("fused_kernels", "none", _TORCHTUNE),
        StackDefault("activation_offloading", "none", _TORCHTUNE + " enable_activation_offloading: False"),
        StackDefault("activation_checkpointing", "full", _TORCHTUNE + " enable_activation_checkpointing: True"),
    ),
    "unsloth": (
        StackDefault("method", "qlora", _UNSLOTH_LOADER + " load_in_4bit=True"),
        StackDefault("loss_kernel", "fused", _UNSLOTH_LLAMA + " fused, chunked cross-entropy (no full logits)"),
        StackDefault("fused_kernels", "none", _UNSLOTH_LLAMA + " (Unsloth's own Triton kernels are not modelled: "
                     "sized as the Hugging Face modules)"),
        StackDefault("activation_checkpointing", "full", _UNSLOTH_LLAMA + " use_gradient_checkpointing=\"unsloth\""),
        StackDefault("activation_offloading", "checkpoints", _UNSLOTH_LLAMA + " use_gradient_checkpointing="
                     "\"unsloth\" (checkpointed layer inputs to host memory)"),
    ),
}

#: the dependent default: a stack that turns Liger on computes the loss with Liger's fused linear cross-entropy
#: (TRL: loss_type becomes "nll" and Liger's patched forward runs LigerFusedLinearCrossEntropyLoss;
#: LLaMA-Factory / axolotl liger_fused_linear_cross_entropy on by default once Liger is on)
_LIGER_LOSS: Final = StackDefault("loss_kernel", "fused", "Liger-Kernel src/liger_kernel/transformers/"
                                  "monkey_patch.py @00eba634 (fused_linear_cross_entropy=True with Liger on)")


def _absent(section: dict[str, Any], field: str) -> bool:
    return section.get(field) is None


def stack_fill(training: Any) -> dict[str, str]:
    """The fields a stack's defaults fill in a validated training section: those the request left out (not in
    ``model_fields_set``) or null, with a value other than what they hold. An explicit value always wins. With
    Liger on and no loss named, the loss is Liger's fused one. The plain transformers stack's values are the
    fields' own defaults, so a request that names no stack fills nothing (only an explicit null is replaced)."""
    given = training.model_fields_set
    out: dict[str, str] = {}
    for d in STACK_DEFAULTS[training.stack]:
        current = getattr(training, d.field)
        if (d.field not in given or current is None) and current != d.value:
            out[d.field] = d.value
    loss_given = "loss_kernel" in given and training.loss_kernel is not None
    if not loss_given and out.get("fused_kernels", training.fused_kernels) == "liger":
        out["loss_kernel"] = _LIGER_LOSS.value
    return out


def stack_default_fields(training: Training) -> list[StackDefault]:
    """The stack's defaults that the resolved training section holds (the ones an estimate names)."""
    found = [d for d in STACK_DEFAULTS[training.stack] if getattr(training, d.field) == d.value]
    if training.fused_kernels == "liger" and training.loss_kernel == "fused":
        found.append(_LIGER_LOSS)
    return found


def training_refusal(t: Training) -> tuple[str, str] | None:
    """(field, the stack's own reason) for a combination of training fields the stack's code refuses; ``None``
    when it runs. Only fields the planner never varies: the others are checked with the layout
    (:func:`request_refusal`)."""
    if t.stack == "trl" and t.loss_kernel == "chunked" and t.fused_kernels == "liger":
        return ("loss_kernel", "TRL's loss_type=\"chunked_nll\" is \"not compatible with use_liger_kernel\" "
                "(trl/trainer/sft_config.py @016013e8): with Liger on, TRL runs Liger's fused linear "
                "cross-entropy; use loss_kernel \"fused\" or leave it empty")
    return None


def request_refusal(t: Any, p: Any, world_size: int | None = None) -> tuple[str, str] | None:
    """(dotted field, reason) for a stack / parallelism combination the stack does not run (``t``, ``p``: the
    request's training and parallelism sections or their views; ``world_size``: the job's GPUs, ``None`` when
    unknown: a one-GPU job's sharding shards nothing, and is estimated as the unsharded run it is). Checked with
    the layout (:mod:`estimator.training.layout`), so the planner never proposes such a combination and an estimate
    refuses it as an unsupported combination (a 422 naming the field)."""
    if t.activation_offloading == "checkpoints" and t.activation_checkpointing != "full":
        return ("training.activation_offloading", "\"checkpoints\" offloads the input of each checkpointed layer "
                "(Unsloth use_gradient_checkpointing=\"unsloth\", axolotl gradient_checkpointing: offload): it needs "
                "activation_checkpointing \"full\"; use \"all\" to offload every saved tensor without checkpointing")
    if t.optimizer == "muon" and t.optimizer_impl == "foreach":
        return ("training.optimizer_impl", "torch.optim.Muon: \"Foreach is not supported for Muon yet\" "
                "(torch/optim/_muon.py @098e03f9): use \"for-loop\"")
    if t.stack == "unsloth" and (p.normalized_sharding in ("zero3", "hsdp") or p.tp > 1 or p.pp > 1):
        return ("training.stack", "Unsloth patches the model for one GPU per process (data parallel only): its "
                "offloaded checkpointing (use_gradient_checkpointing=\"unsloth\", unsloth/models/llama.py "
                "@015bdef0) and fused loss are not run under FSDP / ZeRO-3, tensor or pipeline parallelism; "
                "use another stack for a sharded job")
    if t.optimizer in BNB_OPTIMIZERS and p.framework == "pytorch" and (
            (p.normalized_sharding in ("zero2", "zero3", "hsdp") and world_size != 1) or p.tp > 1):
        return ("training.optimizer", BNB_DTENSOR_REASON)
    if t.activation_offloading != "none" and p.offload == "optimizer+params":
        return ("training.activation_offloading", "activation offloading and parameter offloading both "
                "stream over the same PCIe link each step; capplan does not model them together")
    if p.framework == "megatron":
        if t.loss_kernel == "chunked":
            return ("training.loss_kernel", "Megatron-LM computes its own vocab-parallel cross-entropy "
                    "(megatron/core/tensor_parallel/cross_entropy.py; fused with --cross-entropy-loss-fusion: "
                    "loss_kernel \"fused\"); the chunked losses (TRL, torchtune) patch Hugging Face / torchtune "
                    "models: use framework pytorch or deepspeed")
        if t.fused_kernels != "none":
            return ("training.fused_kernels", "Liger's kernels patch Hugging Face model classes (liger_kernel/"
                    "transformers/monkey_patch.py); Megatron-LM runs its own fused kernels (Transformer Engine): use "
                    "framework pytorch or deepspeed")
        if t.activation_offloading != "none":
            return ("training.activation_offloading", "the modelled offloading is the Hugging Face stacks' (torchtune "
                    "OffloadActivations, TRL, Unsloth, axolotl hooks); Megatron-LM's own --cpu-offloading is not "
                    "modelled: use framework pytorch or deepspeed")
    return None


#: bitsandbytes' optimizers (:mod:`estimator.training.optimizers`): they cannot step DTensor parameters
BNB_OPTIMIZERS: Final = frozenset({"adamw-8bit", "paged-adamw-8bit", "paged-adamw"})
#: Why bitsandbytes' optimizers are refused on PyTorch's DTensor layouts (FSDP2 ``fully_shard``: capplan's PyTorch
#: zero2 / zero3 / hsdp; tensor parallelism: ``parallelize_module``). Measured: paged 8-bit AdamW on Llama 3.1 8B
#: under FSDP2 at W = 8 (H100, torch 2.11, bitsandbytes 0.50.2; tests/data/stacks_h100_raw/call4_results.jsonl,
#: ``h100-l8b-full-mixed-fused-b1-s4096-ck-fsdp8-paged-adamw-8bit``) raised at its first optimizer step. Source
#: (bitsandbytes 0.50.2, ``bitsandbytes/optim/optimizer.py`` ``init_state`` / ``get_state_buffer``): the 8-bit states
#: follow the parameter (``torch.zeros_like(p)``: a DTensor) but ``absmax1`` / ``absmax2`` (``torch.zeros((blocks,))``)
#: and the qmaps are plain tensors, and a paged state (``F.get_paged``, >= 1e5 elements, the 32-bit one included) is
#: a plain tensor over CUDA managed memory; the package has no DTensor handling, so its custom ops
#: (``torch.ops.bitsandbytes.optimizer_update_8bit_blockwise`` / ``optimizer_update_32bit``) get mixed arguments.
#: Not refused: DeepSpeed ZeRO, whose optimizer steps a flat fp32 partition (a plain tensor:
#: ``deepspeed/runtime/zero/stage_1_and_2.py`` ``param_group['params'] = [self.single_partition_of_fp32_groups[i]]``;
#: not measured), PyTorch zero1 (DDP + ``ZeroRedundancyOptimizer``: plain tensors), and a one-GPU job's sharding,
#: which shards nothing and is sized as the unsharded run it is (the planner labels one-GPU plans so). A refusal
#: rather than a warning: the run stops at its first step (as Unsloth's refusal under FSDP), and the planner never
#: proposes it.
BNB_DTENSOR_REASON: Final = (
    "bitsandbytes' optimizers cannot step PyTorch DTensor parameters (FSDP2 sharding zero2 / zero3 / hsdp, or "
    "tensor parallelism): measured on an H100 (bitsandbytes 0.50.2, torch 2.11, FSDP2 at W = 8) the first step "
    "raises \"bitsandbytes.optimizer_update_8bit_blockwise.default got mixed torch.Tensor and DTensor\" (its absmax, "
    "qmap and paged states are plain tensors: bitsandbytes/optim/optimizer.py init_state); use framework "
    "deepspeed (ZeRO steps a flat, plain fp32 partition), sharding none / zero1, or optimizer adamw-4bit (torchao: "
    "wraps its states in DTensor)")

_OPTIMIZER_LINES: Final[dict[str, str]] = {
    "paged-adamw-8bit": "paged-adamw-8bit: bitsandbytes keeps the states in CUDA unified memory; sized as "
                        "GPU-resident (pages go to the host only when the GPU is oversubscribed, which this estimate "
                        "does not count as a fit).",
    "paged-adamw": "paged-adamw: bitsandbytes' fp32 states in CUDA unified memory; sized as GPU-resident (pages go "
                   "to the host only when the GPU is oversubscribed, which this estimate does not count as a fit).",
    "adamw-4bit": "adamw-4bit: torchao AdamW4bit, 4-bit codes and an fp32 scale per 128-element block, 1.06 bytes "
                  "per parameter for both states.",
    "ao-adamw-8bit": "ao-adamw-8bit: torchao AdamW8bit (not bitsandbytes' adamw-8bit), 8-bit codes and an fp32 "
                     "scale per 256-element block, 2.03 bytes per parameter for both states; its compiled step "
                     "dequantises the largest tensor's states to fp32 (8 bytes per element).",
    "muon": "muon: torch.optim.Muon on the decoder matrices (one momentum buffer each, Newton-Schulz on each "
            "matrix), AdamW on the embedding, the LM head and the vectors. Under FSDP2 the matrices are DTensor "
            "shards: each rank runs its share of Newton-Schulz's two long products and the small square one whole, "
            "and the step is bound by the host dispatching those DTensor operators (about 0.13 ms each on the "
            "measured H100 host; a slower host takes longer); the collectives of their redistributions are not "
            "timed.",
}


def stack_assumptions(training: Training) -> list[str]:
    """One line per stack default the estimate used, with its source, and what is assumed of the new optimizers;
    nothing for the plain transformers defaults (the historical behaviour, described by the rest)."""
    opt: list[str] = [Text(_OPTIMIZER_LINES[training.optimizer])] if training.optimizer in _OPTIMIZER_LINES else []
    if training.stack == "transformers":
        return opt
    return opt + [Text("Stack %(stack)s: %(field)s %(value)s (%(source)s).", stack=training.stack, field=d.field,
                 value=d.value, source=d.source) for d in stack_default_fields(training)]


#: whether the training model (memory, activations, timing, host RAM) sizes each mechanism value yet (the
#: formulas are in :mod:`estimator.training.mechanisms`; their wiring follows the training model's move, issue 27)
MODELLED: Final[dict[tuple[str, str], bool]] = {
    ("loss_kernel", "materialized"): True,
    ("loss_kernel", "chunked"): True,
    ("loss_kernel", "fused"): True,
    ("fused_kernels", "none"): True,
    ("fused_kernels", "liger"): True,
    ("activation_offloading", "none"): True,
    ("activation_offloading", "checkpoints"): True,
    ("activation_offloading", "all"): True,
}


def mechanism_notes(training: Training) -> list[str]:
    """A warning per mechanism the request asks for that the training model does not size yet: the estimate
    then describes the stack without it (an overestimate of memory), and says so rather than hide it."""
    out: list[str] = []
    for field in ("loss_kernel", "fused_kernels", "activation_offloading"):
        value = getattr(training, field)
        if not MODELLED[(field, value)]:
            out.append(Text("%(field)s %(value)s is not in this estimate's memory and time yet: it is sized as "
                            "without it (more memory than the stack uses).", field="training." + field,
                            value=value))
    return out


#: the mechanism values whose step time a GPU measurement classifies (the time error bar's measured kinds). Their
#: memory is measured per mechanism on one H100 (``mechanism_memory_error_bar_pct`` in estimator/data/accuracy.json,
#: :func:`memory_mechanism_keys`); on several GPUs, or where no bar was measured, they widen the memory error bar
#: (estimator.estimate's unmeasured reasons).
MEASURED: Final[frozenset[tuple[str, str]]] = frozenset({
    ("loss_kernel", "materialized"), ("fused_kernels", "none"), ("activation_offloading", "none"),
})


#: the optimizers whose memory is checked per mechanism (:func:`memory_mechanism_keys`): issue 29's and
#: bitsandbytes' 8-bit AdamW, whose block-wise states are the paged 8-bit one's (one class: paging moves them,
#: the same kernels size them)
MECHANISM_OPTIMIZERS: Final = frozenset({"adamw-8bit", "paged-adamw-8bit", "paged-adamw", "adamw-4bit", "muon",
                                         "ao-adamw-8bit"})
OPTIMIZER_MEMORY_CLASS: Final = {"adamw-8bit": "blockwise-8bit", "paged-adamw-8bit": "blockwise-8bit"}


def unmeasured_mechanisms(training: Any) -> list[str]:
    """What of the request's mechanisms no GPU measurement covered (``training``: the request's training
    section or its view)."""
    out: list[str] = []
    for field in ("loss_kernel", "fused_kernels", "activation_offloading"):
        value = getattr(training, field)
        if (field, value) not in MEASURED:
            out.append(Text("training.%(field)s %(value)s", field=field, value=value))
    return out


def memory_mechanism_keys(training: Any) -> list[str]:
    """The request's mechanisms as ``field:value`` keys of ``mechanism_memory_error_bar_pct`` in
    ``estimator/data/accuracy.json`` (``benchmarks/calibration/stacks_report.py``: measured on one H100)."""
    keys = [f"{field}:{getattr(training, field)}" for field, default in
            (("loss_kernel", "materialized"), ("fused_kernels", "none"), ("activation_offloading", "none"))
            if getattr(training, field) != default]
    if training.optimizer in MECHANISM_OPTIMIZERS:
        keys.append(f"optimizer:{OPTIMIZER_MEMORY_CLASS.get(training.optimizer, training.optimizer)}")
    return keys


def liger_patches(dims: Any) -> bool:
    """Whether Liger has a kernel for both this model's norm and its MLP (``dims``: the model's architecture):
    ``liger_kernel/transformers/monkey_patch.py`` patches RMSNorm families with a gated MLP (SwiGLU / GeGLU). The
    planner gives Liger only to these (:mod:`estimator.planner.mechanisms`); an estimate that asks for it on
    another is warned (:func:`liger_warnings`)."""
    return bool(dims.norm == "rmsnorm" and dims.gated_mlp)


def liger_warnings(training: Any, dims: Any) -> list[str]:
    """Liger patches RMSNorm and SwiGLU model families (``liger_kernel/transformers/monkey_patch.py``: Llama,
    Mistral, Mixtral, Qwen, Gemma, Phi-3, ...): a LayerNorm or a non-gated MLP stays Hugging Face's, and the estimate
    sizes it so; said, not hidden (``dims``: the model's architecture)."""
    if training.fused_kernels != "liger":
        return []
    out: list[str] = []
    if dims.norm != "rmsnorm":
        out.append(Text("fused_kernels liger: Liger has no kernel for this model's LayerNorm (it patches RMSNorm "
                        "families); the norms are sized as Hugging Face's."))
    if not dims.gated_mlp:
        out.append(Text("fused_kernels liger: this model's MLP is not gated (no SwiGLU / GeGLU for Liger to "
                        "patch); it is sized as Hugging Face's."))
    return out
