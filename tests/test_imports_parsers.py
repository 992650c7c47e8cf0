"""capplan reads each format the way the format's own parser does (DeepSpeed's config class, transformers'
DeepSpeed integration and TrainingArguments, accelerate's config loader), and every config capplan exports imports
back to the request it was made from."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import yaml

from app.imports import SourceFile, import_files
from estimator.model.spec import preset
from estimator.planner.contract import PlanLayout
from estimator.planner.exports.launch import accelerate_config, deepspeed_config, torchrun_argv
from estimator.request import Training

DATA = Path(__file__).parent / "data" / "configs"
ZERO = ["none", "zero1", "zero2", "zero3"]


class _Mpu:
    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def _deepspeed(cfg: dict[str, Any], dp: int) -> Any:
    import deepspeed.runtime.config as dsc

    with mock.patch.object(dsc.dist, "get_rank", return_value=0):
        return dsc.DeepSpeedConfig(cfg, mpu=_Mpu(dp))


def test_deepspeed_refuses_what_capplan_reports_as_not_represented() -> None:
    """DeepSpeed's own class refuses the removed sparse-attention block; capplan reads the rest and names it."""
    import deepspeed.runtime.config as dsc

    path = DATA / "deepspeed/deepspeed_bsz64k_lamb_config_seq128.json"
    with pytest.raises(dsc.DeepSpeedConfigError, match=r"Sparse Attention"):
        _deepspeed(json.loads(path.read_text()), 1024)
    report = import_files([SourceFile(path.name, path.read_text())]).report
    assert "sparse_attention" in {r["key"] for r in report.not_represented}


def _plain_ds() -> list[Path]:
    files = [*sorted((DATA / "deepspeed").glob("*.json")), DATA / "axolotl/zero3_bf16_cpuoffload_all.json"]
    return [p for p in files if '"auto"' not in p.read_text() and "sparse_attention" not in p.read_text()]


@pytest.mark.parametrize("path", _plain_ds(), ids=lambda p: p.name)
def test_deepspeed_json_as_deepspeed_reads_it(path: Path) -> None:
    cfg = json.loads(path.read_text())
    req = import_files([SourceFile(path.name, path.read_text())]).request
    dp = req.hardware.num_nodes * req.hardware.gpus_per_node
    ds = _deepspeed(cfg, dp)
    assert ZERO[ds.zero_optimization_stage] == req.parallelism.sharding
    assert ds.train_micro_batch_size_per_gpu == req.training.micro_batch_size
    assert ds.gradient_accumulation_steps == req.training.gradient_accumulation_steps
    half = ds.bfloat16_config.enabled or ds.float16_config.enabled
    assert (req.training.precision == "bf16-mixed") == bool(half)
    opt = ds.zero_config.offload_optimizer
    assert (opt is not None and str(getattr(opt.device, "value", opt.device)) != "none") == (
        req.parallelism.offload != "none")


def test_deepspeed_auto_as_transformers_resolves_it() -> None:
    """transformers' HfTrainerDeepSpeedConfig.trainer_config_process fills "auto" from the trainer arguments;
    capplan reads the LLaMA-Factory YAML + DeepSpeed JSON pair to the same micro-batch, accumulation and dtype."""
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    args_doc = yaml.safe_load((DATA / "llama-factory/qwen3_lora_sft_ds3.yaml").read_text())
    ds_text = (DATA / "llama-factory/ds_z3_config.json").read_text()
    result = import_files([SourceFile("qwen3_lora_sft_ds3.yaml", (DATA / "llama-factory/qwen3_lora_sft_ds3.yaml")
                                      .read_text()), SourceFile("ds_z3_config.json", ds_text)])
    req = result.request
    args = SimpleNamespace(world_size=req.hardware.num_nodes * req.hardware.gpus_per_node,
                           per_device_train_batch_size=args_doc["per_device_train_batch_size"],
                           gradient_accumulation_steps=args_doc["gradient_accumulation_steps"], max_grad_norm=1.0,
                           learning_rate=1e-4, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0,
                           save_on_each_node=False, fp16=False, fp16_full_eval=False, bf16=args_doc["bf16"],
                           bf16_full_eval=False)
    hf = HfTrainerDeepSpeedConfig(json.loads(ds_text))
    hf.trainer_config_process(args)
    assert hf.get_value("train_micro_batch_size_per_gpu") == req.training.micro_batch_size
    assert hf.get_value("gradient_accumulation_steps") == req.training.gradient_accumulation_steps
    assert hf.is_true("bf16.enabled") == (req.training.precision == "bf16-mixed")
    assert ZERO[hf.get_value("zero_optimization.stage")] == req.parallelism.sharding


