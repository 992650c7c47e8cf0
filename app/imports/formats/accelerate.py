"""``accelerate config`` YAML (``accelerate/commands/config/config_args.py`` ``ClusterConfig``; keys as in
accelerate's ``examples/config_yaml_templates`` and the configs ``capplan`` exports).

``distributed_type``: NO / MULTI_GPU (DDP), FSDP (``fsdp_config``: ``fsdp_version``, ``fsdp_sharding_strategy`` or
FSDP2's ``fsdp_reshard_after_forward``, ``fsdp_offload_params``, ``fsdp_activation_checkpointing``), DEEPSPEED
(``deepspeed_config``: ``zero_stage``, ``offload_optimizer_device``, ``offload_param_device``,
``gradient_accumulation_steps``, or ``deepspeed_config_file`` naming a JSON), MEGATRON_LM; ``num_machines`` and
``num_processes`` (all machines together) the hardware; ``mixed_precision`` the precision; ``parallelism_config``
the HSDP / TP / CP degrees."""

from __future__ import annotations

from typing import Any

from app.imports.core import Reader
from app.imports.formats.common import as_bool, as_int, words
from app.imports.formats.trainer import fsdp_config
from app.imports.safe import ImportProblem

__all__ = ["is_accelerate", "read"]

_NO_EFFECT = words("""compute_environment machine_rank main_training_function use_cpu rdzv_backend
same_network main_process_ip main_process_port tpu_env tpu_use_cluster tpu_use_sudo debug enable_cpu_affinity
gpu_ids downcast_bf16 dynamo_config ipex_config mpirun_config commands command_file tpu_name tpu_zone
use_mps_device""")


def is_accelerate(doc: Any) -> bool:
    return isinstance(doc, dict) and ("distributed_type" in doc or "compute_environment" in doc)


def _deepspeed_section(r: Reader, section: Any) -> None:
    if not isinstance(section, dict):
        raise ImportProblem(r.file, "deepspeed_config", f"must be a mapping, not {section!r}")
    for k, v in section.items():
        key = f"deepspeed_config.{k}"
        if k == "deepspeed_config_file":
            r.context["deepspeed_file"] = (key, str(v))
        elif k == "zero_stage":
            stage = as_int(r, key, v)
            if stage not in (0, 1, 2, 3):
                raise ImportProblem(r.file, key, f"{stage} is not a ZeRO stage (0, 1, 2 or 3)")
            r.set("parallelism.sharding", ["none", "zero1", "zero2", "zero3"][stage], key, v)
        elif k in ("offload_optimizer_device", "offload_param_device"):
            if str(v).lower() in ("cpu", "nvme"):
                r.context[k] = (key, v)
            else:
                r.no_effect(key)
        elif k == "gradient_accumulation_steps":
            r.set("training.gradient_accumulation_steps", as_int(r, key, v), key, v)
        elif k in ("zero3_init_flag", "zero3_save_16bit_model", "deepspeed_multinode_launcher"):
            r.no_effect(key)
        else:
            r.unknown(key)
    opt, par = r.context.pop("offload_optimizer_device", None), r.context.pop("offload_param_device", None)
    if par:
        r.set("parallelism.offload", "optimizer+params", par[0], par[1])
    elif opt:
        r.set("parallelism.offload", "optimizer", opt[0], opt[1])


def _parallelism(r: Reader, section: Any) -> None:
    if not isinstance(section, dict):
        raise ImportProblem(r.file, "parallelism_config", f"must be a mapping, not {section!r}")
    sizes = {str(k).removeprefix("parallelism_config_"): as_int(r, f"parallelism_config.{k}", v)
             for k, v in section.items()}
    for name, path in (("tp_size", "parallelism.tp"), ("cp_size", "parallelism.cp")):
        if name in sizes:
            r.set(path, sizes[name], f"parallelism_config.parallelism_config_{name}", sizes[name])
    replicate, shard = sizes.get("dp_replicate_size", 1), sizes.get("dp_shard_size", 1)
    if replicate > 1 and shard > 1:
        r.set("parallelism.sharding", "hsdp", "parallelism_config.parallelism_config_dp_replicate_size", replicate)
        r.set("parallelism.hsdp_shard_size", shard, "parallelism_config.parallelism_config_dp_shard_size", shard)
    for k in sizes:
        if k not in ("tp_size", "cp_size", "dp_replicate_size", "dp_shard_size"):
            r.unknown(f"parallelism_config.{k}")


