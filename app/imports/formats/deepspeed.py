"""DeepSpeed JSON (``deepspeed/runtime/config.py`` ``DeepSpeedConfig``, ``deepspeed/runtime/zero/config.py``
``DeepSpeedZeroConfig``).

``zero_optimization.stage`` 0-3 is DDP / ZeRO-1/2/3; ``offload_optimizer.device`` and ``offload_param.device``
("cpu" or "nvme") the offload; ``bf16.enabled`` / ``fp16.enabled`` the precision (neither: fp32, DeepSpeed's
default); ``train_micro_batch_size_per_gpu`` and ``gradient_accumulation_steps`` the batch, and
``train_batch_size`` = micro x accumulation x data-parallel size gives the data-parallel size.

``"auto"`` is resolved as the Hugging Face integration does (``transformers/integrations/deepspeed.py``
``HfTrainerDeepSpeedConfig.trainer_config_process``): the micro-batch from ``per_device_train_batch_size``, the
accumulation from ``gradient_accumulation_steps``, ``bf16.enabled`` from ``bf16``, ``fp16.enabled`` from ``fp16``,
``train_batch_size`` from world size x both; an explicit value that differs from the trainer's is refused, as
``trainer_config_finalize`` refuses the mismatch. ``"auto"`` with no trainer file keeps capplan's defaults."""

from __future__ import annotations

from typing import Any

from app.imports.core import Reader
from app.imports.formats.common import as_bool, as_int, hf_optimizer, words
from app.imports.safe import ImportProblem

__all__ = ["is_deepspeed", "read"]

_TOP = ("train_batch_size", "train_micro_batch_size_per_gpu", "zero_optimization")

_NO_EFFECT_TOP = words("""gradient_clipping steps_per_print wall_clock_breakdown prescale_gradients
gradient_predivide_factor scheduler zero_allow_untested_optimizer dump_state tensorboard wandb csv_monitor comet
flops_profiler checkpoint data_types communication_data_type seq_parallel_communication_data_type
zero_force_ds_cpu_optimizer memory_breakdown elasticity autotuning""")
_NO_EFFECT_ZERO = words("""overlap_comm contiguous_gradients reduce_scatter allgather_partitions
reduce_bucket_size allgather_bucket_size stage3_prefetch_bucket_size stage3_param_persistence_threshold
stage3_max_live_parameters stage3_max_reuse_distance stage3_gather_16bit_weights_on_model_save
gather_16bit_weights_on_model_save sub_group_size round_robin_gradients load_from_fp32_weights
elastic_checkpoint ignore_unused_parameters cpu_offload memory_efficient_linear stage3_gather_fp16_weights_on_model_save
prefetch_bucket_size param_persistence_threshold max_live_parameters max_reuse_distance
use_multi_rank_bucket_allreduce log_trace_cache_warnings""")


def is_deepspeed(doc: Any) -> bool:
    return isinstance(doc, dict) and (any(k in doc for k in _TOP) or (
        "gradient_accumulation_steps" in doc and any(isinstance(doc.get(k), dict) for k in ("bf16", "fp16"))))


def _auto(r: Reader, key: str, value: Any, trainer_key: str, path: str, conv: Any) -> Any:
    """The value of a DeepSpeed key, resolving ``"auto"`` from the trainer's ``trainer_key`` (None: unresolved)."""
    if value == "auto":
        if path in r.values and r.values[path].origin.file != r.file:
            found = r.values[path]
            r.report.read.append({"file": r.file, "key": key, "value": "auto", "field": path, "set": found.value,
                                  "note": f"\"auto\": {trainer_key} from {found.origin}"})
            return found.value
        r.no_effect(key)
        return None
    return conv(r, key, value)


