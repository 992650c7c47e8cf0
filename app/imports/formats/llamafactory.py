"""LLaMA-Factory YAML (``src/llamafactory/hparams/{model,data,finetuning}_args.py`` plus Hugging Face
``Seq2SeqTrainingArguments``; keys as in LLaMA-Factory's ``examples/``).

LLaMA-Factory's own defaults: gradient checkpointing on (``disable_gradient_checkpointing: false``,
``model/model_utils/checkpointing.py``), ``cutoff_len`` 2048, ``lora_rank`` 8, ``finetuning_type`` "lora";
full fine-tuning keeps trainable parameters in fp32 under bf16 autocast unless ``pure_bf16``
(``model/adapter.py`` ``_setup_full_tuning`` / ``cast_trainable_params_to_fp32``)."""

from __future__ import annotations

from typing import Any

from app.imports.core import Reader
from app.imports.formats import trainer
from app.imports.formats.common import as_bool, as_int, attention, lora_targets, words
from app.imports.safe import ImportProblem

__all__ = ["read"]


def _finetuning_type(r: Reader, key: str, value: Any) -> None:
    name = str(value).lower()
    if name == "full":
        r.set("training.method", "full", key, value)
    elif name == "lora":
        r.set("training.method", "lora", key, value)
    else:
        r.unrepresented(key, value, f"finetuning_type {value!r} (partial / orthogonal fine-tuning): sized as "
                        f"{'full' if name == 'freeze' else 'LoRA'}")
        r.set("training.method", "full" if name == "freeze" else "lora", key, value)


def _quantization_bit(r: Reader, key: str, value: Any) -> None:
    bits = as_int(r, key, value)
    if bits == 4:
        r.context["load_in_4bit"] = (key, value)
    else:
        r.unrepresented(key, value, f"a {bits}-bit base: capplan sizes 4-bit (QLoRA) or 16-bit bases")


def _flash_attn(r: Reader, key: str, value: Any) -> None:
    name = str(value).lower()
    if name in ("fa2", "fa3", "sdpa", "eager"):
        attention(r, key, {"fa2": "flash", "fa3": "flash"}.get(name, name))
    elif name == "disabled":
        attention(r, key, "eager")
    else:
        r.no_effect(key)  # "auto": the default (flash where installed)


def _gc_off(r: Reader, key: str, value: Any) -> None:
    r.set("training.activation_checkpointing", "none" if as_bool(r, key, value) else "full", key, value)


def _pure_bf16(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):
        r.set("training.precision", "bf16-true", key, value, note="pure bf16: no fp32 copy of trainable weights")


def _unsloth(r: Reader, key: str, value: Any) -> None:
    if as_bool(r, key, value):
        r.stack("training.stack", "unsloth", key, value, "Unsloth kernels and fused loss")
    else:
        r.no_effect(key)