def _trainer_files() -> list[Path]:
    return sorted((DATA / "trainer").glob("*.yaml"))


@pytest.mark.parametrize("path", _trainer_files(), ids=lambda p: p.name)
# transformers 5.24 renames `gradient_checkpointing` (real configs still use it) with a FutureWarning
@pytest.mark.filterwarnings("ignore:`gradient_checkpointing.*` is deprecated:FutureWarning")
def test_trainer_yaml_as_training_arguments_reads_it(path: Path) -> None:
    from transformers import HfArgumentParser, TrainingArguments

    doc = yaml.safe_load(path.read_text())
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    # bf16/fp16 need a GPU to construct; the hub keys a token; output_dir is required
    kept = {k: v for k, v in doc.items() if k in names and k not in ("bf16", "fp16", "tf32", "push_to_hub",
                                                                      "hub_model_id", "hub_strategy", "report_to")}
    kept.setdefault("output_dir", "/tmp/out")
    (args,) = HfArgumentParser(TrainingArguments).parse_dict({**kept, "report_to": "none"}, allow_extra_keys=True)
    req = import_files([SourceFile(path.name, path.read_text())]).request
    assert args.per_device_train_batch_size == req.training.micro_batch_size
    assert args.gradient_accumulation_steps == req.training.gradient_accumulation_steps
    assert bool(args.gradient_checkpointing) == (req.training.activation_checkpointing == "full")
    optim = str(getattr(args.optim, "value", args.optim))
    expected = {"adamw_torch_fused": ("adamw", "fused"), "adamw_torch": ("adamw", "foreach"),
                "adamw_8bit": ("adamw-8bit", None), "adamw_bnb_8bit": ("adamw-8bit", None),
                "paged_adamw_8bit": ("adamw-8bit", None)}[optim]  # paged: nearest until the stacks field exists
    assert req.training.optimizer == expected[0]
    if expected[1] is not None:
        assert req.training.optimizer_impl == expected[1]


def _accelerate_files() -> list[Path]:
    return sorted((DATA / "accelerate").glob("*.yaml"))


@pytest.mark.parametrize("path", _accelerate_files(), ids=lambda p: p.name)
def test_accelerate_yaml_as_accelerate_reads_it(path: Path) -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(path))
    req = import_files([SourceFile(path.name, path.read_text())]).request
    kind = str(getattr(cfg.distributed_type, "value", cfg.distributed_type))
    assert {"FSDP": "pytorch", "MULTI_GPU": "pytorch", "NO": "pytorch", "DEEPSPEED": "deepspeed"}[kind] == \
        req.parallelism.framework
    if cfg.num_processes and cfg.num_processes > 0:
        assert cfg.num_processes == req.hardware.num_nodes * req.hardware.gpus_per_node
        assert cfg.num_machines == req.hardware.num_nodes
    mixed = str(getattr(cfg.mixed_precision, "value", cfg.mixed_precision))
    if mixed in ("bf16", "fp16", "fp8"):
        assert {"bf16": "bf16-mixed", "fp16": "bf16-mixed", "fp8": "fp8-mixed"}[mixed] == req.training.precision
    fsdp = cfg.fsdp_config or {}
    if kind == "FSDP":
        assert (req.parallelism.offload == "optimizer+params") == bool(fsdp.get("fsdp_offload_params"))
        assert req.parallelism.sharding in ("fsdp", "hsdp", "zero2")
    if kind == "DEEPSPEED" and cfg.deepspeed_config.get("zero_stage") is not None:
        assert ZERO[int(cfg.deepspeed_config["zero_stage"])] == req.parallelism.sharding


