"""Bring your own config (issue 30): the vendored example configs of each project (tests/data/configs/, repository,
path and commit in SOURCES) read into the request their settings describe, the report naming what capplan does not
represent; multi-file runs; the formats' own parsers agree; capplan's exports import back to the same request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.imports import ImportProblem, SourceFile, detect, import_files
from app.imports.core import accepts
from app.imports.models import hf_cache_config, preset_for
from estimator.request import Training

DATA = Path(__file__).parent / "data" / "configs"
SOURCES = [line.split("\t") for line in (DATA / "SOURCES").read_text().splitlines() if not line.startswith("#")]
FILES = sorted(p for p in DATA.glob("*/*") if p.is_file())


def _read(*names: str, **formats: str) -> Any:
    return import_files([SourceFile(n, (DATA / n).read_text(), formats.get(Path(n).stem)) for n in names])


def _field(request: Any, path: str) -> Any:
    value = request.model_dump(mode="json")
    for part in path.split("."):
        value = value[part]
    return value


def test_sources_name_every_vendored_file_with_its_commit() -> None:
    listed = {row[0] for row in SOURCES}
    assert listed == {str(p.relative_to(DATA)) for p in FILES}
    for row in SOURCES:
        assert len(row) == 4 and "/" in row[1] and len(row[3]) == 40, row
    per_format: dict[str, int] = {}
    for p in FILES:
        per_format[p.parent.name] = per_format.get(p.parent.name, 0) + 1
    assert all(n >= 10 for n in per_format.values()), per_format
    assert set(per_format) == {"axolotl", "llama-factory", "trainer", "torchtune", "deepspeed", "accelerate",
                               "torchtitan", "megatron"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_vendored_config_imports(path: Path) -> None:
    """Each example reads into a valid request; what it sets is in the report with the key that set it; every key
    is accounted for (read, not represented, no effect, unrecognised)."""
    name = str(path.relative_to(DATA))
    result = import_files([SourceFile(name, path.read_text())])
    report = result.report.as_dict()
    assert report["files"][0]["name"] == name
    fields = {r["field"] for r in report["read"]}
    request = result.as_dict()["request"]
    set_fields = {f"{section}.{k}" for section, v in request.items() if section != "model" for k in v} | (
        {"model"} if "model" in request else set())
    filled = {d["field"] for d in report["defaults"]}
    assert set_fields <= fields | filled, set_fields - fields - filled
    if "model" not in result.as_dict()["request"]:
        assert any(n.startswith("model:") for n in report["needs"])


#: (file, {request field: value}, keys the report must list as not represented)
EXPECTED: list[tuple[str, dict[str, Any], set[str]]] = [
    ("axolotl/fft-8b.yaml", {"model": "llama-3.1-8b", "training.method": "full", "training.seq_len": 8192,
                             "training.micro_batch_size": 1, "training.gradient_accumulation_steps": 8,
                             "training.optimizer": "paged-adamw-8bit", "training.activation_checkpointing": "full",
                             "training.precision": "bf16-true", "parallelism.sharding": "none"},
     {"sample_packing"}),
    ("axolotl/qlora-1b.yml", {"model": "llama-3.2-1b", "training.method": "qlora", "training.lora_rank": 32,
                              "training.lora_targets": "all-linear", "training.lora_dropout": 0.05,
                              "training.seq_len": 2048, "training.micro_batch_size": 2,
                              "training.optimizer": "adamw-8bit", "training.attention": "flash"}, {"sample_packing"}),
    ("axolotl/fft-8b-liger-fsdp.yaml", {"model": "llama-3.1-8b", "parallelism.sharding": "fsdp",
                                        "parallelism.framework": "pytorch", "parallelism.offload": "optimizer+params",
                                        "training.optimizer_impl": "fused", "training.micro_batch_size": 2,
                                        "training.gradient_accumulation_steps": 4, "training.fused_kernels": "liger",
                                        "training.loss_kernel": "fused"},
     set()),
    ("axolotl/qlora-fsdp-70b.yaml", {"model": "llama-3.1-70b", "training.method": "qlora", "training.lora_rank": 8,
                                     "training.seq_len": 512, "parallelism.sharding": "fsdp",
                                     "parallelism.offload": "optimizer+params"}, set()),
    ("axolotl/mixtral-qlora-fsdp.yml", {"model": "mixtral-8x7b", "training.method": "qlora",
                                        "training.seq_len": 1024, "parallelism.sharding": "fsdp"}, set()),
    ("axolotl/llama-3_1-8b-hsdp-tp.yaml", {"parallelism.sharding": "hsdp", "parallelism.hsdp_shard_size": 4,
                                           "parallelism.tp": 2, "hardware.num_nodes": 2,
                                           "hardware.gpus_per_node": 8}, {"sample_packing"}),
    ("axolotl/llama3-8b-deepspeed-alst.yaml", {"parallelism.framework": "deepspeed", "parallelism.cp": 8,
                                               "training.seq_len": 500_000}, {"tiled_mlp"}),
    ("axolotl/lora.yml", {"model": "mistral-7b", "training.method": "lora"}, {"load_in_8bit"}),
    ("llama-factory/qwen3_lora_sft.yaml", {"training.method": "lora", "training.lora_rank": 8,
                                           "training.lora_targets": "all-linear", "training.seq_len": 2048,
                                           "training.micro_batch_size": 1, "training.gradient_accumulation_steps": 8,
                                           "training.activation_checkpointing": "full",
                                           "training.precision": "bf16-mixed"}, set()),
    ("llama-factory/qwen3_lora_sft_otfq.yaml", {"training.method": "qlora"}, set()),
    ("llama-factory/llama3_freeze_sft.yaml", {"training.method": "full"}, {"finetuning_type"}),
    ("trainer/alignment-handbook__recipes__zephyr-7b-beta__sft__config_full.yaml",
     {"model": "mistral-7b", "training.micro_batch_size": 16, "training.seq_len": 2048,
      "training.activation_checkpointing": "full", "training.precision": "bf16-true", "training.method": "full"},
     set()),
    ("trainer/alignment-handbook__recipes__zephyr-7b-beta__sft__config_qlora.yaml",
     {"model": "mistral-7b", "training.method": "qlora"}, set()),
    ("trainer/open-r1__recipes__OlympicCoder-32B__sft__config_v00.00.yaml",
     {"training.optimizer": "paged-adamw-8bit", "training.seq_len": 22528}, set()),
    ("trainer/trl__examples__cli_configs__example_config.yaml", {"training.seq_len": 1024,
                                                                 "training.micro_batch_size": 8}, set()),
    ("torchtune/8B_lora.yaml", {"model": "llama-3.1-8b", "training.method": "lora", "training.lora_rank": 8,
                                "training.micro_batch_size": 2, "training.gradient_accumulation_steps": 8,
                                "training.precision": "bf16-true", "training.optimizer_impl": "fused",
                                "parallelism.sharding": "fsdp", "training.loss_kernel": "chunked"},
     {"model.lora_attn_modules"}),
    ("torchtune/70B_full.yaml", {"model": "llama-3.1-70b", "training.method": "full",
                                 "training.activation_checkpointing": "full",
                                 "parallelism.offload": "optimizer+params"}, set()),
    ("torchtune/8B_qlora_single_device.yaml", {"training.method": "qlora", "hardware.gpus_per_node": 1}, set()),
    ("torchtune/8B_full_single_device.yaml", {"training.optimizer": "paged-adamw-8bit", "hardware.gpus_per_node": 1},
     {"optimizer_in_bwd"}),
    ("deepspeed/ds_config_z3.json", {"parallelism.framework": "deepspeed", "parallelism.sharding": "zero3",
                                     "training.precision": "fp32"}, set()),
    ("deepspeed/ds_config_fp16_z2.json", {"parallelism.sharding": "zero2", "training.precision": "bf16-mixed"},
     {"fp16.enabled"}),
    ("accelerate/accelerate__examples__config_yaml_templates__multi_node.yaml",
     {"hardware.num_nodes": 2, "hardware.gpus_per_node": 4, "parallelism.sharding": "none"}, set()),
    ("accelerate/llamafactory__examples__accelerate__fsdp_config_offload.yaml",
     {"parallelism.sharding": "fsdp", "parallelism.offload": "optimizer+params", "hardware.gpus_per_node": 2},
     set()),
    ("accelerate/trl__examples__accelerate_configs__fsdp1.yaml", {"parallelism.sharding": "fsdp"}, set()),
    ("accelerate/trl__examples__accelerate_configs__context_parallel_2gpu.yaml", {"parallelism.cp": 2}, set()),
    ("accelerate/trl__examples__accelerate_configs__deepspeed_zero3.yaml",
     {"parallelism.framework": "deepspeed", "parallelism.sharding": "zero3"}, set()),
    ("torchtitan/llama3_8b.toml", {"model": "llama-3.1-8b", "training.seq_len": 8192,
                                   "training.micro_batch_size": 1, "training.activation_checkpointing": "selective",
                                   "parallelism.sharding": "fsdp", "parallelism.framework": "pytorch"}, set()),
    ("torchtitan/llama3_405b.toml", {"model": "llama-3.1-405b", "training.precision": "fp8-mixed",
                                     "parallelism.tp": 8}, {"compile.enable"}),
    ("torchtitan/deepseek_v3_671b.toml", {"model": "deepseek-v3"}, {"compile.enable"}),
    ("megatron/gpt3__train_gpt3_175b_distributed.sh",
     {"model": "gpt-3-175b", "parallelism.tp": 8, "parallelism.pp": 16, "training.seq_len": 2048,
      "training.micro_batch_size": 1, "parallelism.framework": "megatron", "hardware.num_nodes": 16,
      "training.gradient_accumulation_steps": 1536}, {"--fp16"}),
    ("megatron/llama__train_llama3_8b_h100_fp8.sh",
     {"model": "llama-3.1-8b", "training.precision": "fp8-mixed", "training.seq_len": 8192,
      "training.gradient_accumulation_steps": 16, "parallelism.sequence_parallel": True,
      "parallelism.sharding": "zero1", "training.loss_kernel": "fused"}, set()),
    ("megatron/mixtral__train_mixtral_8x7b_distributed.sh",
     {"model": "mixtral-8x7b", "parallelism.pp": 4, "parallelism.ep": 8}, set()),
    ("megatron/megatron_fsdp__train_llama3_8b_fsdp_h100_fp8.sh", {"parallelism.sharding": "fsdp"}, set()),
    ("megatron/post_training__modelopt__conf__Qwen__Qwen3-8B.sh",
     {"model.num_layers": 36, "model.num_kv_heads": 8, "model.qk_norm": True, "model.gated_mlp": True}, set()),
]


@pytest.mark.parametrize(("name", "fields", "unrepresented"), EXPECTED, ids=[e[0] for e in EXPECTED])
def test_the_request_read_from_each_example(name: str, fields: dict[str, Any], unrepresented: set[str]) -> None:
    result = _read(name)
    for path, value in fields.items():
        assert _field(result.request, path) == value, path
    listed = {r["key"] for r in result.report.not_represented}
    assert unrepresented <= listed, unrepresented - listed


def test_stack_keys_name_the_field_they_will_map_to() -> None:
    """Liger / Cut Cross-Entropy / offloading / paged optimizers: not represented until the stacks fields exist,
    each with the field it maps to; once the request accepts the value, the same call sets it."""
    result = _read("axolotl/fft-8b-liger-fsdp.yaml")
    maps = {r["key"]: r["maps_to"] for r in result.report.not_represented}
    for key, field in (("liger_fused_linear_cross_entropy", "training.loss_kernel"),
                       ("liger_rms_norm", "training.fused_kernels")):
        if accepts(field, "fused" if "loss" in field else "liger"):
            assert key not in maps
        else:
            assert maps[key].startswith(field)
    assert accepts("training.optimizer", "adamw-8bit") and not accepts("training.optimizer", "no-such")
    assert accepts("training.loss_kernel", "fused") == ("loss_kernel" in Training.model_fields)


# ------------------------------------------------------------------------------------------- several files
def test_axolotl_with_the_deepspeed_config_it_names() -> None:
    result = _read("axolotl/llama3-8b-deepspeed-alst.yaml", "axolotl/zero3_bf16_cpuoffload_all.json")
    assert (_field(result.request, "parallelism.sharding"), _field(result.request, "parallelism.offload")) == (
        "zero3", "optimizer+params")
    assert not any("DeepSpeed config" in n for n in result.report.needs)
    # "auto" micro-batch and accumulation come from axolotl's keys
    assert _field(result.request, "training.micro_batch_size") == 1
    assert _field(result.request, "training.precision") == "bf16-mixed"  # DeepSpeed keeps fp32 masters


def test_llama_factory_with_its_deepspeed_auto_config() -> None:
    alone = _read("llama-factory/qwen3_lora_sft_ds3.yaml")
    assert any("ds_z3_config.json" in n for n in alone.report.needs)
    both = _read("llama-factory/qwen3_lora_sft_ds3.yaml", "llama-factory/ds_z3_config.json")
    assert _field(both.request, "parallelism.sharding") == "zero3"
    assert _field(both.request, "training.gradient_accumulation_steps") == 2
    autos = [r for r in both.report.read if r["value"] == "auto"]
    assert {r["field"] for r in autos} >= {"training.micro_batch_size", "training.gradient_accumulation_steps"}


def test_a_deepspeed_value_that_contradicts_the_trainer_is_refused() -> None:
    """transformers' HfTrainerDeepSpeedConfig refuses the same mismatch (trainer_config_finalize)."""
    trainer = "per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\ndeepspeed: ds.json\n"
    ds = json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})
    with pytest.raises(ImportProblem) as exc:
        import_files([SourceFile("args.yaml", trainer), SourceFile("ds.json", ds)])
    assert exc.value.file == "ds.json" and exc.value.key == "train_micro_batch_size_per_gpu"
    assert "args.yaml: per_device_train_batch_size" in exc.value.message


