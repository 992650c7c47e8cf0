"""torchtune recipe YAML (``recipes/configs/``; the recipes ``full_finetune_distributed.py``,
``lora_finetune_distributed.py`` and their single-device twins).

``model._component_`` names the model builder (``torchtune.models.llama3_1.lora_llama3_1_8b``: the ``lora_`` /
``qlora_`` prefix is the method, the rest the model); ``batch_size``, ``gradient_accumulation_steps``,
``tokenizer.max_seq_len``; ``dtype`` bf16 trains in pure bf16 (weights and optimizer states,
``torchtune/training/precision.py``); ``enable_activation_checkpointing`` / ``enable_activation_offloading``;
``fsdp_cpu_offload``, ``tensor_parallel_dim`` (FSDP2 in the distributed recipes: a config with FSDP keys is
distributed, as is one whose name does not say ``single_device``, torchtune's naming of its configs);
``loss._component_`` (``CEWithChunkedOutputLoss``,
``LinearCrossEntropyLoss``: the output projection and loss in chunks); ``dataset.packed``."""

from __future__ import annotations

import re
from typing import Any

from app.imports.core import Reader
from app.imports.formats.common import as_bool, as_int, hf_optimizer, lora_targets, words
from app.imports.models import preset_for
from app.imports.safe import ImportProblem

__all__ = ["is_torchtune", "read"]

_FAMILY = re.compile(r"^(llama|qwen|gemma|mistral|phi)(\d+)?(?:_(\d+))?_(\w+?)(?:_(?:base|instruct))?$")
_OPTIMIZERS = {"torch.optim.adamw": "adamw_torch", "torch.optim.adam": "adamw_torch",
               "bitsandbytes.optim.pagedadamw8bit": "paged_adamw_8bit", "bitsandbytes.optim.adamw8bit": "adamw_8bit",
               "bitsandbytes.optim.pagedadamw": "paged_adamw_32bit", "bitsandbytes.optim.pagedadamw32bit":
               "paged_adamw_32bit", "torchao.optim.adamw8bit": "adamw_torch_8bit",
               "torchao.prototype.low_bit_optim.adamw8bit": "adamw_torch_8bit",
               "torchao.optim.adamw4bit": "adamw_torch_4bit", "torchao.prototype.low_bit_optim.adamw4bit":
               "adamw_torch_4bit", "torch.optim.sgd": "sgd", "torch.optim.muon": "muon"}
_DISTRIBUTED_KEYS = ("fsdp_cpu_offload", "tensor_parallel_dim", "custom_sharded_layers", "fsdp_reshard_after_forward",
                     "data_parallel_shard_dim", "data_parallel_replicate_dim", "context_parallel_dim")
_NO_EFFECT = words("""output_dir seed shuffle epochs max_steps_per_epoch resume_from_checkpoint device log_every_n_steps
log_peak_memory_stats log_level run_val_every_n_steps batch_size_val save_adapter_weights_only clip_grad_norm
checkpointer metric_logger profiler lr_scheduler dataset_val tensor_parallel_plan inference quantizer
save_every_n_steps kd_ratio teacher_checkpointer teacher_model low_cpu_ram""")


def is_torchtune(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("model"), dict) and "_component_" in doc["model"]


def _model(r: Reader, component: str) -> None:
    name = component.rsplit(".", 1)[-1]
    method = "full"
    for prefix, m in (("qlora_", "qlora"), ("lora_", "lora")):
        if name.startswith(prefix):
            name, method = name[len(prefix):], m
    r.set("training.method", method, "model._component_", component)
    match = _FAMILY.match(name)
    candidate = None
    if match:
        family, major, minor, size = match.groups()
        version = f"{major}.{minor}" if minor else (major or "")
        sep = "-" if family in ("llama", "gemma") else ""
        candidate = f"{family}{sep}{version}-{size}".replace("--", "-") if version else f"{family}-{size}"
    found = preset_for(candidate) if candidate else None
    if found is None:
        r.report.needs.append(f"model: torchtune builder {component!r} has no capplan preset: add the model's "
                              "config.json as one more file")
        return
    r.set("model", found, "model._component_", component, note="capplan preset")