# ----------------------------------------------------------------------------------------------- round trip
def _layout(**kw: Any) -> PlanLayout:
    base: dict[str, Any] = dict(gpu="h100-sxm5-80gb", server=None, num_nodes=2, gpus_per_node=8, world_size=16,
                                framework="deepspeed", sharding="zero3", offload="none", dp=16, tp=1, pp=1,
                                virtual_stages=1, cp=1, ep=1, sequence_parallel=False, hsdp_shard_size=None,
                                activation_checkpointing="full", micro_batch_size=2, gradient_accumulation_steps=8,
                                global_batch_size=256, seq_len=4096)
    base.update(kw)
    base["world_size"] = base["num_nodes"] * base["gpus_per_node"]
    base["dp"] = base["world_size"] // (base["tp"] * base["pp"] * base["cp"])
    base["global_batch_size"] = base["dp"] * base["micro_batch_size"] * base["gradient_accumulation_steps"]
    return PlanLayout(**base)


ROUND_TRIPS = [
    dict(framework="deepspeed", sharding="zero3", offload="optimizer+params"),
    dict(framework="deepspeed", sharding="zero2", offload="optimizer", num_nodes=1, micro_batch_size=4),
    dict(framework="deepspeed", sharding="zero1", gradient_accumulation_steps=1),
    dict(framework="pytorch", sharding="fsdp", activation_checkpointing="selective"),
    dict(framework="pytorch", sharding="fsdp", offload="optimizer+params", num_nodes=1),
    dict(framework="pytorch", sharding="hsdp", hsdp_shard_size=8, num_nodes=4, activation_checkpointing="none"),
    dict(framework="pytorch", sharding="fsdp", tp=2, num_nodes=1),
    dict(framework="pytorch", sharding="none", num_nodes=1, activation_checkpointing="none"),
    dict(framework="megatron", sharding="zero1", tp=4, pp=2, num_nodes=4, sequence_parallel=True),
    dict(framework="megatron", sharding="zero1", tp=2, pp=4, virtual_stages=2, num_nodes=4,
         activation_checkpointing="selective"),
    dict(framework="megatron", sharding="zero1", tp=8, cp=2, num_nodes=2, sequence_parallel=True,
         activation_checkpointing="none", seq_len=16384),
]


@pytest.mark.parametrize("fields", ROUND_TRIPS, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_every_export_imports_back_to_its_request(fields: dict[str, Any]) -> None:
    layout = _layout(**fields)
    training = Training(precision="bf16-mixed", seq_len=layout.seq_len, micro_batch_size=layout.micro_batch_size,
                        gradient_accumulation_steps=layout.gradient_accumulation_steps,
                        activation_checkpointing=layout.activation_checkpointing,  # type: ignore[arg-type]
                        virtual_stages=layout.virtual_stages,
                        pipeline_schedule="interleaved" if layout.virtual_stages > 1 else "1f1b")
    arch = preset("llama-3.1-405b")  # a shape no other preset has (llama-2-70b is llama-3.1-70b's but the vocab)
    files = [SourceFile("launch.sh", shlex.join(torchrun_argv(layout, training, arch)))]
    ds = deepspeed_config(layout, training)
    if ds is not None:
        files.append(SourceFile("ds_config.json", json.dumps(ds)))
    acc = accelerate_config(layout, training)
    if acc is not None:
        files.append(SourceFile("accelerate.yaml", yaml.safe_dump(acc, sort_keys=False)))
    got = import_files(files).request
    expect: dict[str, Any] = {
        "parallelism.framework": layout.framework, "parallelism.sharding": layout.sharding,
        "parallelism.offload": layout.offload, "parallelism.tp": layout.tp, "parallelism.pp": layout.pp,
        "parallelism.cp": layout.cp, "parallelism.sequence_parallel": layout.sequence_parallel,
        "parallelism.hsdp_shard_size": layout.hsdp_shard_size,
        "hardware.num_nodes": layout.num_nodes, "hardware.gpus_per_node": layout.gpus_per_node,
        "training.micro_batch_size": layout.micro_batch_size,
        "training.gradient_accumulation_steps": layout.gradient_accumulation_steps,
        "training.precision": training.precision}
    if layout.framework != "deepspeed":  # the DeepSpeed launch leaves checkpointing to the script (a note says so)
        expect["training.activation_checkpointing"] = layout.activation_checkpointing
    if layout.framework != "deepspeed":
        expect["training.seq_len"] = layout.seq_len
    if layout.framework == "megatron":
        expect.update({"model": "llama-3.1-405b", "training.virtual_stages": layout.virtual_stages})
    dumped = got.model_dump(mode="json")
    for path, value in expect.items():
        node: Any = dumped
        for part in path.split("."):
            node = node[part]
        assert node == value, (path, node, value)
