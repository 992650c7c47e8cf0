"""Ready-to-run configurations for a chosen plan: pure functions from a layout to dicts and strings.

- DeepSpeed JSON config (``deepspeed.runtime.config.DeepSpeedConfig`` keys: ``train_batch_size`` =
  ``train_micro_batch_size_per_gpu`` x ``gradient_accumulation_steps`` x data-parallel size, ``bf16``,
  ``zero_optimization`` with ``offload_optimizer`` / ``offload_param``), for DeepSpeed plans.
- An accelerate config (``accelerate config`` YAML: ``distributed_type`` FSDP with ``fsdp_version: 2`` and a
  ``parallelism_config`` for HSDP/TP/CP, or DEEPSPEED pointing at the JSON, or MULTI_GPU for DDP).
- A ``torchrun`` command line: torchtitan's FSDP2 trainer (``torchtitan/config/job_config.py`` overrides
  ``--parallelism.*``, ``--training.*``, ``--activation_checkpoint.mode``) for PyTorch plans, a DeepSpeed
  script for DeepSpeed plans, ``pretrain_gpt.py`` with Megatron arguments for Megatron plans.
- Megatron-LM arguments (:mod:`estimator.planner.exports.megatron`) and NCCL environment recommendations for the
  topology, each with its reason (:mod:`estimator.planner.exports.nccl`).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Final

import yaml

from estimator.messages import Num, Text
from estimator.planner.contract import EnvVar, Exports, PlanLayout
from estimator.planner.exports.megatron import megatron_args
from estimator.planner.exports.nccl import environment, plan_nccl_tests
from hardware_catalog import Gpu, Server

if TYPE_CHECKING:
    from estimator.request import ModelArch, Training

__all__ = ["EnvVar", "Exports", "accelerate_config", "build_exports", "deepspeed_config", "torchrun_argv"]

RDZV_PORT: Final = 29500
ZERO_STAGE: Final = {"zero1": 1, "zero2": 2, "zero3": 3}
_MIXED: Final = {"bf16-mixed": "bf16", "bf16-true": "bf16", "fp8-mixed": "fp8", "fp32": "no"}


def deepspeed_config(layout: PlanLayout, training: Training) -> dict[str, Any] | None:
    """DeepSpeed config of a ZeRO plan; ``None`` for other frameworks."""
    if layout.framework != "deepspeed" or layout.sharding not in ZERO_STAGE:
        return None
    zero: dict[str, Any] = {"stage": ZERO_STAGE[layout.sharding], "overlap_comm": True,
                            "contiguous_gradients": True, "reduce_bucket_size": 500_000_000}
    if zero["stage"] < 3:
        zero["allgather_bucket_size"] = 500_000_000
    else:
        zero.update({"stage3_prefetch_bucket_size": 50_000_000, "stage3_param_persistence_threshold": 1_000_000,
                     "stage3_max_live_parameters": 1_000_000_000,
                     "stage3_gather_16bit_weights_on_model_save": True})
    if layout.offload in ("optimizer", "optimizer+params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if layout.offload == "optimizer+params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg: dict[str, Any] = {
        "train_batch_size": layout.global_batch_size,
        "train_micro_batch_size_per_gpu": layout.micro_batch_size,
        "gradient_accumulation_steps": layout.gradient_accumulation_steps,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "steps_per_print": 100,
        "wall_clock_breakdown": False,
    }
    if training.precision != "fp32":
        cfg["bf16"] = {"enabled": True}
    return cfg


def _parallelism_config(layout: PlanLayout) -> dict[str, int]:
    replicate = layout.dp // layout.hsdp_shard_size if layout.sharding == "hsdp" and layout.hsdp_shard_size else 1
    return {"parallelism_config_dp_replicate_size": replicate,
            "parallelism_config_dp_shard_size": layout.dp // replicate,
            "parallelism_config_tp_size": layout.tp, "parallelism_config_cp_size": layout.cp}


def _machines(layout: PlanLayout) -> dict[str, Any]:
    cfg: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "num_machines": layout.num_nodes,
                           "num_processes": layout.world_size, "machine_rank": 0, "use_cpu": False,
                           "main_training_function": "main", "downcast_bf16": "no"}
    if layout.num_nodes > 1:
        cfg.update({"main_process_ip": "MASTER_ADDR", "main_process_port": RDZV_PORT, "rdzv_backend": "c10d",
                    "same_network": True})
    return cfg


def accelerate_config(layout: PlanLayout, training: Training) -> dict[str, Any] | None:
    """``accelerate launch`` config of a PyTorch (DDP, FSDP2, HSDP) or DeepSpeed plan; ``None`` for Megatron."""
    cfg = {**_machines(layout), "mixed_precision": _MIXED[training.precision]}
    if layout.framework == "deepspeed":
        return {**cfg, "distributed_type": "DEEPSPEED",
                "deepspeed_config": {"deepspeed_config_file": "ds_config.json",
                                     "zero3_init_flag": layout.sharding == "zero3"}}
    if layout.framework != "pytorch":
        return None
    if layout.sharding == "none" and layout.tp == 1 and layout.cp == 1:
        return {**cfg, "distributed_type": "MULTI_GPU" if layout.world_size > 1 else "NO"}
    fsdp = {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_reshard_after_forward": True, "fsdp_offload_params": layout.offload == "optimizer+params",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_sync_module_states": True,
            "fsdp_activation_checkpointing": layout.activation_checkpointing != "none"}
    return {**cfg, "distributed_type": "FSDP", "fsdp_config": fsdp, "parallelism_config": _parallelism_config(layout)}


def _titan_args(layout: PlanLayout, training: Training) -> list[str]:
    """torchtitan overrides (``torchtitan/config/job_config.py``: Parallelism, Training, ActivationCheckpoint)."""
    p = _parallelism_config(layout)
    replicate, shard = p["parallelism_config_dp_replicate_size"], p["parallelism_config_dp_shard_size"]
    if layout.sharding == "none":
        replicate, shard = layout.dp, 1
    args = ["--job.config_file", "train_config.toml",
            f"--parallelism.data_parallel_replicate_degree={replicate}",
            f"--parallelism.data_parallel_shard_degree={shard}",
            f"--parallelism.tensor_parallel_degree={layout.tp}",
            f"--parallelism.context_parallel_degree={layout.cp}",
            f"--training.local_batch_size={layout.micro_batch_size}",
            f"--training.global_batch_size={layout.global_batch_size}",
            f"--training.seq_len={layout.seq_len}",
            f"--training.mixed_precision_param={'float32' if training.precision == 'fp32' else 'bfloat16'}",
            f"--activation_checkpoint.mode={layout.activation_checkpointing}",
            f"--optimizer.implementation={training.optimizer_impl}"]
    if layout.activation_checkpointing == "selective":
        args.append("--activation_checkpoint.selective_ac_option=op")
    if layout.offload != "none":
        args.append("--training.enable_cpu_offload")
    if shard > 1:
        args.append("--parallelism.fsdp_reshard_after_forward=always")
    return args


def _script(layout: PlanLayout, training: Training, arch: ModelArch) -> list[str]:
    if layout.framework == "megatron":
        return ["pretrain_gpt.py", *(megatron_args(layout, training, arch) or [])]
    if layout.framework == "deepspeed":
        return ["train.py", "--deepspeed", "ds_config.json"]
    return ["-m", "torchtitan.train", *_titan_args(layout, training)]


def torchrun_argv(layout: PlanLayout, training: Training, arch: ModelArch) -> list[str]:
    """``torchrun`` (``torch.distributed.run``) argv for one node; multi-node runs rendezvous over c10d."""
    launcher = ["torchrun", f"--nnodes={layout.num_nodes}", f"--nproc-per-node={layout.gpus_per_node}"]
    if layout.num_nodes == 1:
        launcher.append("--standalone")
    else:
        launcher += ["--rdzv-backend=c10d", f"--rdzv-endpoint=MASTER_ADDR:{RDZV_PORT}", "--rdzv-id=capplan"]
    return launcher + _script(layout, training, arch)


def _peft_note(training: Training) -> Text:
    targets = ('"all-linear"' if training.lora_targets == "all-linear"
               else '["q_proj", "k_proj", "v_proj", "o_proj"]')
    words = dict(rank=training.lora_rank, targets=targets, dropout=Num(training.lora_dropout, "g"))
    if training.method == "qlora":
        return Text("PEFT adapters as sized: LoraConfig(r=%(rank)s, target_modules=%(targets)s, "
                    "lora_dropout=%(dropout)s) on a 4-bit base (BitsAndBytesConfig(load_in_4bit=True, "
                    "bnb_4bit_quant_type=\"nf4\", bnb_4bit_use_double_quant=True)); a different lora_dropout changes "
                    "the activation memory.",
                    **words)
    return Text("PEFT adapters as sized: LoraConfig(r=%(rank)s, target_modules=%(targets)s, "
                "lora_dropout=%(dropout)s); a different lora_dropout changes the activation memory.", **words)


def _notes(layout: PlanLayout, training: Training) -> list[str]:
    out: list[str] = []
    if layout.num_nodes > 1:
        out.append(Text("Replace MASTER_ADDR with the first node's address; run the same command on every node."))
    if layout.framework == "pytorch" and training.method != "full":
        out.append(Text("torchtitan trains full models: for LoRA/QLoRA launch a PEFT script with `accelerate launch "
                        "--config_file` and the accelerate config (the same FSDP2 layout)."))
    if training.method != "full" and layout.framework != "megatron":
        out.append(_peft_note(training))
    if layout.framework == "megatron" and training.method != "full":
        out.append(Text("Megatron-LM itself has no LoRA: run these arguments through NeMo / Megatron-Bridge PEFT."))
    if layout.framework == "deepspeed":
        out.append(Text("`train.py` is your Hugging Face Trainer (or deepspeed.initialize) script; `--deepspeed "
                        "ds_config.json` is the TrainingArguments flag."))
        if training.activation_checkpointing != "none" or layout.activation_checkpointing != "none":
            out.append(Text("Turn on activation checkpointing in the script (`--gradient_checkpointing`)."))
    if layout.tp > 1 and layout.framework == "pytorch":
        if layout.tp_plan == "replicated-embeddings":
            out.append(Text("TP plan replicated-embeddings: launch with the accelerate config "
                            "(parallelism_config_tp_size, the model loaded with Hugging Face tp_plan=\"auto\"); the "
                            "torchtitan command splits the vocabulary instead (vocab-parallel), which needs less "
                            "memory than this plan was sized for."))
        else:
            out.append(Text("TP plan vocab-parallel: the torchtitan command; Hugging Face tp_plan=\"auto\" under the "
                            "accelerate config keeps the embedding whole on every rank and the logits gathered (more "
                            "memory): size that with parallelism.tp_plan=\"replicated-embeddings\"."))
    if training.precision == "fp8-mixed" and layout.framework != "megatron":
        out.append(Text("fp8 needs Transformer Engine or torchao float8 in the training script."))
    if (training.loss_kernel, training.fused_kernels, training.activation_offloading) != (
            "materialized", "none", "none"):
        out.append(Text("Sized with loss_kernel %(loss)s, fused_kernels %(kernels)s and activation_offloading "
                        "%(offload)s (docs/stacks.md): turn the same on in the training script (TRL SFTConfig "
                        "use_liger_kernel / activation_offloading; axolotl liger_kernel, the cut_cross_entropy "
                        "plugin, gradient_checkpointing: offload; torchtune enable_activation_offloading; Unsloth "
                        "use_gradient_checkpointing=\"unsloth\"), or the plan needs more memory than shown.",
                        loss=training.loss_kernel, kernels=training.fused_kernels,
                        offload=training.activation_offloading))
    return out


def build_exports(layout: PlanLayout, training: Training, arch: ModelArch, gpu: Gpu, server: Server | None) -> Exports:
    """Every export of one plan."""
    argv = torchrun_argv(layout, training, arch)
    acc = accelerate_config(layout, training)
    return Exports(torchrun=shlex.join(argv), torchrun_argv=argv, deepspeed_config=deepspeed_config(layout, training),
                   accelerate_config=acc,
                   accelerate_config_yaml=yaml.safe_dump(acc, sort_keys=False) if acc is not None else None,
                   megatron_args=megatron_args(layout, training, arch),
                   environment=environment(layout, gpu, server), notes=_notes(layout, training),
                   nccl_tests=plan_nccl_tests(layout, server))