def test_a_config_json_supplies_an_unknown_model(tmp_path: Path) -> None:
    cfg = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 2560,
           "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
           "intermediate_size": 9728, "vocab_size": 151936, "tie_word_embeddings": True}
    files = [SourceFile("qwen3_lora_sft.yaml", (DATA / "llama-factory/qwen3_lora_sft.yaml").read_text()),
             SourceFile("config.json", json.dumps(cfg))]
    result = import_files(files)
    assert result.request.model.hf_config["num_hidden_layers"] == 36  # type: ignore[union-attr]
    assert not result.report.needs


def test_hub_ids_resolve_to_presets_or_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert preset_for("meta-llama/Llama-3.1-8B") == "llama-3.1-8b"
    assert preset_for("NousResearch/Meta-Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert preset_for("mistralai/Mixtral-8x7B-Instruct-v0.1") == "mixtral-8x7b"
    assert preset_for("mistralai/Mistral-7B-v0.3") is None  # a different vocabulary: not mistral-7b's shape
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert hf_cache_config("acme/tiny") is None
    snap = tmp_path / "models--acme--tiny" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (tmp_path / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "models--acme--tiny" / "refs" / "main").write_text("a" * 40)
    (snap / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4,
                                                  "num_attention_heads": 8, "intermediate_size": 1024,
                                                  "vocab_size": 32000}))
    result = import_files([SourceFile("a.yaml", "base_model: acme/tiny\nadapter: lora\n")])
    assert result.request.model.hf_config["num_hidden_layers"] == 4  # type: ignore[union-attr]
    assert hf_cache_config("../etc/passwd") is None


