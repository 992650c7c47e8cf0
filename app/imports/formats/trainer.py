"""Hugging Face ``TrainingArguments`` and TRL ``SFTConfig`` (YAML or JSON, as ``HfArgumentParser`` /
``trl.TrlParser`` read them), the trainer keys axolotl and LLaMA-Factory pass through, and the
``deepspeed`` / ``fsdp`` / ``fsdp_config`` keys that point at the distributed setup.

Defaults are TrainingArguments' own (``transformers/training_args.py``): ``per_device_train_batch_size`` 8,
``gradient_accumulation_steps`` 1, ``bf16``/``fp16`` false (fp32), ``gradient_checkpointing`` false; TRL
``SFTConfig.max_length`` 1024 (``trl/trainer/sft_config.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.imports.core import Reader
from app.imports.formats.common import as_bool, as_int, attention, hf_optimizer, lora_targets, model_id, words
from app.imports.safe import ImportProblem

__all__ = ["HANDLERS", "NO_EFFECT", "TRL_KEYS", "finish", "read", "read_keys"]

Handler = Callable[[Reader, str, Any], None]


def _set(path: str, conv: Callable[[Reader, str, Any], Any] = as_int) -> Handler:
    def handler(r: Reader, key: str, value: Any) -> None:
        if value is not None:
            r.set(path, conv(r, key, value), key, value)
    return handler


def _bf16(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):
        r.context["bf16"] = (key, value)


def _fp16(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):
        r.context["fp16"] = (key, value)


def _dtype(r: Reader, key: str, value: Any) -> None:
    if value is not None:
        r.context["load_dtype"] = (key, str(value).lower())


def _checkpointing(r: Reader, key: str, value: Any) -> None:
    if isinstance(value, str) and value.strip().lower() in ("offload", "unsloth"):
        r.set("training.activation_checkpointing", "full", key, value)
        r.stack("training.activation_offloading", "checkpoints", key, value,
                "each checkpointed layer's input copied to host memory (GPU memory down, PCIe traffic and host RAM "
                "up)")
    elif as_bool(r, key, value):
        r.set("training.activation_checkpointing", "full", key, value,
              note="Hugging Face gradient checkpointing recomputes every decoder layer")
    else:
        r.set("training.activation_checkpointing", "none", key, value)


def _deepspeed(r: Reader, key: str, value: Any) -> None:
    if value in (None, "", False):
        return
    r.set("parallelism.framework", "deepspeed", key, value)
    if isinstance(value, dict):
        r.context["deepspeed_inline"] = (key, value)
    else:
        r.context["deepspeed_file"] = (key, str(value))


_FSDP_WORDS = {"full_shard": "fsdp", "shard_grad_op": "zero2", "hybrid_shard": "hsdp",
               "hybrid_shard_zero2": "hsdp", "no_shard": "none"}


def _fsdp(r: Reader, key: str, value: Any) -> None:
    if value in (None, "", False, []):
        return
    words = value.split() if isinstance(value, str) else [str(v) for v in value] if isinstance(value, list) else None
    if words is None:
        raise ImportProblem(r.file, key, f"must be a list such as [full_shard, auto_wrap], not {value!r}")
    r.set("parallelism.framework", "pytorch", key, value)
    for w in words:
        w = w.lower()
        if w in _FSDP_WORDS:
            r.set("parallelism.sharding", _FSDP_WORDS[w], key, value)
        elif w == "offload":
            r.set("parallelism.offload", "optimizer+params", key, value, note="FSDP CPUOffload: parameters, "
                  "gradients and the optimizer step on the CPU")
    if not any(w.lower() in _FSDP_WORDS for w in words):
        r.set("parallelism.sharding", "fsdp", key, value, note="FSDP's default strategy: full shard")
    if value == "hybrid_shard_zero2" or "hybrid_shard_zero2" in words:
        r.unrepresented(key, value, "HSDP with ZeRO-2 inside the shard group: sized as HSDP with full shard")


def fsdp_config(r: Reader, key: str, value: Any) -> None:
    """``fsdp_config`` of TrainingArguments / axolotl / accelerate (with or without the ``fsdp_`` prefixes)."""
    if not isinstance(value, dict):
        if value is None:
            return
        if isinstance(value, str):
            r.context["fsdp_config_file"] = (key, value)
            return
        raise ImportProblem(r.file, key, f"must be a mapping, not {value!r}")
    for k, v in value.items():
        sub = f"{key}.{k}"
        name = str(k).removeprefix("fsdp_")
        if name == "version":
            version = as_int(r, sub, v)
            r.set("parallelism.framework", "pytorch", sub, v, note=f"FSDP{version}")
            if not r.has("parallelism.sharding"):
                r.set("parallelism.sharding", "fsdp", sub, v, explicit=False)
        elif name in ("offload_params", "cpu_offload"):
            if as_bool(r, sub, v):
                r.set("parallelism.offload", "optimizer+params", sub, v)
        elif name == "sharding_strategy":
            word = str(v).lower().split(".")[-1]
            word = {"1": "full_shard", "2": "shard_grad_op", "3": "no_shard", "4": "hybrid_shard",
                    "5": "hybrid_shard_zero2"}.get(word, word)
            if word not in _FSDP_WORDS:
                raise ImportProblem(r.file, sub, f"{v!r} is not an FSDP sharding strategy")
            r.set("parallelism.sharding", _FSDP_WORDS[word], sub, v)
        elif name == "reshard_after_forward" and isinstance(v, str) and v.lower() in _FSDP_WORDS:
            r.set("parallelism.sharding", _FSDP_WORDS[v.lower()], sub, v, note="FSDP1 takes a sharding strategy here")
        elif name == "reshard_after_forward":
            if not as_bool(r, sub, v):
                r.set("parallelism.sharding", "zero2", sub, v, note="parameters kept gathered after forward "
                      "(FSDP2 reshard_after_forward=False, SHARD_GRAD_OP)")
        elif name == "activation_checkpointing":
            if as_bool(r, sub, v):  # on/off only: a file that names the mode (selective) is more specific
                r.set("training.activation_checkpointing", "full", sub, v, explicit=r.get(
                    "training.activation_checkpointing") in (None, "none"))
        elif name in ("auto_wrap_policy", "transformer_layer_cls_to_wrap", "state_dict_type", "sync_module_states",
                      "use_orig_params", "cpu_ram_efficient_loading", "backward_prefetch", "forward_prefetch",
                      "limit_all_gathers", "min_num_params", "offload_optimizer", "final_state_dict_type"):
            if name == "backward_prefetch" and str(v).upper() in ("NO_PREFETCH", "FALSE"):
                r.unrepresented(sub, v, "no backward prefetch: the next layer's all-gather is not overlapped")
            else:
                r.no_effect(sub)
        else:
            r.unknown(sub)


def _packing(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):
        r.unrepresented(key, value, "packed sequences: attention within each packed document; sized as one "
                        "document per sequence (set training.packed_document_tokens to the mean document length)",
                        maps_to="training.packed_document_tokens")


def _liger(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):
        r.stack("training.fused_kernels", "liger", key, value, "Liger RMSNorm, SwiGLU and RoPE kernels")
        r.stack("training.loss_kernel", "fused", key, value, "Liger fused linear cross-entropy (the full logits "
                "never materialised)")


def _activation_offloading(r: Reader, key: str, value: Any) -> None:
    if value not in (None, False) and as_bool(r, key, value if not isinstance(value, str) else "true"):
        r.stack("training.activation_offloading", "all", key, value, "saved activations copied to pinned host "
                "memory on a side stream (GPU memory down, host RAM and PCIe traffic up)")


def _max_length(r: Reader, key: str, value: Any) -> None:
    if value is not None:
        r.set("training.seq_len", as_int(r, key, value), key, value)


def _peft(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):
        r.set("training.method", "lora", key, value)


def _4bit(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):
        r.context["load_in_4bit"] = (key, value)


def _8bit(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):
        r.unrepresented(key, value, "8-bit base weights (bitsandbytes LLM.int8): sized as 16-bit weights")


def _model(r: Reader, key: str, value: Any) -> None:
    if value is not None:
        model_id(r, key, value)


HANDLERS: dict[str, Handler] = {
    "model_name_or_path": _model,
    "per_device_train_batch_size": _set("training.micro_batch_size"),
    "gradient_accumulation_steps": _set("training.gradient_accumulation_steps"),
    "bf16": _bf16, "fp16": _fp16, "bf16_full_eval": lambda r, k, v: r.no_effect(k),
    "torch_dtype": _dtype, "dtype": _dtype,
    "gradient_checkpointing": _checkpointing,
    "activation_checkpointing": _checkpointing,  # transformers 5's name for gradient_checkpointing
    "optim": hf_optimizer,
    "deepspeed": _deepspeed,
    "fsdp": _fsdp, "fsdp_config": fsdp_config,
    "attn_implementation": attention,
    "use_liger_kernel": _liger, "use_liger": _liger,
    "activation_offloading": _activation_offloading,
    "max_length": _max_length, "max_seq_length": _max_length,
    "packing": _packing, "padding_free": _packing,
    "use_peft": _peft, "lora_r": _set("training.lora_rank"),
    "lora_dropout": _set("training.lora_dropout", lambda r, k, v: float(v)),
    "lora_target_modules": lora_targets,
    "load_in_4bit": _4bit, "load_in_8bit": _8bit,
    "max_steps": lambda r, k, v: r.context.__setitem__("max_steps", (k, v)),
    "torch_compile": lambda r, k, v: r.unrepresented(k, v, "torch.compile: fused elementwise kernels change step "
                                                      "time and activation memory; sized uncompiled")
    if as_bool(r, k, v) else r.no_effect(k),
    "tf32": lambda r, k, v: r.no_effect(k),
}

#: keys read that change neither memory nor time (learning schedule, logging, data, saving, hub)
NO_EFFECT = words("""
output_dir overwrite_output_dir do_train do_eval do_predict eval_strategy evaluation_strategy prediction_loss_only
per_device_eval_batch_size eval_accumulation_steps eval_delay learning_rate weight_decay adam_beta1 adam_beta2
adam_epsilon max_grad_norm num_train_epochs lr_scheduler_type lr_scheduler_kwargs warmup_ratio warmup_steps
log_level log_level_replica log_on_each_node logging_dir logging_strategy logging_first_step logging_steps
logging_nan_inf_filter save_strategy save_steps save_total_limit save_safetensors save_on_each_node
save_only_model seed data_seed eval_steps dataloader_num_workers dataloader_drop_last dataloader_pin_memory
dataloader_persistent_workers dataloader_prefetch_factor run_name disable_tqdm remove_unused_columns label_names
load_best_model_at_end metric_for_best_model greater_is_better report_to ddp_timeout ddp_find_unused_parameters
ddp_backend push_to_hub hub_model_id hub_strategy hub_private_repo hub_token resume_from_checkpoint
gradient_checkpointing_kwargs activation_checkpointing_kwargs include_tokens_per_second
include_num_input_tokens_seen neftune_noise_alpha
optim_args group_by_length length_column_name full_determinism use_cpu auto_find_batch_size
model_revision trust_remote_code use_fast_tokenizer chat_template dataset_name dataset_config dataset_mixture
dataset_num_proc dataset_text_field dataset_train_split dataset_test_split dataset_kwargs eos_token pad_token
completion_only_loss assistant_only_loss loss_type use_vllm vllm_mode vllm_gpu_memory_utilization
num_generations max_prompt_length max_completion_length temperature beta reward_funcs reward_weights
callbacks system_prompt benchmarks hub_model_revision wandb_entity wandb_project wandb_run_group
lora_alpha lora_modules_to_save use_rslora use_dora lora_task_type bnb_4bit_quant_type use_bnb_nested_quant
bnb_4bit_compute_dtype log_completions num_completions_to_print scale_rewards packing_strategy
average_tokens_across_devices hub_always_push
""")

#: keys only TRL's configs have: the file is read as TRL (``training.stack`` "trl")
TRL_KEYS = frozenset({"max_length", "max_seq_length", "packing", "dataset_text_field", "completion_only_loss",
                      "assistant_only_loss", "padding_free", "use_liger", "dataset_num_proc", "model_init_kwargs",
                      "use_peft", "dataset_mixture", "dataset_name", "loss_type", "num_generations",
                      "max_prompt_length", "max_completion_length", "beta"})


def read_keys(r: Reader, doc: dict[str, Any], handlers: dict[str, Handler], no_effect: frozenset[str]) -> None:
    for key, value in doc.items():
        k = str(key)
        handler = handlers.get(k)
        if handler is not None:
            try:
                handler(r, k, value)
            except (TypeError, ValueError, AttributeError, KeyError, ZeroDivisionError, OverflowError):
                raise ImportProblem(r.file, k, f"cannot read the value {value!r:.80}") from None
        elif k in no_effect:
            r.no_effect(k)
        elif k == "model_init_kwargs" and isinstance(value, dict):
            for sub, v in value.items():
                if sub in ("torch_dtype", "dtype"):
                    _dtype(r, f"{k}.{sub}", v)
                elif sub == "attn_implementation":
                    attention(r, f"{k}.{sub}", v)
                else:
                    r.no_effect(f"{k}.{sub}")
        else:
            r.unknown(k)


def precision(r: Reader, *, pure_when_loaded_bf16: bool = True) -> None:
    """bf16 / fp16 / the load dtype as capplan's precision. A model loaded in bfloat16 and trained with bf16 has
    bf16 weights and optimizer states ("bf16-true"); loaded in fp32 with ``bf16`` it trains under autocast
    ("bf16-mixed"); neither flag: fp32."""
    bf16, fp16, dtype = r.context.get("bf16"), r.context.get("fp16"), r.context.get("load_dtype")
    if r.has("training.precision"):
        return
    if fp16 is not None:
        r.unrepresented(fp16[0], fp16[1], "fp16 mixed precision (loss scaling): sized as bf16 mixed precision "
                        "(the same bytes per value)")
        r.set("training.precision", "bf16-mixed", fp16[0], fp16[1], note="nearest: fp16 has bf16's sizes")
    elif bf16 is not None:
        loaded = dtype[1] if dtype is not None else ""
        pure = pure_when_loaded_bf16 and "bf" in loaded
        r.set("training.precision", "bf16-true" if pure else "bf16-mixed", bf16[0], bf16[1],
              note=f"model loaded in {loaded}" if pure else "autocast over fp32 weights")
    elif dtype is not None and "bf" in dtype[1]:
        r.set("training.precision", "bf16-true", dtype[0], dtype[1], note="bf16 weights without autocast")
    else:
        r.default("training.precision", "fp32", "neither bf16 nor fp16 is set: the trainer runs in fp32")


def finish(r: Reader) -> None:
    """What the trainer family resolves once its keys are read: QLoRA from 4-bit loading, the precision."""
    if r.context.get("load_in_4bit"):
        key, value = r.context["load_in_4bit"]
        if r.get("training.method") in ("lora", "qlora"):
            r.set("training.method", "qlora", key, value, note="LoRA on a 4-bit base", overrides=True)
        else:
            r.unrepresented(key, value, "a 4-bit base without LoRA adapters: capplan sizes 4-bit bases for QLoRA "
                            "only", maps_to="training.method = 'qlora'")
    precision(r)


def read(r: Reader, doc: Any) -> None:
    if not isinstance(doc, dict):
        raise ImportProblem(r.file, "", "must be a mapping of TrainingArguments keys")
    trl = any(k in TRL_KEYS for k in doc)
    read_keys(r, doc, HANDLERS, NO_EFFECT)
    if not r.has("training.micro_batch_size"):
        r.default("training.micro_batch_size", 8, "per_device_train_batch_size not set: TrainingArguments' "
                  "default 8")
    if trl and not r.has("training.seq_len"):
        r.default("training.seq_len", 1024, "max_length not set: TRL SFTConfig's default 1024")
    if not r.has("training.method"):
        r.default("training.method", "full", "no PEFT settings: full fine-tuning")
    r.stack("training.stack", "trl" if trl else "transformers", "(format)", "trl" if trl else "transformers",
            "the stack's documented defaults (loss, checkpointing)")
    finish(r)
