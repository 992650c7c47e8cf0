"""torchtitan job config: the TOML of ``train_configs/`` and its command-line overrides (``--section.key=value``,
``torchtitan/config/job_config.py``), as in the ``torchrun ... -m torchtitan.train`` line capplan exports.

``[model] name`` + ``flavor`` names the model (``llama3`` 8B / 70B / 405B are Llama 3.1's shapes,
``torchtitan/models/llama3/__init__.py``); ``[training] local_batch_size`` (older ``batch_size``),
``global_batch_size`` (accumulation = global / (local x data-parallel)), ``seq_len``, ``mixed_precision_param``
(bfloat16 by default: FSDP2 ``MixedPrecisionPolicy`` over fp32 parameters), ``enable_cpu_offload``;
``[parallelism]`` degrees (``data_parallel_shard_degree`` -1: every remaining rank), ``fsdp_reshard_after_forward``,
``pipeline_parallel_schedule``; ``[activation_checkpoint] mode``; ``[optimizer] name`` / ``implementation``;
``[model] converters = ["float8"]`` fp8 training."""

from __future__ import annotations

from typing import Any

from app.imports.core import Reader
from app.imports.formats.common import as_bool, as_int, hf_optimizer, words

__all__ = ["is_torchtitan", "read"]

_FLAVORS = {("llama3", "8b"): "llama-3.1-8b", ("llama3", "70b"): "llama-3.1-70b",
            ("llama3", "405b"): "llama-3.1-405b", ("deepseek_v3", "671b"): "deepseek-v3",
            ("llama2", "7b"): "llama-2-7b", ("llama2", "13b"): "llama-2-13b", ("llama2", "70b"): "llama-2-70b"}
_SCHEDULES = {"1f1b": "1f1b", "gpipe": "gpipe", "interleaved1f1b": "interleaved", "looped_bfs": "interleaved",
              "interleavedzerobubble": "interleaved", "zbvzerobubble": "interleaved"}
_NO_EFFECT_SECTIONS = ("job", "profiling", "metrics", "lr_scheduler", "checkpoint", "validation", "comm",
                       "fault_tolerance",
                       "experimental", "memory_estimation", "float8", "mx", "quantize")


def is_torchtitan(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("model"), dict) and (
        "flavor" in doc["model"] or "parallelism" in doc or "training" in doc)