def _precision(r: Reader, doc: dict[str, Any]) -> None:
    enabled: dict[str, tuple[str, bool | None]] = {}
    for name in ("bf16", "fp16"):
        section = doc.get(name)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ImportProblem(r.file, name, f"must be a mapping such as {{\"enabled\": true}}, not {section!r}")
        value = section.get("enabled", False)
        key = f"{name}.enabled"
        if value == "auto":
            enabled[name] = (key, r.context.get(name) is not None)
            if r.context.get(name) is None and not r.context.get("trainer"):
                enabled[name] = (key, None)
        else:
            enabled[name] = (key, as_bool(r, key, value))
        for sub in section:
            if sub != "enabled":
                r.no_effect(f"{name}.{sub}")
    if "amp" in doc:
        r.unrepresented("amp", doc["amp"], "NVIDIA apex AMP: sized as bf16 mixed precision")
    bf16, fp16 = enabled.get("bf16"), enabled.get("fp16")
    if bf16 and bf16[1]:
        r.set("training.precision", "bf16-mixed", bf16[0], doc["bf16"].get("enabled"),
              note="DeepSpeed bf16: bf16 weights, fp32 master and optimizer states", overrides=True)
    elif fp16 and fp16[1]:
        r.unrepresented(fp16[0], doc["fp16"].get("enabled"), "fp16 with loss scaling: sized as bf16 mixed "
                        "precision (the same bytes per value)")
        r.set("training.precision", "bf16-mixed", fp16[0], doc["fp16"].get("enabled"))
    elif (bf16 and bf16[1] is None) or (fp16 and fp16[1] is None):
        r.default("training.precision", "bf16-mixed", "bf16/fp16 \"auto\" with no trainer arguments to resolve "
                  "it: bf16, as the Hugging Face Trainer on a bf16 GPU with --bf16")
    elif not r.has("training.precision"):
        r.set("training.precision", "fp32", "bf16.enabled" if bf16 else "(no bf16/fp16 section)", False,
              note="DeepSpeed trains in fp32 unless bf16 or fp16 is enabled")


def _offload(r: Reader, key: str, section: Any) -> bool:
    if section is None:
        return False
    if not isinstance(section, dict):
        raise ImportProblem(r.file, key, f"must be a mapping such as {{\"device\": \"cpu\"}}, not {section!r}")
    device = str(section.get("device", "none")).lower()
    if device not in ("none", "cpu", "nvme"):
        raise ImportProblem(r.file, f"{key}.device", f"{device!r} is not one of none, cpu, nvme")
    if device == "nvme":
        r.unrepresented(f"{key}.device", "nvme", "NVMe offload (ZeRO-Infinity): sized as CPU offload")
    return device != "none"


def _zero(r: Reader, zero: Any) -> None:
    if zero is None:
        r.set("parallelism.sharding", "none", "(no zero_optimization)", None, note="ZeRO stage 0: DDP")
        return
    if not isinstance(zero, dict):
        raise ImportProblem(r.file, "zero_optimization", f"must be a mapping, not {zero!r}")
    stage = as_int(r, "zero_optimization.stage", zero.get("stage", 0))
    if stage not in (0, 1, 2, 3):
        raise ImportProblem(r.file, "zero_optimization.stage", f"{stage} is not a ZeRO stage (0, 1, 2 or 3)")
    r.set("parallelism.sharding", ["none", "zero1", "zero2", "zero3"][stage], "zero_optimization.stage",
          zero.get("stage", 0))
    opt = _offload(r, "zero_optimization.offload_optimizer", zero.get("offload_optimizer"))
    par = _offload(r, "zero_optimization.offload_param", zero.get("offload_param"))
    if par and stage != 3:
        raise ImportProblem(r.file, "zero_optimization.offload_param", "parameter offload needs ZeRO stage 3")
    if opt or par:
        offload = "optimizer+params" if par else "optimizer"
        if par and not opt:
            r.unrepresented("zero_optimization.offload_param", zero.get("offload_param"), "parameters offloaded "
                            "without the optimizer: sized with both offloaded")
        r.set("parallelism.offload", offload, "zero_optimization.offload_" + ("param" if par else "optimizer"),
              zero.get("offload_param" if par else "offload_optimizer"))
    else:
        r.set("parallelism.offload", "none", "zero_optimization", None, note="no offload", explicit=False)
    for k, v in zero.items():
        if k in ("stage", "offload_optimizer", "offload_param"):
            continue
        if k in ("zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients", "mics_shard_size"):
            if v not in (None, False, 1, -1, 0):
                r.unrepresented(f"zero_optimization.{k}", v, "ZeRO++ / MiCS partitioning: sized as plain ZeRO")
            else:
                r.no_effect(f"zero_optimization.{k}")
        elif k in _NO_EFFECT_ZERO:
            r.no_effect(f"zero_optimization.{k}")
        else:
            r.unknown(f"zero_optimization.{k}")