def read(r: Reader, doc: Any) -> None:
    if not isinstance(doc, dict):
        raise ImportProblem(r.file, "", "must be a mapping of accelerate config keys")
    kind = str(doc.get("distributed_type", "NO")).upper()
    if kind in ("NO", "MULTI_GPU"):
        r.set("parallelism.framework", "pytorch", "distributed_type", doc.get("distributed_type"))
        r.set("parallelism.sharding", "none", "distributed_type", doc.get("distributed_type"),
              note="DDP" if kind == "MULTI_GPU" else "one process", explicit=False)
    elif kind == "FSDP":
        r.set("parallelism.framework", "pytorch", "distributed_type", "FSDP")
        r.set("parallelism.sharding", "fsdp", "distributed_type", "FSDP", explicit=False)
    elif kind == "DEEPSPEED":
        r.set("parallelism.framework", "deepspeed", "distributed_type", "DEEPSPEED")
    elif kind == "MEGATRON_LM":
        r.set("parallelism.framework", "megatron", "distributed_type", "MEGATRON_LM")
    else:
        r.unrepresented("distributed_type", doc.get("distributed_type"), "not a GPU distributed type capplan sizes")
    machines = as_int(r, "num_machines", doc.get("num_machines", 1))
    if kind == "NO" and doc.get("num_processes") is None:
        r.set("hardware.num_nodes", 1, "distributed_type", "NO", note="one process")
        r.set("hardware.gpus_per_node", 1, "distributed_type", "NO", note="one process")
    if "num_processes" in doc and doc["num_processes"] is not None:
        procs = as_int(r, "num_processes", doc["num_processes"])
        if procs < 1 or machines < 1 or procs % machines:
            raise ImportProblem(r.file, "num_processes", f"{procs} processes do not split evenly over "
                                f"{machines} machines")
        r.set("hardware.num_nodes", machines, "num_machines", machines)
        r.set("hardware.gpus_per_node", procs // machines, "num_processes", procs,
              note=f"{procs} processes on {machines} machine(s)")
    mixed = str(doc.get("mixed_precision", "no")).lower()
    if "mixed_precision" in doc:
        value = {"bf16": "bf16-mixed", "fp8": "fp8-mixed", "no": "fp32", "fp16": "bf16-mixed"}.get(mixed)
        if value is None:
            raise ImportProblem(r.file, "mixed_precision", f"{mixed!r} is not one of no, fp16, bf16, fp8")
        if mixed == "fp16":
            r.unrepresented("mixed_precision", "fp16", "fp16 with loss scaling: sized as bf16 mixed precision")
        if value == "fp32" and r.has("training.precision"):
            r.no_effect("mixed_precision")  # "no" under DeepSpeed or a trainer that sets bf16 itself
        else:
            r.set("training.precision", value, "mixed_precision", doc["mixed_precision"],
                  overrides=kind == "DEEPSPEED")
    for k, v in doc.items():
        if k in ("distributed_type", "num_machines", "num_processes", "mixed_precision"):
            continue
        if k == "fsdp_config":
            fsdp_config(r, k, v)
        elif k == "deepspeed_config":
            _deepspeed_section(r, v)
        elif k == "parallelism_config":
            _parallelism(r, v)
        elif k == "megatron_lm_config" and isinstance(v, dict):
            for mk, mv in v.items():
                path = {"megatron_lm_tp_degree": "parallelism.tp", "megatron_lm_pp_degree": "parallelism.pp"}.get(mk)
                if path:
                    r.set(path, as_int(r, f"{k}.{mk}", mv), f"{k}.{mk}", mv)
                elif mk == "megatron_lm_sequence_parallelism":
                    r.set("parallelism.sequence_parallel", as_bool(r, f"{k}.{mk}", mv), f"{k}.{mk}", mv)
                else:
                    r.no_effect(f"{k}.{mk}")
        elif k == "fp8_config" or k in _NO_EFFECT:
            r.no_effect(k)
        else:
            r.unknown(k)