def read(r: Reader, doc: Any) -> None:
    if not is_torchtune(doc):
        raise ImportProblem(r.file, "model._component_", "a torchtune recipe names its model builder here")
    model = doc["model"]
    _model(r, str(model["_component_"]))
    targets: list[str] = []
    for k, v in model.items():
        key = f"model.{k}"
        if k == "_component_":
            continue
        if k == "lora_rank":
            r.set("training.lora_rank", as_int(r, key, v), key, v)
        elif k == "lora_dropout":
            r.set("training.lora_dropout", float(v), key, v)
        elif k == "lora_attn_modules":
            targets += [str(t) for t in v or []]
        elif k == "apply_lora_to_mlp":
            if as_bool(r, key, v):
                targets += ["gate_proj", "up_proj", "down_proj"]
        elif k == "apply_lora_to_output":
            if as_bool(r, key, v):
                r.unrepresented(key, v, "a LoRA adapter on the output projection (LM head): not sized")
            else:
                r.no_effect(key)
        elif k in ("lora_alpha", "quantize_base", "use_dora"):
            r.no_effect(key)
        else:
            r.unknown(key)
    if targets:
        lora_targets(r, "model.lora_attn_modules", targets)
    distributed = any(k in doc for k in _DISTRIBUTED_KEYS)
    single = "single_device" in r.file
    if distributed or not single:
        r.set("parallelism.framework", "pytorch", "(FSDP keys)", None, explicit=False)
        r.set("parallelism.sharding", "fsdp", "(FSDP keys)" if distributed else "(file name)", None,
              note="torchtune's distributed recipes shard with FSDP2" + ("" if distributed else "; the name does "
                                                                           "not say single_device"), explicit=False)
    else:
        r.default("hardware.gpus_per_node", 1, "a single_device recipe config (no FSDP keys)")
        r.default("hardware.num_nodes", 1, "a single-device recipe")
    for k, v in doc.items():
        if k == "model":
            continue
        if k == "batch_size":
            r.set("training.micro_batch_size", as_int(r, k, v), k, v)
        elif k == "gradient_accumulation_steps":
            r.set("training.gradient_accumulation_steps", as_int(r, k, v), k, v)
        elif k == "dtype":
            value = {"bf16": "bf16-true", "fp32": "fp32"}.get(str(v))
            if value is None:
                raise ImportProblem(r.file, k, f"{v!r} is not one of bf16, fp32")
            r.set("training.precision", value, k, v, note="torchtune trains in the model dtype (no fp32 copy)")
        elif k == "enable_activation_checkpointing":
            r.set("training.activation_checkpointing", "full" if as_bool(r, k, v) else "none", k, v)
        elif k == "enable_activation_offloading":
            if as_bool(r, k, v):
                r.stack("training.activation_offloading", "all", k, v, "OffloadActivations: every saved tensor to "
                        "pinned host memory on a side stream")
            else:
                r.no_effect(k)
        elif k == "fsdp_cpu_offload":
            if as_bool(r, k, v):
                r.set("parallelism.offload", "optimizer+params", k, v)
            else:
                r.no_effect(k)
        elif k == "fsdp_reshard_after_forward":
            if not as_bool(r, k, v):
                r.set("parallelism.sharding", "zero2", k, v)
            else:
                r.no_effect(k)
        elif k in ("tensor_parallel_dim", "context_parallel_dim"):
            path = "parallelism.tp" if k == "tensor_parallel_dim" else "parallelism.cp"
            r.set(path, as_int(r, k, v), k, v)
        elif k == "data_parallel_replicate_dim":
            if as_int(r, k, v) > 1:
                r.set("parallelism.sharding", "hsdp", k, v)
            else:
                r.no_effect(k)
        elif k == "fsdp" and isinstance(v, dict):
            if as_bool(r, "fsdp.cpu_offload", v.get("cpu_offload", False)):
                r.set("parallelism.offload", "optimizer+params", "fsdp.cpu_offload", v["cpu_offload"])
            else:
                r.no_effect("fsdp.cpu_offload")
        elif k in ("data_parallel_shard_dim", "custom_sharded_layers"):
            r.no_effect(k)
        elif k == "tokenizer" and isinstance(v, dict):
            seq = v.get("max_seq_len")
            if seq is not None:
                r.set("training.seq_len", as_int(r, "tokenizer.max_seq_len", seq), "tokenizer.max_seq_len", seq)
            for sub in v:
                if sub != "max_seq_len":
                    r.no_effect(f"tokenizer.{sub}")
        elif k == "dataset":
            items = v if isinstance(v, list) else [v]
            for item in items:
                if isinstance(item, dict) and as_bool(r, "dataset.packed", item.get("packed", False)):
                    r.unrepresented("dataset.packed", True, "packed samples: attention within each document; sized "
                                    "as one document per sequence", maps_to="training.packed_document_tokens")
                    break
            else:
                r.no_effect("dataset")
        elif k == "optimizer" and isinstance(v, dict):
            comp = str(v.get("_component_", "")).lower()
            hf = _OPTIMIZERS.get(comp)
            if hf is None:
                r.unrepresented("optimizer._component_", v.get("_component_"), "an optimizer capplan does not size; "
                                "sized as AdamW")
            else:
                if hf == "adamw_torch" and as_bool(r, "optimizer.fused", v.get("fused", False)):
                    hf = "adamw_torch_fused"
                hf_optimizer(r, "optimizer._component_", hf)
        elif k == "optimizer_in_bwd":
            if as_bool(r, k, v):
                r.unrepresented(k, v, "the optimizer step inside backward: each gradient freed after its step "
                                "(no full gradient buffer)")
            else:
                r.no_effect(k)
        elif k == "loss" and isinstance(v, dict):
            comp = str(v.get("_component_", ""))
            if "Chunked" in comp or "LinearCrossEntropy" in comp:
                r.stack("training.loss_kernel", "chunked", "loss._component_", comp, "the output projection / "
                        "loss in chunks: one fp32 chunk of logits at a time")
            else:
                r.no_effect("loss")
        elif k == "compile":
            if as_bool(r, k, v):
                r.unrepresented(k, v, "torch.compile of the model and loss: sized uncompiled")
            else:
                r.no_effect(k)
        elif k in _NO_EFFECT:
            r.no_effect(k)
        else:
            r.unknown(k)
    if not r.has("training.seq_len"):
        r.default("training.seq_len", 4096, "tokenizer.max_seq_len not set: torchtune does not truncate; capplan's "
                  "default 4096")
    r.stack("training.stack", "torchtune", "(format)", "torchtune", "torchtune's documented defaults")