@pytest.mark.parametrize(("text", "key"), [
    ("base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: two\n", "micro_batch_size"),
    ("base_model: meta-llama/Llama-3.1-8B\nsequence_len: 0\n", "sequence_len"),
    ("base_model: meta-llama/Llama-3.1-8B\nbf16: maybe\n", "bf16"),
    ('{"zero_optimization": {"stage": 5}}', "zero_optimization.stage"),
    ('{"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4}', "train_batch_size"),
    ("distributed_type: FSDP\nnum_processes: 3\nnum_machines: 2\n", "num_processes"),
    ("[model]\nname = 'llama3'\nflavor = '8B'\n[training]\nseq_len = 'long'\n", "training.seq_len"),
    ("torchrun --nproc-per-node 8 pretrain_gpt.py --recompute-granularity half --num-layers 2",
     "--recompute-granularity"),
])
def test_bad_values_name_their_key(text: str, key: str) -> None:
    with pytest.raises(ImportProblem) as exc:
        import_files([SourceFile("f", text)])
    assert exc.value.key == key, str(exc.value)


def test_nemo_overrides_read_as_the_megatron_flags_they_set() -> None:
    line = ("python megatron_gpt_finetuning.py trainer.devices=8 trainer.num_nodes=2 trainer.precision=bf16-mixed "
            "model.tensor_model_parallel_size=4 model.pipeline_model_parallel_size=2 model.sequence_parallel=True "
            "model.micro_batch_size=1 model.global_batch_size=128 model.encoder_seq_length=4096 "
            "model.peft.peft_scheme=lora model.peft.lora_tuning.adapter_dim=32 "
            "model.restore_from_path=meta-llama/Llama-3.1-70B model.activations_checkpoint_granularity=selective")
    req = import_files([SourceFile("nemo.sh", line)]).request
    assert (req.model, req.training.method, req.training.lora_rank, req.training.lora_targets) == (
        "llama-3.1-70b", "lora", 32, "qkv")
    assert (req.parallelism.tp, req.parallelism.pp, req.parallelism.sequence_parallel) == (4, 2, True)
    # 16 GPUs / (TP 4 x PP 2) = DP 2: 128 / (1 x 2) = 64 micro-batches
    assert (req.hardware.num_nodes, req.hardware.gpus_per_node, req.training.gradient_accumulation_steps) == (2, 8, 64)
    assert req.training.activation_checkpointing == "selective" and req.parallelism.framework == "megatron"


def test_format_detection() -> None:
    for name, fmt in (("axolotl/lora.yml", "axolotl"), ("llama-factory/qwen3_lora_sft.yaml", "llama-factory"),
                      ("torchtune/8B_lora.yaml", "torchtune"), ("deepspeed/ds_config_z2.json", "deepspeed"),
                      ("accelerate/accelerate__examples__config_yaml_templates__fsdp.yaml", "accelerate"),
                      ("torchtitan/llama3_8b.toml", "torchtitan"),
                      ("megatron/gpt3__train_gpt3_175b_distributed.sh", "megatron"),
                      ("trainer/trl__examples__cli_configs__example_config.yaml", "trainer")):
        assert detect(SourceFile(name, (DATA / name).read_text())) == fmt
    with pytest.raises(ImportProblem, match="cannot tell"):
        import_files([SourceFile("x.yaml", "foo: 1\nbar: 2\n")])