HANDLERS: dict[str, trainer.Handler] = {
    **trainer.HANDLERS,
    "finetuning_type": _finetuning_type,
    "lora_rank": trainer.HANDLERS["lora_r"],
    "lora_target": lora_targets,
    "quantization_bit": _quantization_bit,
    "cutoff_len": lambda r, k, v: r.set("training.seq_len", as_int(r, k, v), k, v),
    "flash_attn": _flash_attn,
    "disable_gradient_checkpointing": _gc_off,
    "use_unsloth_gc": lambda r, k, v: r.stack("training.activation_offloading", "checkpoints", k, v,
                                              "Unsloth offloaded checkpoints") if as_bool(r, k, v) else r.no_effect(k),
    "pure_bf16": _pure_bf16,
    "enable_liger_kernel": trainer.HANDLERS["use_liger_kernel"],
    "use_unsloth": _unsloth,
    "neat_packing": trainer.HANDLERS["packing"],
    "fp8": lambda r, k, v: r.set("training.precision", "fp8-mixed", k, v) if as_bool(r, k, v) else r.no_effect(k),
    "use_badam": lambda r, k, v: r.unrepresented(k, v, "BAdam: one block of layers trained at a time (gradients "
                                                 "and optimizer states for that block only); sized as full")
    if as_bool(r, k, v) else r.no_effect(k),
    "use_llama_pro": lambda r, k, v: r.unrepresented(k, v, "LLaMA Pro: added blocks trained, the rest frozen; sized "
                                                     "as full") if as_bool(r, k, v) else r.no_effect(k),
    "use_muon": lambda r, k, v: r.stack("training.optimizer", "muon", k, v, "Muon for the 2-D matrices",
                                        fallback=("training.optimizer", "adamw")) if as_bool(r, k, v)
    else r.no_effect(k),
    "use_galore": lambda r, k, v: r.unrepresented(k, v, "GaLore: low-rank gradient projection (smaller optimizer "
                                                  "states); sized as AdamW") if as_bool(r, k, v) else r.no_effect(k),
    "use_apollo": lambda r, k, v: r.unrepresented(k, v, "APOLLO: low-rank optimizer states; sized as AdamW")
    if as_bool(r, k, v) else r.no_effect(k),
    "stage": lambda r, k, v: r.unrepresented(k, v, f"stage {v!r}: a reference / reward model adds memory; sized "
                                             "as supervised training") if str(v) in ("dpo", "kto", "ppo", "rm")
    else r.no_effect(k),
}

NO_EFFECT = trainer.NO_EFFECT | words("""
dataset eval_dataset template max_samples overwrite_cache preprocessing_num_workers plot_loss val_size
lora_alpha additional_target pissa_init pissa_convert loraplus_lr_ratio create_new_adapter adapter_name_or_path
export_dir export_size export_device export_legacy_format infer_backend vllm_maxlen media_dir image_max_pixels
video_max_pixels video_fps tokenized_path enable_thinking mask_history train_on_prompt streaming buffer_size
pref_beta pref_loss dataset_dir ray_run_name ray_storage_path ray_num_workers resources_per_worker
placement_strategy eval_on_each_dataset predict_with_generate do_sample max_new_tokens top_p top_k
fp8_backend fp8_enable_fsdp_float8_all_gather freeze_trainable_layers freeze_trainable_modules
freeze_extra_modules pissa_iter quantization_method quantization_type double_quantization badam_mode
badam_switch_mode badam_switch_interval badam_verbose badam_start_block badam_update_ratio galore_rank
galore_target galore_update_interval galore_scale galore_proj_type apollo_rank apollo_target apollo_scale
loraplus_lr_embedding use_adam_mini
new_special_tokens ddp_timeout hf_hub_token ms_hub_token om_hub_token print_param_status
include_effective_tokens_per_second
""")


def read(r: Reader, doc: Any) -> None:
    if not isinstance(doc, dict):
        raise ImportProblem(r.file, "", "must be a mapping of LLaMA-Factory keys")
    trainer.read_keys(r, doc, HANDLERS, NO_EFFECT)
    for path, value, why in (
            ("training.method", "lora", "finetuning_type not set: LLaMA-Factory's default lora"),
            ("training.seq_len", 2048, "cutoff_len not set: LLaMA-Factory's default 2048"),
            ("training.activation_checkpointing", "full", "LLaMA-Factory checkpoints every layer unless "
             "disable_gradient_checkpointing"),
            ("training.micro_batch_size", 8, "per_device_train_batch_size not set: TrainingArguments' default 8")):
        if not r.has(path):
            r.default(path, value, why)
    if r.get("training.method") in ("lora", "qlora") and not r.has("training.lora_rank"):
        r.default("training.lora_rank", 8, "lora_rank not set: LLaMA-Factory's default 8")
    r.stack("training.stack", "llama-factory", "(format)", "llama-factory", "LLaMA-Factory's documented defaults")
    full = r.get("training.method") == "full"
    trainer.precision(r, pure_when_loaded_bf16=not full)
    trainer.finish(r)
