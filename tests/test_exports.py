"""Every export loads in the real schema or parser of its tool.

- DeepSpeed: ``deepspeed.runtime.config.DeepSpeedConfig`` (pydantic ``DeepSpeedZeroConfig`` forbids unknown keys;
  the batch sanity check needs train_batch_size = micro-batch x accumulation x data-parallel size).
- accelerate: ``ClusterConfig.from_yaml_file`` (rejects unknown keys), the ``accelerate launch`` parser and
  validation, the environment it hands to torchrun, and ``FullyShardedDataParallelPlugin`` / ``ParallelismConfig``
  built from that environment.
- torchrun: ``torch.distributed.run``'s own argument parser.
- torchtitan and Megatron-LM are not installable here (torchtitan pins nightly torch; Megatron-LM's training
  arguments are not in the megatron-core wheel): their flags are checked against argparse parsers built from the
  field tables of ``pytorch/torchtitan: torchtitan/config/job_config.py`` (commit 000204a4) and
  ``NVIDIA/Megatron-LM: megatron/training/arguments.py`` (commit 000c4ac2): names, types and choices as there.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from estimator.model.spec import preset
from estimator.planner.contract import PlanLayout
from estimator.planner.exports.launch import accelerate_config, build_exports, deepspeed_config, torchrun_argv
from estimator.planner.exports.megatron import megatron_args
from estimator.planner.exports.nccl import environment
from estimator.request import Training
from hardware_catalog import load_catalog

CATALOG = load_catalog()
ARCH = preset("llama-3.1-70b")
FULL = Training(method="full", precision="bf16-mixed", seq_len=4096)


def _layout(**kw: Any) -> PlanLayout:
    base: dict[str, Any] = dict(gpu="h100-sxm5-80gb", server="dell-xe9680-h100", num_nodes=2, gpus_per_node=8,
                                world_size=16, framework="deepspeed", sharding="zero3", offload="none", dp=16, tp=1,
                                pp=1, virtual_stages=1, cp=1, ep=1, sequence_parallel=False, hsdp_shard_size=None,
                                activation_checkpointing="full", micro_batch_size=2, gradient_accumulation_steps=8,
                                global_batch_size=256, seq_len=4096)
    base.update(kw)
    base["world_size"] = base["num_nodes"] * base["gpus_per_node"]
    mp = base["tp"] * base["pp"] * base["cp"]
    base["dp"] = base["world_size"] // mp
    base["global_batch_size"] = base["dp"] * base["micro_batch_size"] * base["gradient_accumulation_steps"]
    return PlanLayout(**base)


# ---------------------------------------------------------------------------------------------- DeepSpeed
class _Mpu:
    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def _deepspeed(cfg: dict[str, Any], dp: int) -> Any:
    import deepspeed.runtime.config as dsc

    with mock.patch.object(dsc.dist, "get_rank", return_value=0):
        return dsc.DeepSpeedConfig(cfg, mpu=_Mpu(dp))


@pytest.mark.parametrize(
    ("sharding", "offload", "stage", "opt_device", "param_device"),
    [
        ("zero1", "none", 1, None, None),
        ("zero1", "optimizer", 1, "cpu", None),
        ("zero2", "none", 2, None, None),
        ("zero2", "optimizer", 2, "cpu", None),
        ("zero3", "none", 3, None, None),
        ("zero3", "optimizer", 3, "cpu", None),
        ("zero3", "optimizer+params", 3, "cpu", "cpu"),
    ],
)
def test_deepspeed_config_loads_in_deepspeed(sharding: str, offload: str, stage: int, opt_device: str | None,
                                             param_device: str | None) -> None:
    layout = _layout(sharding=sharding, offload=offload)
    cfg = deepspeed_config(layout, FULL)
    assert cfg is not None
    ds = _deepspeed(cfg, layout.dp)
    assert ds.zero_optimization_stage == stage
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == (
        layout.global_batch_size, layout.micro_batch_size, layout.gradient_accumulation_steps)
    assert ds.bfloat16_config.enabled
    offload_opt, offload_param = ds.zero_config.offload_optimizer, ds.zero_config.offload_param
    assert (str(getattr(offload_opt.device, "value", offload_opt.device)) if offload_opt else None) == opt_device
    assert (str(getattr(offload_param.device, "value", offload_param.device)) if offload_param else None) == \
        param_device


def test_deepspeed_rejects_an_inconsistent_batch() -> None:
    """The validator is real: a batch that does not add up is refused."""
    layout = _layout()
    cfg = deepspeed_config(layout, FULL)
    assert cfg is not None
    with pytest.raises(AssertionError, match="train_batch_size"):
        _deepspeed({**cfg, "train_batch_size": cfg["train_batch_size"] + 1}, layout.dp)


@pytest.mark.parametrize("framework", ["pytorch", "megatron"])
def test_no_deepspeed_config_for_other_frameworks(framework: str) -> None:
    assert deepspeed_config(_layout(framework=framework, sharding="zero1"), FULL) is None


# --------------------------------------------------------------------------------------------- accelerate
def _accelerate_env(cfg: dict[str, Any], tmp_path: Path) -> dict[str, str]:
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    path = tmp_path / "accelerate.yaml"
    path.write_text(yaml.safe_dump(cfg))
    ClusterConfig.from_yaml_file(str(path))  # unknown keys raise
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, defaults, _ = _validate_launch_command(args)
    if cfg["distributed_type"] == "DEEPSPEED":
        assert args.use_deepspeed
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)  # as launch_command does
        _, env = prepare_deepspeed_cmd_env(args)
        assert env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "ds_config.json"
        return dict(env)
    return dict(prepare_multi_gpu_env(args))


@pytest.mark.parametrize(
    ("layout_fields", "distributed_type", "replicate", "shard"),
    [
        ({"framework": "pytorch", "sharding": "zero3"}, "FSDP", 1, 16),
        ({"framework": "pytorch", "sharding": "zero3", "offload": "optimizer+params"}, "FSDP", 1, 16),
        ({"framework": "pytorch", "sharding": "hsdp", "hsdp_shard_size": 8}, "FSDP", 2, 8),
        ({"framework": "pytorch", "sharding": "zero3", "tp": 4}, "FSDP", 1, 4),
        ({"framework": "pytorch", "sharding": "none", "activation_checkpointing": "none"}, "MULTI_GPU", None, None),
        ({"framework": "deepspeed", "sharding": "zero3"}, "DEEPSPEED", None, None),
    ],
)
def test_accelerate_config_loads_in_accelerate(layout_fields: dict[str, Any], distributed_type: str,
                                               replicate: int | None, shard: int | None, tmp_path: Path) -> None:
    layout = _layout(**layout_fields)
    cfg = accelerate_config(layout, FULL)
    assert cfg is not None and cfg["distributed_type"] == distributed_type
    env = _accelerate_env(cfg, tmp_path)
    if distributed_type != "FSDP":
        return
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import FullyShardedDataParallelPlugin

    assert env["FSDP_VERSION"] == "2"
    with mock.patch.dict(os.environ, {k: v for k, v in env.items() if k.startswith(("FSDP_", "ACCELERATE_"))}):
        plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert plugin.activation_checkpointing == (layout.activation_checkpointing != "none")
    assert (type(plugin.cpu_offload).__name__ == "CPUOffloadPolicy") == (layout.offload == "optimizer+params")
    pc = ParallelismConfig(dp_replicate_size=int(env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"]),
                           dp_shard_size=int(env["PARALLELISM_CONFIG_DP_SHARD_SIZE"]),
                           tp_size=int(env["PARALLELISM_CONFIG_TP_SIZE"]),
                           cp_size=int(env["PARALLELISM_CONFIG_CP_SIZE"]))
    assert (pc.dp_replicate_size, pc.dp_shard_size) == (replicate, shard)
    assert pc.total_size == layout.world_size


def test_no_accelerate_config_for_megatron() -> None:
    assert accelerate_config(_layout(framework="megatron", sharding="zero1"), FULL) is None


# ------------------------------------------------------------------------------------------------ torchrun
def _torchrun(argv: list[str]) -> argparse.Namespace:
    import torch.distributed.run as run

    assert argv[0] == "torchrun"
    args: argparse.Namespace = run.get_args_parser().parse_args(argv[1:])
    return args


# torchtitan/config/job_config.py (commit 000204a4): section.field -> type or choices
TITAN_FIELDS: dict[str, Any] = {
    "job.config_file": str,
    "parallelism.data_parallel_replicate_degree": int, "parallelism.data_parallel_shard_degree": int,
    "parallelism.tensor_parallel_degree": int, "parallelism.context_parallel_degree": int,
    "parallelism.pipeline_parallel_degree": int, "parallelism.expert_parallel_degree": int,
    "parallelism.fsdp_reshard_after_forward": ["default", "always", "never"],
    "training.local_batch_size": int, "training.global_batch_size": int, "training.seq_len": int,
    "training.mixed_precision_param": ["bfloat16", "float32"], "training.enable_cpu_offload": bool,
    "activation_checkpoint.mode": ["selective", "full", "none"], "activation_checkpoint.selective_ac_option": str,
    "optimizer.implementation": ["for-loop", "foreach", "fused"],
}


def _titan_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for name, kind in TITAN_FIELDS.items():
        if kind is bool:
            p.add_argument(f"--{name}", action="store_true")
        elif isinstance(kind, list):
            p.add_argument(f"--{name}", choices=kind)
        else:
            p.add_argument(f"--{name}", type=kind)
    return p


@pytest.mark.parametrize(
    ("layout_fields", "replicate", "shard"),
    [
        ({"framework": "pytorch", "sharding": "zero3"}, 1, 16),
        ({"framework": "pytorch", "sharding": "hsdp", "hsdp_shard_size": 8}, 2, 8),
        ({"framework": "pytorch", "sharding": "zero3", "tp": 2, "cp": 2, "offload": "optimizer+params"}, 1, 4),
        ({"framework": "pytorch", "sharding": "none", "num_nodes": 1, "activation_checkpointing": "selective"}, 8, 1),
    ],
)
def test_torchrun_fsdp2_command_parses(layout_fields: dict[str, Any], replicate: int, shard: int) -> None:
    layout = _layout(**layout_fields)
    argv = torchrun_argv(layout, FULL, ARCH)
    args = _torchrun(argv)
    assert int(args.nproc_per_node) == layout.gpus_per_node and args.nnodes == str(layout.num_nodes)
    assert args.module and args.training_script == "torchtitan.train"
    titan = vars(_titan_parser().parse_args(args.training_script_args))
    assert titan["parallelism.data_parallel_replicate_degree"] == replicate
    assert titan["parallelism.data_parallel_shard_degree"] == shard
    degrees = replicate * shard * titan["parallelism.tensor_parallel_degree"] * titan[
        "parallelism.context_parallel_degree"]
    assert degrees == layout.world_size
    assert titan["training.global_batch_size"] == layout.global_batch_size
    assert titan["training.enable_cpu_offload"] == (layout.offload != "none")
    assert titan["activation_checkpoint.mode"] == layout.activation_checkpointing


@pytest.mark.parametrize(("framework", "sharding", "script"),
                         [("deepspeed", "zero2", "train.py"), ("megatron", "zero1", "pretrain_gpt.py")])
def test_torchrun_launches_other_frameworks(framework: str, sharding: str, script: str) -> None:
    args = _torchrun(torchrun_argv(_layout(framework=framework, sharding=sharding), FULL, ARCH))
    assert args.training_script == script and args.rdzv_backend == "c10d"


# ------------------------------------------------------------------------------------------------ Megatron
# megatron/training/arguments.py (commit 000c4ac2): the arguments the export uses
MEGATRON_INT = ["tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
                "expert-model-parallel-size", "num-layers-per-virtual-pipeline-stage", "micro-batch-size",
                "global-batch-size", "recompute-num-layers", "num-layers", "hidden-size", "ffn-hidden-size",
                "num-attention-heads", "num-query-groups", "kv-channels", "seq-length", "max-position-embeddings",
                "num-experts", "moe-router-topk", "moe-ffn-hidden-size"]
MEGATRON_FLAGS = ["sequence-parallel", "use-distributed-optimizer", "overlap-grad-reduce", "overlap-param-gather",
                  "group-query-attention", "swiglu", "untie-embeddings-and-output-weights", "disable-bias-linear",
                  "add-qkv-bias", "bf16", "tp-comm-overlap", "account-for-embedding-in-pipeline-split",
                  "account-for-loss-in-pipeline-split"]
MEGATRON_CHOICES = {"recompute-granularity": ["full", "selective"], "recompute-method": ["uniform", "block"],
                    "normalization": ["LayerNorm", "RMSNorm"],
                    "position-embedding-type": ["learned_absolute", "rope", "mrope", "relative", "none"],
                    "fp8-format": ["e4m3", "hybrid"], "attention-backend": ["flash", "fused", "unfused", "local",
                                                                            "auto"]}


def _megatron(args: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for name in MEGATRON_INT:
        p.add_argument(f"--{name}", type=int)
    for name in MEGATRON_FLAGS:
        p.add_argument(f"--{name}", action="store_true")
    for name, choices in MEGATRON_CHOICES.items():
        p.add_argument(f"--{name}", choices=choices)
    return p.parse_args(args)


@pytest.mark.parametrize(
    ("layout_fields", "model", "recompute"),
    [
        ({"tp": 4, "pp": 2, "virtual_stages": 5, "sequence_parallel": True}, "llama-3.1-70b", "full"),
        ({"tp": 2, "pp": 1, "cp": 2, "sequence_parallel": True, "activation_checkpointing": "selective"},
         "qwen2.5-72b", "selective"),
        ({"tp": 1, "pp": 4, "ep": 8, "activation_checkpointing": "none"}, "mixtral-8x7b", None),
    ],
)
def test_megatron_args_parse(layout_fields: dict[str, Any], model: str, recompute: str | None) -> None:
    arch = preset(model)
    layout = _layout(framework="megatron", sharding="zero1", **layout_fields)
    args = megatron_args(layout, FULL, arch)
    assert args is not None
    ns = _megatron(args)
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size) == (
        layout.tp, layout.pp, layout.cp)
    assert (ns.micro_batch_size, ns.global_batch_size) == (layout.micro_batch_size, layout.global_batch_size)
    assert ns.sequence_parallel == layout.sequence_parallel and ns.use_distributed_optimizer
    assert ns.tp_comm_overlap == layout.sequence_parallel  # the overlap the step time assumes
    assert ns.recompute_granularity == recompute
    if layout.virtual_stages > 1:
        assert ns.num_layers_per_virtual_pipeline_stage * layout.pp * layout.virtual_stages == arch.num_layers
    assert (ns.expert_model_parallel_size or 1) == layout.ep
    assert ns.num_layers == arch.num_layers and ns.bf16


# -------------------------------------------------------------------------------------------------- NCCL
# NCCL user guide, "Environment Variables" (names this export may use)
NCCL_NAMES = {"NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_DISABLE",
              "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "NCCL_CROSS_NIC",
              "NCCL_MIN_NCHANNELS", "CUDA_DEVICE_MAX_CONNECTIONS"}


@pytest.mark.parametrize(
    ("server", "nodes", "framework", "present", "absent"),
    [
        ("dell-xe9680-h100", 2, "megatron", {"NCCL_NVLS_ENABLE", "NCCL_IB_HCA", "NCCL_CROSS_NIC",
                                             "NCCL_MIN_NCHANNELS", "CUDA_DEVICE_MAX_CONNECTIONS"},
         {"NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX"}),
        ("dell-xe9680-h100", 1, "pytorch", {"NCCL_NVLS_ENABLE"}, {"NCCL_IB_HCA", "NCCL_P2P_DISABLE"}),
        ("dell-xe9680-a100", 2, "pytorch", {"NCCL_IB_HCA"}, {"NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE"}),
        ("cisco-ucs-c885a-m8-h200", 2, "pytorch", {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX"}, {"NCCL_IB_DISABLE"}),
        ("dell-r760xa-h100-nvl", 2, "pytorch", {"NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME"}, {"NCCL_IB_HCA"}),
        ("dell-r760xa-l40s", 1, "pytorch", {"NCCL_P2P_DISABLE"}, {"NCCL_NVLS_ENABLE"}),
    ],
)
def test_nccl_environment_follows_the_topology(server: str, nodes: int, framework: str, present: set[str],
                                               absent: set[str]) -> None:
    s = CATALOG.servers[server]
    megatron = framework == "megatron"
    layout = _layout(server=server, gpu=s.gpu_id, gpus_per_node=s.gpu_count, num_nodes=nodes, framework=framework,
                     sharding="zero1", tp=2 if megatron else 1, sequence_parallel=megatron)
    env = environment(layout, CATALOG.gpus[s.gpu_id], s)
    names = {e.name for e in env}
    assert present <= names and not absent & names
    assert names <= NCCL_NAMES and all(e.reason for e in env)
    for e in env:
        if e.name == "NCCL_P2P_DISABLE":
            assert e.when != "always", "P2P is disabled only where peer-to-peer is unavailable"


def test_single_gpu_needs_no_nccl() -> None:
    layout = _layout(num_nodes=1, gpus_per_node=1, server=None)
    assert environment(layout, CATALOG.gpus["h100-sxm5-80gb"], None) == []


def test_build_exports_is_json_serialisable() -> None:
    layout = _layout()
    exports = build_exports(layout, FULL, ARCH, CATALOG.gpus[layout.gpu], CATALOG.servers[layout.server or ""])
    again = type(exports).model_validate_json(exports.model_dump_json())
    assert again == exports and exports.torchrun.startswith("torchrun ")
    assert yaml.safe_load(exports.accelerate_config_yaml or "") == exports.accelerate_config
