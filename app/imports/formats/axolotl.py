"""axolotl YAML (``axolotl/utils/schemas/config.py`` ``AxolotlInputConfig``; keys as in axolotl's ``examples/``).

``base_model`` names the model; ``adapter: lora|qlora`` with ``load_in_4bit`` the method; ``sequence_len``,
``micro_batch_size``, ``gradient_accumulation_steps``, ``optimizer`` (Hugging Face optimizer names),
``gradient_checkpointing`` (``true`` or ``offload``), ``bf16`` (``auto``: bf16 where the GPU has it; axolotl then
loads the model in bfloat16, ``normalize_config``), ``deepspeed`` (a JSON path), ``fsdp`` / ``fsdp_config``
(``fsdp_version: 2``), ``tensor_parallel_size`` / ``context_parallel_size`` / ``dp_shard_size``, the Liger and
Cut Cross-Entropy plugins, ``sample_packing``. Defaults are axolotl's: ``sequence_len`` 2048, ``micro_batch_size``
1, ``gradient_accumulation_steps`` 1."""

from __future__ import annotations

from typing import Any

from app.imports.core import Reader
from app.imports.formats import trainer
from app.imports.formats.common import as_bool, as_int, attention, lora_targets, words
from app.imports.safe import ImportProblem

__all__ = ["read"]


def _adapter(r: Reader, key: str, value: Any) -> None:
    if value in (None, ""):
        return
    name = str(value).lower()
    if name not in ("lora", "qlora"):
        r.unrepresented(key, value, f"adapter {value!r}: capplan sizes LoRA and QLoRA; sized as LoRA")
        name = "lora"
    r.set("training.method", name, key, value)


def _flag_attention(kind: str) -> trainer.Handler:
    def handler(r: Reader, key: str, value: Any) -> None:
        if as_bool(r, key, value):
            attention(r, key, kind)
    return handler


def _plugins(r: Reader, key: str, value: Any) -> None:
    for plugin in value or []:
        name = str(plugin)
        if "cut_cross_entropy" in name.lower() or "CutCrossEntropy" in name:
            r.stack("training.loss_kernel", "fused", key, name, "Cut Cross-Entropy: the loss computed blockwise "
                    "from the hidden states, the full logits never materialised")
        elif "liger" in name.lower():
            r.context["liger_plugin"] = True
        else:
            r.unrepresented(key, name, "an axolotl plugin capplan does not size")


def _liger_kernel(kind: str) -> trainer.Handler:
    def handler(r: Reader, key: str, value: Any) -> None:
        if not as_bool(r, key, value):
            r.no_effect(key)
        elif kind == "loss":
            r.stack("training.loss_kernel", "fused", key, value, "Liger fused linear cross-entropy (the full logits "
                    "never materialised)")
        else:
            r.stack("training.fused_kernels", "liger", key, value, f"Liger {kind} kernel")
    return handler


def _bf16(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):  # "auto" counts: bf16 on every GPU capplan sizes for training
        r.context["bf16"] = (key, value)
        r.context["load_dtype"] = (key, "bfloat16")


def _degree(path: str) -> trainer.Handler:
    def handler(r: Reader, key: str, value: Any) -> None:
        if value is not None:
            r.set(path, as_int(r, key, value), key, value)
    return handler


def _dp_size(name: str) -> trainer.Handler:
    def handler(r: Reader, key: str, value: Any) -> None:
        if value is not None:
            r.context[name] = (key, as_int(r, key, value))
    return handler


def _fsdp_version(r: Reader, key: str, value: Any) -> None:
    trainer.fsdp_config(r, key.removesuffix("fsdp_version").rstrip(".") or "(top level)", {"fsdp_version": value})


def _ckpt_offload(r: Reader, key: str, value: Any) -> None:
    if value not in (None, False):
        r.stack("training.activation_offloading", "all", key, value, "saved activations copied to pinned host "
                "memory (torchtune OffloadActivations): GPU memory down, host RAM and PCIe traffic up")


def _sequence_len(r: Reader, key: str, value: Any) -> None:
    r.set("training.seq_len", as_int(r, key, value), key, value)