def flatten(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section, values in doc.items():
        if isinstance(values, dict):
            for k, v in values.items():
                if isinstance(v, dict):
                    for k2, v2 in v.items():
                        out[f"{section}.{k}.{k2}"] = v2
                else:
                    out[f"{section}.{k}"] = v
        else:
            out[section] = values
    return out


def read(r: Reader, values: dict[str, Any]) -> None:
    """``values``: dotted keys (``training.seq_len``) from the TOML, then the command line's overrides."""
    r.set("parallelism.framework", "pytorch", "(torchtitan)", None, explicit=False)
    name, flavor = values.get("model.name"), values.get("model.flavor")
    degrees: dict[str, int] = {}
    local = global_ = None
    for key, v in values.items():
        if key in ("model.name", "model.flavor"):
            continue
        if key in ("training.local_batch_size", "training.batch_size"):
            local = as_int(r, key, v)
            r.set("training.micro_batch_size", local, key, v)
        elif key == "training.global_batch_size":
            global_ = (key, as_int(r, key, v))
        elif key == "training.seq_len":
            r.set("training.seq_len", as_int(r, key, v), key, v)
        elif key == "training.mixed_precision_param":
            r.set("training.precision", "fp32" if str(v) == "float32" else "bf16-mixed", key, v)
        elif key == "training.enable_cpu_offload":
            if as_bool(r, key, v):
                r.set("parallelism.offload", "optimizer+params", key, v)
            else:
                r.no_effect(key)
        elif key.startswith("parallelism.") and key.endswith("_degree"):
            degrees[key.split(".", 1)[1]] = as_int(r, key, v)
        elif key == "parallelism.fsdp_reshard_after_forward":
            if str(v) == "never":
                r.set("parallelism.sharding", "zero2", key, v, note="parameters stay gathered after forward")
            else:
                r.no_effect(key)
        elif key == "parallelism.pipeline_parallel_schedule":
            sched = _SCHEDULES.get(str(v).lower())
            if as_int(r, key, values.get("parallelism.pipeline_parallel_degree", 1)) <= 1:
                r.no_effect(key)
            elif sched is None:
                r.unrepresented(key, v, "a pipeline schedule capplan does not size; sized as 1F1B")
            else:
                r.set("training.pipeline_schedule", sched, key, v)
        elif key == "activation_checkpoint.mode":
            mode = str(v).lower()
            r.set("training.activation_checkpointing", mode if mode in ("none", "selective", "full") else "full",
                  key, v)
        elif key == "optimizer.name":
            hf = {"adamw": "adamw_torch", "adam": "adamw_torch"}.get(str(v).lower())
            if hf is None:
                r.unrepresented(key, v, "an optimizer capplan does not size; sized as AdamW")
            else:
                hf_optimizer(r, key, hf)
        elif key == "optimizer.implementation":
            impl = str(v).lower()
            if impl in ("fused", "foreach", "for-loop"):
                r.set("training.optimizer_impl", impl, key, v)
        elif key == "model.converters":
            conv = v if isinstance(v, list) else str(v).split(",")
            if any("float8" in str(c) for c in conv):
                r.set("training.precision", "fp8-mixed", key, v)
            elif any(str(c).strip() for c in conv):
                r.unrepresented(key, v, "a model converter capplan does not size")
        elif key == "compile.enable":
            if as_bool(r, key, v):
                r.unrepresented(key, v, "torch.compile: sized uncompiled")
            else:
                r.no_effect(key)
        elif key.split(".")[0] in _NO_EFFECT_SECTIONS or key.startswith(("training.", "model.", "compile.",
                                                                         "optimizer.", "activation_checkpoint.",
                                                                         "parallelism.")):
            if key.startswith(("training.", "model.", "parallelism.")) and key not in _KNOWN_NO_EFFECT:
                r.unknown(key)
            else:
                r.no_effect(key)
        else:
            r.unknown(key)
    _model(r, name, flavor)
    _parallel(r, degrees, local, global_)


_KNOWN_NO_EFFECT = words("""training.max_norm training.steps training.dataset training.dataset_path
training.warmup_steps training.seed training.deterministic training.gc_freq training.mixed_precision_reduce
training.dataloader training.gc_debug model.hf_assets_path model.tokenizer_path model.print_after_conversion
model.print_model parallelism.disable_loss_parallel parallelism.enable_async_tensor_parallel
parallelism.pipeline_parallel_microbatch_size parallelism.pipeline_parallel_split_points
parallelism.module_fqns_per_model_part parallelism.context_parallel_rotate_method
parallelism.pipeline_parallel_layers_per_stage parallelism.expert_tensor_parallel_degree
parallelism.enable_compiled_autograd parallelism.pipeline_parallel_first_stage_less_layers
parallelism.pipeline_parallel_last_stage_less_layers""")


def _model(r: Reader, name: Any, flavor: Any) -> None:
    if name is None:
        return
    found = _FLAVORS.get((str(name).lower(), str(flavor).lower()))
    if found is None:
        r.report.needs.append(f"model: torchtitan {name} flavor {flavor!r} has no capplan preset: add the model's "
                              "config.json as one more file")
        return
    r.set("model", found, "model.flavor", flavor, note=f"torchtitan {name} {flavor}")


def _parallel(r: Reader, d: dict[str, int], local: int | None, global_: tuple[str, int] | None) -> None:
    tp, pp, cp, ep = (d.get(f"{n}_parallel_degree", 1) for n in ("tensor", "pipeline", "context", "expert"))
    for n, path, word in ((tp, "tp", "tensor"), (pp, "pp", "pipeline"), (cp, "cp", "context"), (ep, "ep", "expert")):
        if n > 1:
            r.set(f"parallelism.{path}", n, f"parallelism.{word}_parallel_degree", n)
    replicate, shard = d.get("data_parallel_replicate_degree", 1), d.get("data_parallel_shard_degree", -1)
    world = r.get("hardware.num_nodes", 1) * r.get("hardware.gpus_per_node", 8)
    if shard == -1:
        shard = max(1, world // (replicate * tp * pp * cp))
    if not r.has("parallelism.sharding"):
        if shard > 1 and replicate > 1:
            r.set("parallelism.sharding", "hsdp", "parallelism.data_parallel_replicate_degree", replicate)
            r.set("parallelism.hsdp_shard_size", shard, "parallelism.data_parallel_shard_degree", shard)
        elif shard > 1:
            r.set("parallelism.sharding", "fsdp", "parallelism.data_parallel_shard_degree",
                  d.get("data_parallel_shard_degree", -1), note="FSDP2 over the data-parallel ranks")
        else:
            r.set("parallelism.sharding", "none", "parallelism.data_parallel_shard_degree", shard, note="DDP")
    if global_ is not None and local:
        dp = replicate * shard
        if global_[1] % (local * dp):
            from app.imports.safe import ImportProblem
            raise ImportProblem(r.file, global_[0], f"{global_[1]} is not a multiple of local batch {local} x "
                                f"data-parallel {dp}")
        r.set("training.gradient_accumulation_steps", global_[1] // (local * dp), global_[0], global_[1],
              note=f"global / (local {local} x data-parallel {dp})")