def read(r: Reader, doc: Any) -> None:
    if not isinstance(doc, dict):
        raise ImportProblem(r.file, "", "must be a JSON object of DeepSpeed keys")
    r.set("parallelism.framework", "deepspeed", "(DeepSpeed config)", None, explicit=False)
    mbs = _auto(r, "train_micro_batch_size_per_gpu", doc.get("train_micro_batch_size_per_gpu"),
                "per_device_train_batch_size", "training.micro_batch_size", as_int) \
        if "train_micro_batch_size_per_gpu" in doc else None
    if mbs is not None and doc.get("train_micro_batch_size_per_gpu") != "auto":
        r.set("training.micro_batch_size", mbs, "train_micro_batch_size_per_gpu", mbs)
    ga = _auto(r, "gradient_accumulation_steps", doc.get("gradient_accumulation_steps"),
               "gradient_accumulation_steps", "training.gradient_accumulation_steps", as_int) \
        if "gradient_accumulation_steps" in doc else None
    if ga is not None and doc.get("gradient_accumulation_steps") != "auto":
        r.set("training.gradient_accumulation_steps", ga, "gradient_accumulation_steps", ga)
    tbs = doc.get("train_batch_size")
    if tbs is not None and tbs != "auto":
        total = as_int(r, "train_batch_size", tbs)
        mbs = r.get("training.micro_batch_size", mbs)
        ga = r.get("training.gradient_accumulation_steps", ga)
        if mbs is None and ga is None:
            r.unrepresented("train_batch_size", tbs, "a global batch without micro-batch or accumulation: "
                            "capplan needs the micro-batch; the default 1 kept")
        else:
            mbs, ga = mbs or 1, ga or 1
            if total % (mbs * ga):
                raise ImportProblem(r.file, "train_batch_size", f"{total} is not micro-batch {mbs} x accumulation "
                                    f"{ga} x a whole number of data-parallel ranks (DeepSpeed refuses it)")
            r.context["dp"] = ("train_batch_size", total // (mbs * ga))
            r.report.read.append({"file": r.file, "key": "train_batch_size", "value": tbs, "field": "(data "
                                  "parallel size)", "set": total // (mbs * ga), "note": "train_batch_size / "
                                  "(micro-batch x accumulation)"})
    elif tbs == "auto":
        r.no_effect("train_batch_size")
    _precision(r, doc)
    _zero(r, doc.get("zero_optimization"))
    opt = doc.get("optimizer")
    if isinstance(opt, dict) and "type" in opt:
        name = str(opt["type"]).lower()
        # DeepSpeed builds FusedAdam (GPU) or DeepSpeedCPUAdam (offloaded) for "Adam"/"AdamW"
        # (deepspeed/runtime/engine.py _configure_basic_optimizer)
        if name in ("adam", "adamw", "fusedadam", "cpuadam"):
            r.set("training.optimizer", "adamw", "optimizer.type", opt["type"])
            r.set("training.optimizer_impl", "fused", "optimizer.type", opt["type"], note="DeepSpeed FusedAdam / "
                  "CPUAdam")
        elif name in ("muon", "lion", "sgd"):
            hf_optimizer(r, "optimizer.type", {"lion": "lion_32bit"}.get(name, name))
        else:
            r.unrepresented("optimizer.type", opt["type"], "an optimizer capplan does not size; sized as AdamW")
    for k in doc:
        if k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16", "fp16",
                 "zero_optimization", "optimizer", "amp"):
            continue
        if k == "activation_checkpointing":
            ac = doc[k] if isinstance(doc[k], dict) else {}
            if as_bool(r, f"{k}.cpu_checkpointing", ac.get("cpu_checkpointing", False)):
                r.stack("training.activation_offloading", "checkpoints", f"{k}.cpu_checkpointing", True,
                        "checkpointed activations kept in CPU memory")
            else:
                r.no_effect(k)
        elif k in ("tensor_parallel", "sequence_parallel_size"):
            size = doc[k].get("autotp_size") if isinstance(doc[k], dict) else doc[k]
            if size not in (None, 1):
                path = "parallelism.tp" if k == "tensor_parallel" else "parallelism.cp"
                r.set(path, as_int(r, k, size), k, size)
            else:
                r.no_effect(k)
        elif k == "sparse_attention":
            r.unrepresented(k, "...", "DeepSpeed sparse attention: removed from DeepSpeed (its config class refuses "
                            "the block); sized as dense attention")
        elif k == "compression_training" or k == "data_efficiency" or k == "curriculum_learning":
            r.unrepresented(k, "...", "compression / curriculum training: sized as plain training")
        elif k in _NO_EFFECT_TOP:
            r.no_effect(k)
        else:
            r.unknown(k)