HANDLERS: dict[str, trainer.Handler] = {
    **trainer.HANDLERS,
    "base_model": trainer.HANDLERS["model_name_or_path"],
    "adapter": _adapter,
    "sequence_len": _sequence_len,
    "micro_batch_size": trainer.HANDLERS["per_device_train_batch_size"],
    "optimizer": trainer.HANDLERS["optim"],
    "bf16": _bf16,
    "lora_r": trainer.HANDLERS["lora_r"],
    "lora_target_linear": lambda r, k, v: lora_targets(r, k, "all-linear") if as_bool(r, k, v) else r.no_effect(k),
    "flash_attention": _flag_attention("flash"),
    "sdp_attention": _flag_attention("sdpa"),
    "eager_attention": _flag_attention("eager"),
    "flex_attention": _flag_attention("flex_attention"),
    "xformers_attention": lambda r, k, v: r.unrepresented(k, v, "xformers attention: sized as flash")
    if as_bool(r, k, v) else r.no_effect(k),
    "sample_packing": trainer.HANDLERS["packing"],
    "plugins": _plugins,
    "liger_fused_linear_cross_entropy": _liger_kernel("loss"),
    "liger_cross_entropy": _liger_kernel("cross-entropy"),
    "liger_rms_norm": _liger_kernel("RMSNorm"),
    "liger_glu_activation": _liger_kernel("SwiGLU"),
    "liger_rope": _liger_kernel("RoPE"),
    "liger_layer_norm": _liger_kernel("LayerNorm"),
    "tensor_parallel_size": _degree("parallelism.tp"),
    "context_parallel_size": _degree("parallelism.cp"),
    "expert_parallel_size": _degree("parallelism.ep"),
    "dp_shard_size": _dp_size("dp_shard_size"),
    "dp_replicate_size": _dp_size("dp_replicate_size"),
    "fsdp_version": _fsdp_version,
    "activation_offloading": _ckpt_offload,
    "tiled_mlp": lambda r, k, v: r.unrepresented(k, v, "tiled MLP (ALST): the MLP's activations computed in "
                                                 "sequence tiles; sized untiled") if as_bool(r, k, v)
    else r.no_effect(k),
    "unsloth_lora_mlp": lambda r, k, v: r.unrepresented(k, v, "Unsloth LoRA kernels") if as_bool(r, k, v)
    else r.no_effect(k),
    "lora_mlp_kernel": lambda r, k, v: r.stack("training.lora_kernel", "fused", k, v, "fused LoRA kernels")
    if as_bool(r, k, v) else r.no_effect(k),
    "lora_qkv_kernel": lambda r, k, v: r.stack("training.lora_kernel", "fused", k, v, "fused LoRA kernels")
    if as_bool(r, k, v) else r.no_effect(k),
    "lora_o_kernel": lambda r, k, v: r.stack("training.lora_kernel", "fused", k, v, "fused LoRA kernels")
    if as_bool(r, k, v) else r.no_effect(k),
    "gptq": lambda r, k, v: r.unrepresented(k, v, "a GPTQ-quantised base: sized as the 4-bit QLoRA base")
    if as_bool(r, k, v) else r.no_effect(k),
}

NO_EFFECT = trainer.NO_EFFECT | words("""
datasets test_datasets dataset_prepared_path val_set_size num_epochs lr_scheduler warmup_ratio evals_per_epoch
saves_per_epoch special_tokens tokens chat_template chat_template_jinja wandb_project wandb_entity wandb_watch
wandb_name wandb_log_model lora_model_dir lora_alpha lora_fan_in_fan_out eval_sample_packing pad_to_sequence_len
strict base_model_config model_type tokenizer_type tokenizer_config is_llama_derived_model
is_mistral_derived_model is_qwen_derived_model hub_model_id train_on_inputs group_by_length
early_stopping_patience local_rank xformers_attention debug loss_watchdog_threshold loss_watchdog_patience
resume_from_checkpoint auto_resume_from_checkpoints eval_table_size eval_max_new_tokens max_steps
dataset_processes shuffle_merged_datasets default_system_message field_messages message_field_role
min_sample_len eval_batch_size cosine_min_lr_ratio gradient_checkpointing_kwargs embeddings_skip_upcast
rl rl_beta dpo_beta trl profiler_steps use_tensorboard lr_quadratic_warmup logging_steps dataloader_prefetch_factor
save_first_step seed plugins_config shuffle_before_merging_datasets skip_prepare_dataset remove_unused_columns
save_safetensors lora_on_cpu merge_lora lora_modules_to_save peft_use_dora peft_use_rslora reinit_weights
pretraining_dataset model_config
""")


def read(r: Reader, doc: Any) -> None:
    if not isinstance(doc, dict):
        raise ImportProblem(r.file, "", "must be a mapping of axolotl keys")
    trainer.read_keys(r, doc, HANDLERS, NO_EFFECT)
    if r.context.get("liger_plugin") and not any(k.startswith("liger_") for k in doc):
        r.unrepresented("plugins", "LigerPlugin", "the Liger plugin without liger_* switches patches nothing")
    shard, replicate = r.context.get("dp_shard_size"), r.context.get("dp_replicate_size")
    if shard is not None and shard[1] > 1:
        if replicate is not None and replicate[1] > 1:
            r.set("parallelism.sharding", "hsdp", replicate[0], replicate[1], note="replicas of FSDP2 shard groups")
            r.set("parallelism.hsdp_shard_size", shard[1], shard[0], shard[1])
        else:
            r.set("parallelism.sharding", "fsdp", shard[0], shard[1], note="data-parallel shards (FSDP2)",
                  overrides=True)
        r.set("parallelism.framework", "pytorch", shard[0], shard[1], explicit=False)
        # axolotl's device mesh is dp_replicate x dp_shard x cp x tp (utils/schemas/config.py): the GPUs it needs
        gpus = shard[1] * (replicate[1] if replicate else 1) * r.get("parallelism.tp", 1) * r.get("parallelism.cp", 1)
        per_node = gpus if gpus <= 8 else 8
        if gpus % per_node == 0:
            r.set("hardware.gpus_per_node", per_node, shard[0], shard[1], note=f"{gpus} GPUs in the device mesh",
                  explicit=False)
            r.set("hardware.num_nodes", gpus // per_node, shard[0], shard[1], explicit=False)
    for path, value, why in (("training.seq_len", 2048, "sequence_len not set: axolotl's default 2048"),
                             ("training.micro_batch_size", 1, "micro_batch_size not set: axolotl's default 1"),
                             ("training.method", "full", "no adapter: full fine-tuning")):
        if not r.has(path):
            r.default(path, value, why)
    r.stack("training.stack", "axolotl", "(format)", "axolotl", "axolotl's documented defaults")
    trainer.finish(r)
