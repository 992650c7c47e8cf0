"""The request guard: ~2,700 deterministic requests through the public estimator entry points, one canonical
JSON line each, so that a refactor ("no behaviour change") can be checked byte for byte.

The requests are estimates (every preset; full / LoRA / QLoRA; every precision, optimizer and implementation;
PyTorch / DeepSpeed / Megatron; ZeRO / FSDP / HSDP, TP / PP / CP / EP / SP, offload; sequence lengths up to
ones that do not fit; several GPUs, servers and node counts; host sizing choices; custom and Hugging Face
shapes; requests the contract refuses), plus planner searches, reverse questions, TCO, rack, job cost and
upgrade answers. A request's line holds its index, kind, body and either its result (``model_dump`` in JSON
mode) or its error (type and message, and the field for an :class:`estimator.EstimatorError`). Lines are
written in index order whatever order the requests ran in, with sorted keys.

Run::

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.guard --out /tmp/a.jsonl
    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.guard --out /tmp/b.jsonl --shuffle   # catches memo-order bugs
    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.guard --compare /tmp/a.jsonl /tmp/b.jsonl  # exit 1 on a diff

``--only estimate,plan`` runs some kinds only (quick checks); ``--count`` prints how many requests there are;
``--compare A B --allow-added`` lists the fields B has and A has not (fields added to the contract) instead of
counting them as differences (every other byte must still match).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel, ValidationError

from estimator import EstimateRequest, EstimatorError, estimate, list_presets
from estimator.facility.rack import plan_rack_for_server
from estimator.planner.plan import PlanRequest, plan
from estimator.planner.reverse import ReverseRequest, answer
from estimator.tco import (
    JobCost,
    TcoAssumptions,
    compare_job,
    compare_upgrade,
    own_vs_cloud_or_note,
    ownership_tco,
    tco_options,
)
from hardware_catalog import load_catalog

SEED = 2703
Body = dict[str, Any]

GPUS = ["h100-sxm5-80gb", "a100-sxm4-80gb", "a100-sxm4-40gb", "h200-sxm-141gb", "b200-sxm-180gb",
        "mi300x-192gb", "l40s-48gb", "h100-pcie-80gb", "h100-nvl-94gb", "a100-pcie-40gb"]
SERVERS = ["dell-xe9680-h100", "nvidia-dgx-a100-640gb", "nvidia-dgx-h200", "nvidia-dgx-b200", "dell-xe9680-mi300x",
           "dell-r760xa-l40s", "hpe-cray-xd670-h100", "lenovo-sr675-v3-h100-nvl", "supermicro-sys-821ge-tnhr-h200",
           "nvidia-dgx-a100-320gb", "dell-xe9680-a100", "hpe-dl380a-gen11-h100-nvl"]
METHODS = ["full", "lora", "qlora"]
PRECISIONS = ["bf16-mixed", "bf16-true", "fp32", "fp8-mixed"]
OPTIMIZERS = ["adamw", "adamw-8bit", "sgd", "adafactor", "lion"]
IMPLS = ["fused", "foreach", "for-loop"]
CHECKPOINTING = ["none", "selective", "full"]
SHARDINGS = ["none", "zero1", "zero2", "zero3", "fsdp", "hsdp"]
OFFLOADS = ["none", "optimizer", "optimizer+params"]
FRAMEWORKS = ["pytorch", "deepspeed", "megatron"]
ATTENTION = ["flash", "sdpa", "eager"]
SEQ_LENS = [128, 512, 2048, 4096, 8192, 16384, 32768, 131072, 1_000_000]

CUSTOM_ARCH: Body = {"name": "tiny-custom", "num_layers": 12, "hidden_size": 1024, "num_attention_heads": 16,
                     "num_kv_heads": 4, "ffn_hidden_size": 4096, "vocab_size": 32000}
HF_CONFIG: Body = {"hf_config": {"model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048,
                                 "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
                                 "vocab_size": 128256, "tie_word_embeddings": True, "max_position_embeddings": 8192}}


# ---------------------------------------------------------------------------------------------- requests


def _grid_estimates() -> Iterator[Body]:
    """Every preset with each method, and the one-factor sweeps of each training / parallelism field."""
    presets = [p["id"] for p in list_presets()]
    for model, method in itertools.product(presets, METHODS):
        yield {"model": model, "training": {"method": method}}
    base: Body = {"model": "llama-3.1-8b", "training": {"seq_len": 2048}}
    for method, precision, optimizer in itertools.product(METHODS, PRECISIONS, OPTIMIZERS):
        yield {**base, "training": {"seq_len": 2048, "method": method, "precision": precision, "optimizer": optimizer}}
    for impl, optimizer, sharding in itertools.product(IMPLS, OPTIMIZERS, ["none", "zero2", "fsdp"]):
        yield {**base, "training": {"seq_len": 2048, "optimizer": optimizer, "optimizer_impl": impl},
               "parallelism": {"sharding": sharding}}
    for framework, sharding, offload in itertools.product(FRAMEWORKS, SHARDINGS, OFFLOADS):
        yield {"model": "llama-3.1-70b", "training": {"seq_len": 4096, "activation_checkpointing": "full"},
               "parallelism": {"framework": framework, "sharding": sharding, "offload": offload}}
    for model, seq, ckpt in itertools.product(["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b"],
                                              SEQ_LENS, CHECKPOINTING):
        yield {"model": model, "training": {"seq_len": seq, "activation_checkpointing": ckpt},
               "parallelism": {"sharding": "fsdp"}}
    for attention, seq in itertools.product(ATTENTION, [1024, 8192, 32768]):
        yield {"model": "gemma-2-9b", "training": {"seq_len": seq, "attention": attention, "method": "lora"}}
    for gpu, model in itertools.product(GPUS, ["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-32b"]):
        yield {"model": model, "training": {"method": "lora", "seq_len": 4096}, "parallelism": {"sharding": "fsdp"},
               "hardware": {"gpu": gpu}}
    catalog = load_catalog()
    for server, nodes in itertools.product(SERVERS, [1, 2, 4]):
        gpu = catalog.server(server).gpu_id
        yield {"model": "llama-3.1-70b", "training": {"activation_checkpointing": "full", "train_tokens": 1e10},
               "parallelism": {"sharding": "fsdp"}, "hardware": {"gpu": gpu, "server": server, "num_nodes": nodes}}


def _parallel_layouts() -> Iterator[Body]:
    """Megatron / PyTorch TP x PP x CP x EP layouts on 1 to 16 nodes, with schedules and virtual stages."""
    for tp, pp, cp, nodes in itertools.product([1, 2, 4, 8], [1, 2, 4], [1, 2], [1, 2, 4, 16]):
        if tp * pp * cp > 8 * nodes:
            continue
        for schedule, vs in (("1f1b", 1), ("interleaved", 2), ("gpipe", 1)):
            if pp == 1 and schedule != "1f1b":
                continue
            yield {"model": "llama-3.1-70b",
                   "training": {"seq_len": 8192, "gradient_accumulation_steps": 8, "activation_checkpointing":
                                "selective", "pipeline_schedule": schedule, "virtual_stages": vs, "train_tokens": 2e10},
                   "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": tp, "pp": pp, "cp": cp,
                                   "sequence_parallel": tp > 1},
                   "hardware": {"num_nodes": nodes}}
    for ep, sharding, nodes in itertools.product([1, 2, 4, 8], ["zero1", "fsdp", "hsdp"], [1, 2]):
        yield {"model": "mixtral-8x7b", "training": {"activation_checkpointing": "full"},
               "parallelism": {"sharding": sharding, "ep": ep}, "hardware": {"gpu": "h200-sxm-141gb",
                                                                               "num_nodes": nodes}}
    for shard, nodes in itertools.product([2, 4, 8, 16], [2, 4]):
        yield {"model": "llama-3.1-70b", "parallelism": {"sharding": "hsdp", "hsdp_shard_size": shard},
               "training": {"activation_checkpointing": "full"}, "hardware": {"num_nodes": nodes}}
    for gpn in [1, 2, 4, 8]:
        yield {"model": "llama-3.1-8b", "training": {"method": "qlora"}, "hardware": {"gpus_per_node": gpn}}
    for model in ["deepseek-v3", "mixtral-8x22b", "llama-3.1-405b"]:
        yield {"model": model, "training": {"activation_checkpointing": "full", "seq_len": 4096},
               "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 8, "pp": 8, "ep": 8,
                               "sequence_parallel": True}, "hardware": {"num_nodes": 64}}


def _host_estimates() -> Iterator[Body]:
    """Host sizing choices (checkpoints, loading, data loader, dataset, rack power)."""
    choices: list[Body] = [
        {}, {"checkpoints_kept": 1}, {"checkpoints_kept": 10}, {"checkpoint_interval_s": 600},
        {"checkpoint_max_time_share": 0.01}, {"async_checkpoint": True}, {"async_checkpoint": False},
        {"checkpoint_target": "local-nvme"}, {"checkpoint_target": "shared"}, {"model_loading": "meta"},
        {"model_loading": "every-rank"}, {"dataloader_workers": 0}, {"dataloader_workers": 16},
        {"dataset_bytes": 10**13}, {"rack_kw_budget": 15}, {"rack_kw_budget": 120},
    ]
    for host, (model, nodes) in itertools.product(choices, [("llama-3.1-8b", 1), ("llama-3.1-70b", 2)]):
        yield {"model": model, "training": {"train_tokens": 1e10, "activation_checkpointing": "full"},
               "parallelism": {"sharding": "fsdp"}, "hardware": {"server": "dell-xe9680-h100", "num_nodes": nodes},
               "host": host}


def _custom_models() -> Iterator[Body]:
    for method, seq in itertools.product(METHODS, [512, 4096]):
        yield {"model": CUSTOM_ARCH, "training": {"method": method, "seq_len": seq}, "hardware": {"gpus_per_node": 1}}
        yield {"model": HF_CONFIG, "training": {"method": method, "seq_len": seq}}
    yield {"model": {**CUSTOM_ARCH, "num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden_size": 1024},
           "parallelism": {"ep": 4}}
    yield {"model": {**CUSTOM_ARCH, "norm": "layernorm", "gated_mlp": False, "attention_bias": True,
                     "learned_position_embeddings": 2048, "tied_embeddings": True}}


def _refused() -> Iterator[Body]:
    """Bodies the contract or the estimator refuses (each must stay the same error)."""
    yield {"model": "no-such-model"}
    yield {"model": "llama-3.1-8b", "hardware": {"gpu": "no-such-gpu"}}
    yield {"model": "llama-3.1-8b", "hardware": {"server": "no-such-server"}}
    yield {"model": "llama-3.1-8b", "hardware": {"server": "dell-xe9680-h100", "gpu": "a100-sxm4-80gb"}}
    yield {"model": "llama-3.1-8b", "training": {"micro_batchsize": 2}}
    yield {"model": "llama-3.1-8b", "training": {"seq_len": 0}}
    yield {"model": "llama-3.1-8b", "training": {"seq_len": True}}
    yield {"model": "llama-3.1-8b", "training": {"precision": "fp4"}}
    yield {"model": "llama-3.1-8b", "training": {"virtual_stages": 2}}
    yield {"model": "llama-3.1-8b", "parallelism": {"tp": 3}}
    yield {"model": "llama-3.1-8b", "parallelism": {"tp": 16}}
    yield {"model": "llama-3.1-8b", "parallelism": {"pp": 64}}
    yield {"model": "llama-3.1-8b", "parallelism": {"ep": 2}}
    yield {"model": "llama-3.1-8b", "parallelism": {"cp": 3}}
    yield {"model": "llama-3.1-8b", "parallelism": {"hsdp_shard_size": 4}}
    yield {"model": "llama-3.1-8b", "parallelism": {"sharding": "hsdp", "hsdp_shard_size": 3}}
    yield {"model": "llama-3.1-8b", "parallelism": {"framework": "megatron", "sharding": "zero3"}}
    yield {"model": "llama-3.1-8b", "parallelism": {"framework": "deepspeed", "tp": 2}}
    yield {"model": "llama-3.1-8b", "parallelism": {"offload": "optimizer"}}
    yield {"model": "llama-3.1-8b", "parallelism": {"sequence_parallel": True}}
    yield {"model": "llama-3.1-8b", "training": {"method": "qlora", "precision": "fp32"}}
    yield {"model": "llama-3.1-8b", "training": {"method": "lora", "lora_rank": 0}}
    yield {"model": "llama-3.1-8b", "training": {"train_tokens": -1}}
    yield {"model": "llama-3.1-8b", "training": {"pipeline_schedule": "interleaved", "virtual_stages": 3},
           "parallelism": {"pp": 2}}
    yield {"model": {**CUSTOM_ARCH, "num_kv_heads": 5}}
    yield {"model": {**CUSTOM_ARCH, "hidden_size": 1000, "num_attention_heads": 3}}
    yield {"model": {**CUSTOM_ARCH, "experts_per_token": 2}}
    yield {"model": {"hf_config": {"model_type": "llama"}}}
    yield {"model": {"hf_config": {"num_hidden_layers": "x"}}}
    yield {"model": "llama-3.1-8b", "host": {"checkpoints_kept": 0}}
    yield {"model": "llama-3.1-8b", "host": {"checkpoint_target": "tape"}}
    yield {"model": "llama-3.1-8b", "hardware": {"gpus_per_node": 9, "server": "dell-xe9680-h100"}}
    yield {"model": "llama-3.1-8b", "hardware": {"num_nodes": 0}}


def _random_estimates(n: int) -> Iterator[Body]:
    """Seeded random mixes of every field (many invalid or not fitting: each is a case to keep)."""
    rng = random.Random(SEED)
    presets = [p["id"] for p in list_presets()]
    for _ in range(n):
        tp, pp, cp = rng.choice([1, 1, 2, 4, 8]), rng.choice([1, 1, 2, 4]), rng.choice([1, 1, 1, 2, 4])
        framework = rng.choice(FRAMEWORKS)
        body: Body = {
            "model": rng.choice(presets),
            "training": {
                "method": rng.choice(METHODS), "precision": rng.choice(PRECISIONS),
                "optimizer": rng.choice(OPTIMIZERS), "optimizer_impl": rng.choice(IMPLS),
                "micro_batch_size": rng.choice([1, 1, 2, 4, 8]), "seq_len": rng.choice(SEQ_LENS[:-1]),
                "gradient_accumulation_steps": rng.choice([1, 4, 16, 64]),
                "activation_checkpointing": rng.choice(CHECKPOINTING),
                "attention": rng.choice(ATTENTION), "lora_rank": rng.choice([8, 16, 64]),
                "lora_targets": rng.choice(["all-linear", "attention"]),
            },
            "parallelism": {"sharding": rng.choice(SHARDINGS), "tp": tp, "pp": pp, "cp": cp,
                            "ep": rng.choice([1, 1, 2, 8]), "sequence_parallel": tp > 1 and rng.random() < 0.6,
                            "offload": rng.choice(OFFLOADS), "framework": framework},
            "hardware": {"gpu": rng.choice(GPUS), "num_nodes": rng.choice([1, 1, 2, 4, 8, 32]),
                         "gpus_per_node": rng.choice([8, 8, 8, 4, 2, 1])},
        }
        if rng.random() < 0.4:
            body["training"]["train_tokens"] = rng.choice([1e8, 1e10, 2e12])
        if pp > 1 and rng.random() < 0.4:
            body["training"]["pipeline_schedule"] = rng.choice(["interleaved", "gpipe"])
            if body["training"]["pipeline_schedule"] == "interleaved":
                body["training"]["virtual_stages"] = rng.choice([1, 2, 4])
        if rng.random() < 0.15:
            body["host"] = {"checkpoints_kept": rng.choice([1, 3]), "model_loading": rng.choice(["meta", "rank0"])}
        if rng.random() < 0.9:
            _repair(body)
        yield body


MOE = ("mixtral-8x7b", "mixtral-8x22b", "deepseek-v3")


def _repair(body: Body) -> None:
    """Make a random body valid in the common ways (the rest stay as refusals to keep)."""
    t, p, h = body["training"], body["parallelism"], body["hardware"]
    if body["model"] not in MOE:
        p["ep"] = 1
    if t["method"] == "qlora":
        t["precision"] = "bf16-mixed"
    if p["framework"] == "megatron" and p["sharding"] not in ("none", "zero1"):
        p["sharding"] = "zero1"
    if p["offload"] != "none" and (p["sharding"] not in ("zero3", "fsdp") or t["optimizer"] == "adamw-8bit"
                                   or t["method"] == "qlora" or p["framework"] == "megatron"):
        p["offload"] = "none"
    world = h["num_nodes"] * h["gpus_per_node"]
    while world % (p["tp"] * p["pp"] * p["cp"]):
        for key in ("cp", "pp", "tp"):
            if p[key] > 1:
                p[key] //= 2
                break
    p["sequence_parallel"] = p["sequence_parallel"] and p["tp"] > 1
    dp = world // (p["tp"] * p["pp"] * p["cp"])
    while (dp * p["tp"]) % p["ep"]:
        p["ep"] //= 2
    if p["pp"] == 1:
        t.pop("pipeline_schedule", None)
        t.pop("virtual_stages", None)


def _plans() -> Iterator[Body]:
    """Planner searches: small worlds, both objectives, every pricing, pins, constraints."""
    small: Body = {"gpus": ["h100-sxm5-80gb", "a100-sxm4-80gb"], "max_nodes": 2}
    yield {"model": "llama-3.1-8b", "training": {"train_tokens": 1e10}, "constraints": small}
    yield {"model": "llama-3.1-8b", "training": {"train_tokens": 1e10}, "constraints": small, "objective": "cost"}
    for pricing in ["on-demand", "reserved", "owned"]:
        yield {"model": "llama-3.1-8b", "training": {"method": "lora", "train_tokens": 1e9}, "pricing": pricing,
               "constraints": {"max_nodes": 1}}
    yield {"model": "llama-3.1-70b", "training": {"seq_len": 4096, "train_tokens": 2e10},
           "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 4}}
    yield {"model": "llama-3.1-70b", "training": {"method": "qlora", "train_tokens": 1e9},
           "constraints": {"servers": ["dell-xe9680-h100", "nvidia-dgx-a100-640gb"], "max_nodes": 1}}
    yield {"model": "mixtral-8x7b", "training": {"train_tokens": 1e10}, "constraints": {"gpus": ["h200-sxm-141gb"],
                                                                                          "max_nodes": 2}}
    yield {"model": "llama-3.1-8b", "parallelism": {"framework": "deepspeed"}, "hardware": {"num_nodes": 1},
           "constraints": small}
    yield {"model": "llama-3.1-8b", "parallelism": {"sharding": "fsdp", "tp": 2}, "constraints": small}
    yield {"model": "llama-3.1-8b", "hardware": {"gpu": "a100-sxm4-40gb", "gpus_per_node": 4},
           "constraints": {"max_nodes": 2}}
    yield {"model": "llama-3.1-8b", "global_batch_size": 64, "constraints": small}
    yield {"model": "llama-3.1-8b", "global_batch_tokens": 1 << 20, "training": {"seq_len": 8192},
           "constraints": small}
    yield {"model": "llama-3.1-8b", "training": {"train_tokens": 1e11},
           "constraints": {**small, "budget_usd": 5000, "deadline_days": 3}}
    yield {"model": "llama-3.1-8b", "training": {"train_tokens": 1e11}, "constraints": {**small, "budget_usd": 1}}
    yield {"model": "llama-3.1-8b", "constraints": {**small, "min_headroom_pct": 20}, "top_k": 3}
    yield {"model": "llama-3.1-8b", "host": {"checkpoints_kept": 5, "model_loading": "every-rank"},
           "constraints": small}
    yield {"model": CUSTOM_ARCH, "constraints": {"gpus": ["l40s-48gb"], "max_nodes": 1}}
    yield {"model": "llama-3.1-405b", "training": {"seq_len": 8192},
           "constraints": {"gpus": ["l40s-48gb"], "max_nodes": 1}}
    yield {"model": "qwen2.5-32b", "training": {"method": "lora", "seq_len": 32768, "train_tokens": 1e9},
           "constraints": {"gpus": ["h200-sxm-141gb", "mi300x-192gb", "b200-sxm-180gb"], "max_nodes": 2}}
    # refused
    yield {"model": "llama-3.1-8b", "global_batch_size": 8, "global_batch_tokens": 65536}
    yield {"model": "llama-3.1-8b", "constraints": {"budget_usd": 100}}
    yield {"model": "llama-3.1-8b", "constraints": {"gpus": ["no-such-gpu"]}}
    yield {"model": "llama-3.1-8b", "constraints": {"servers": ["no-such-server"]}}
    yield {"model": "llama-3.1-8b", "global_batch_tokens": 100}
    yield {"model": "llama-3.1-8b", "objective": "speed"}


def _reverse() -> Iterator[Body]:
    one: Body = {"gpus": ["h100-sxm5-80gb", "a100-sxm4-40gb"], "max_nodes": 2}
    yield {"question": "fewest-gpus", "model": "llama-3.1-8b", "constraints": one}
    yield {"question": "fewest-gpus", "model": "llama-3.1-70b", "training": {"method": "qlora"},
           "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 2}}
    yield {"question": "fewest-gpus", "model": "llama-3.1-405b", "constraints": {"gpus": ["l40s-48gb"], "max_nodes": 1}}
    yield {"question": "largest-model", "model": "llama-3.1-8b", "training": {"method": "lora"},
           "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 1}}
    yield {"question": "largest-model", "model": "llama-3.1-8b", "family": False,
           "constraints": {"gpus": ["a100-sxm4-80gb"], "max_nodes": 1}}
    yield {"question": "longest-sequence", "model": "llama-3.1-8b", "constraints": {"gpus": ["h100-sxm5-80gb"],
                                                                                    "max_nodes": 1}}
    yield {"question": "longest-sequence", "model": "llama-3.2-1b", "granularity": 4096, "training": {"method": "lora"},
           "constraints": {"gpus": ["a100-sxm4-40gb"], "max_nodes": 1}}
    yield {"question": "how-big", "model": "llama-3.1-8b"}
    yield {"question": "longest-sequence", "granularity": 7}


def _tco() -> Iterator[Body]:
    for server, nodes in itertools.product(SERVERS, [1, 4]):
        yield {"server": server, "num_nodes": nodes}
    for change in [{"electricity_usd_per_kwh": 0.3}, {"pue": 1.6}, {"depreciation_years": 3}, {"utilisation": 0.4},
                   {"network_fabric": "roce"}, {"cloud_pricing": "reserved"}, {"horizon_years": 5},
                   {"rack_kw": 20}, {"server_cost_vs_gpu_price": 2.0}, {"staff_usd_per_year": 0}]:
        yield {"server": "dell-xe9680-h100", "num_nodes": 2, "assumptions": change}
    yield {"server": "nvidia-dgx-h100", "num_nodes": 1, "server_price_usd": 250000}
    yield {"server": "nvidia-dgx-h100", "num_nodes": 1, "offer_id": "lambda-gpu-8x-h100-sxm5"}
    yield {"server": "no-such-server", "num_nodes": 1}
    yield {"server": "nvidia-dgx-h100", "num_nodes": 1, "offer_id": "aws-p4d-24xlarge"}
    yield {"server": "nvidia-dgx-h100", "num_nodes": 1, "assumptions": {"pue": 0.5}}


JOBS: list[Body] = [
    {"model": "llama-3.1-8b", "training": {"train_tokens": 1e10}, "parallelism": {"sharding": "fsdp"}},
    {"model": "llama-3.1-70b", "training": {"train_tokens": 2e10, "activation_checkpointing": "full"},
     "parallelism": {"sharding": "fsdp"}},
    {"model": "llama-3.1-70b", "training": {"method": "lora", "train_tokens": 1e9}},
]


def _jobs() -> Iterator[Body]:
    for job, (server, nodes) in itertools.product(JOBS, [("dell-xe9680-h100", 1), ("nvidia-dgx-a100-640gb", 2),
                                                         ("nvidia-dgx-h200", 1), ("dell-xe9680-mi300x", 1)]):
        yield {"job": job, "server": server, "num_nodes": nodes}
    yield {"job": {"model": "llama-3.1-8b"}, "server": "dell-xe9680-h100", "num_nodes": 1}  # no train_tokens


def _upgrades() -> Iterator[Body]:
    pairs = [("nvidia-dgx-a100-640gb", "dell-xe9680-h100"), ("dell-xe9680-h100", "nvidia-dgx-h200"),
             ("nvidia-dgx-h100", "nvidia-dgx-b200"), ("dell-xe9680-a100", "dell-xe9680-mi300x")]
    for job, (a, b) in itertools.product(JOBS, pairs):
        yield {"job": job, "current": {"server": a, "num_nodes": 1}, "candidate": {"server": b, "num_nodes": 1}}
    yield {"job": JOBS[0], "current": {"server": "nvidia-dgx-a100-640gb", "num_nodes": 2},
           "candidate": {"server": "dell-xe9680-h100", "num_nodes": 1}, "assumptions": {"electricity_usd_per_kwh": 0.4}}


def _stack_estimates() -> Iterator[Body]:
    """Issue 29's mechanisms: the new optimizers on one GPU and under FSDP2 (Muon's DTensor path among them), the
    loss kernels x Liger x activation offloading, and each stack's defaults. Appended after every other kind, so
    the lines before them keep their indexes."""
    base: Body = {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "activation_checkpointing": "full"}}
    for optimizer, method, sharding in itertools.product(
            ["paged-adamw-8bit", "paged-adamw", "adamw-4bit", "ao-adamw-8bit", "muon"], ["full", "lora"],
            ["none", "fsdp"]):
        impl = {"optimizer_impl": "for-loop"} if optimizer == "muon" else {}
        yield {**base, "training": {**base["training"], "method": method, "optimizer": optimizer, **impl},
               "parallelism": {"sharding": sharding}}
    for loss, fused, offload in itertools.product(["materialized", "chunked", "fused"], ["none", "liger"],
                                                  ["none", "checkpoints", "all"]):
        yield {**base, "training": {**base["training"], "method": "lora", "seq_len": 16384, "loss_kernel": loss,
                                    "fused_kernels": fused, "activation_offloading": offload}}
    for stack, method in itertools.product(["transformers", "trl", "axolotl", "llama-factory", "torchtune",
                                            "unsloth"], ["full", "lora"]):
        yield {"model": "llama-3.1-8b", "training": {"stack": stack, "method": method}}


def requests() -> list[tuple[str, Body]]:
    """Every guard request, in index order: (kind, body)."""
    out: list[tuple[str, Body]] = []
    for gen in (_grid_estimates(), _parallel_layouts(), _host_estimates(), _custom_models(), _refused(),
                _random_estimates(1900)):
        out += [("estimate", b) for b in gen]
    out += [("plan", b) for b in _plans()]
    out += [("reverse", b) for b in _reverse()]
    out += [("tco", b) for b in _tco()]
    out += [("job", b) for b in _jobs()]
    out += [("upgrade", b) for b in _upgrades()]
    out += [("estimate", b) for b in _stack_estimates()]
    return out


# ------------------------------------------------------------------------------------------------- running


#: wall-clock figures and work counters of the planner's search statistics: how the search got its answer
#: (how many layouts the vectorised screen or the exact memory model looked at), not the answer, so left out
WALL_CLOCK = frozenset({"elapsed_s", "candidates_per_s",
                        "memory_checks", "pruned_by_bound", "layouts_screened", "screened_out"})


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _dump(value.model_dump(mode="json"))
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _dump(v) for k, v in value.items() if k not in WALL_CLOCK}
    return value


def _error(exc: Exception) -> Body:
    if isinstance(exc, ValidationError):
        return {"type": "ValidationError",
                "errors": [{"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
                           for e in exc.errors(include_url=False, include_context=False)]}
    if isinstance(exc, EstimatorError):
        return {"type": type(exc).__name__, "message": exc.message, "field": exc.field}
    return {"type": type(exc).__name__, "message": str(exc)}


def _job(job_body: Body, server: str, nodes: int, catalog: Any, whole: bool = False,
         price: float | None = None) -> JobCost:
    """The job estimated on ``nodes`` of ``server`` (as the TCO service does), as a JobCost."""
    srv = catalog.server(server)
    req = EstimateRequest.model_validate(job_body)
    hardware = {"server": server, "gpu": str(srv.gpu_id), "num_nodes": nodes}
    if whole:
        hardware["gpus_per_node"] = int(srv.gpu_count)
    req = req.model_copy(update={"hardware": req.hardware.model_copy(update=hardware)})
    result = estimate(req, catalog)
    if result.train is None or not req.training.train_tokens:
        raise EstimatorError("no time to train")
    return JobCost(gpu_id=result.layout.gpu, server_id=server, num_nodes=nodes,
                   gpus_per_node=req.hardware.gpus_per_node, time_to_train_s=result.train.time_to_train_s,
                   train_tokens=req.training.train_tokens, energy_kwh=result.train.energy_kwh or None,
                   server_price_usd=price)


def _run_tco(body: Body, catalog: Any) -> Any:
    a = TcoAssumptions.model_validate(body.get("assumptions", {}))
    server, nodes, price = body["server"], body["num_nodes"], body.get("server_price_usd")
    own = ownership_tco(server, nodes, a, catalog, server_price_usd=price)
    versus, note = own_vs_cloud_or_note(own, body.get("offer_id"), a, catalog)
    return {"options": tco_options(own, a, catalog), "own_vs_cloud": versus, "note": note,
            "ownership": own,
            "rack_max": plan_rack_for_server(server, a.rack_kw, assumptions=a, catalog=catalog),
            "rack_load": plan_rack_for_server(server, a.rack_kw, basis="load", assumptions=a, catalog=catalog)}


def _run_upgrade(body: Body, catalog: Any) -> Any:
    a = TcoAssumptions.model_validate(body.get("assumptions", {}))
    cur, cand = body["current"], body["candidate"]
    job_a = _job(body["job"], cur["server"], cur["num_nodes"], catalog, whole=True)
    job_b = _job(body["job"], cand["server"], cand["num_nodes"], catalog, whole=True)
    return compare_upgrade(job_a, job_b, a, catalog)


RUNNERS: dict[str, Callable[[Body, Any], Any]] = {
    "estimate": lambda b, c: estimate(EstimateRequest.model_validate(b), c),
    "plan": lambda b, c: plan(PlanRequest.model_validate(b), c),
    "reverse": lambda b, c: answer(ReverseRequest.model_validate(b), c),
    "tco": _run_tco,
    "job": lambda b, c: compare_job(_job(b["job"], b["server"], b["num_nodes"], c), None, c),
    "upgrade": _run_upgrade,
}


def run_one(index: int, kind: str, body: Body, catalog: Any) -> str:
    line: Body = {"i": index, "kind": kind, "request": body}
    try:
        line["result"] = _dump(RUNNERS[kind](body, catalog))
    except Exception as exc:  # any failure is behaviour to keep (an error line)
        line["error"] = _error(exc)
    return json.dumps(line, sort_keys=True, separators=(",", ":"), allow_nan=True)


def run(out: str, shuffle: bool, only: set[str] | None) -> None:
    catalog = load_catalog()
    todo = [(i, k, b) for i, (k, b) in enumerate(requests()) if only is None or k in only]
    order = list(todo)
    if shuffle:
        random.Random(SEED + 1).shuffle(order)
    lines: dict[int, str] = {}
    t0 = time.perf_counter()
    for i, kind, body in order:
        lines[i] = run_one(i, kind, body, catalog)
    with open(out, "w", encoding="utf-8") as f:
        for i in sorted(lines):
            f.write(lines[i] + "\n")
    errors = sum('"error":' in line for line in lines.values())
    print(f"{len(lines)} requests ({errors} refused) in {time.perf_counter() - t0:.1f} s -> {out}")


def _without_added(old: Any, new: Any, added: set[str], path: str = "") -> Any:
    """``new`` less the dict keys ``old`` does not have (fields added since), recorded in ``added``."""
    if isinstance(old, dict) and isinstance(new, dict):
        added.update(f"{path}.{k}" for k in new if k not in old)
        return {k: _without_added(old[k], v, added, f"{path}.{k}") for k, v in new.items() if k in old}
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_without_added(u, v, added, f"{path}[]") for u, v in zip(old, new, strict=True)]
    return new


def compare(a: str, b: str, allow_added: bool = False) -> int:
    with open(a, encoding="utf-8") as fa, open(b, encoding="utf-8") as fb:
        la, lb = fa.read().splitlines(), fb.read().splitlines()
    if allow_added:
        added: set[str] = set()
        lb = [json.dumps(_without_added(json.loads(x), json.loads(y), added), sort_keys=True,
                         separators=(",", ":"), allow_nan=True) for x, y in zip(la, lb, strict=False)] + lb[len(la):]
        if added:
            shown = sorted({re.sub(r"\[\]", "", k) for k in added})
            more = " ..." if len(shown) > 20 else ""
            print(f"left out {len(shown)} added field paths: {', '.join(shown[:20])}{more}")
    diffs = [i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y]
    if len(la) != len(lb):
        print(f"line counts differ: {len(la)} vs {len(lb)}")
    for i in diffs[:10]:
        x, y = json.loads(la[i]), json.loads(lb[i])
        print(f"line {i} ({x.get('kind')}) differs: {json.dumps(x.get('request'), sort_keys=True)}")
        _first_difference(x, y, "")
    if diffs or len(la) != len(lb):
        print(f"DIFFERENT: {len(diffs)} of {min(len(la), len(lb))} lines differ")
        return 1
    print(f"identical: {len(la)} lines")
    return 0


def _first_difference(x: Any, y: Any, path: str) -> None:
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            if x.get(k) != y.get(k):
                _first_difference(x.get(k), y.get(k), f"{path}.{k}")
                return
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for j, (u, v) in enumerate(zip(x, y, strict=True)):
            if u != v:
                _first_difference(u, v, f"{path}[{j}]")
                return
    print(f"  at {path}: {json.dumps(x)[:200]} != {json.dumps(y)[:200]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--out", help="write the canonical lines here")
    p.add_argument("--shuffle", action="store_true", help="run the requests in a shuffled (seeded) order")
    p.add_argument("--only", help="comma-separated kinds: " + ",".join(RUNNERS))
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="diff two outputs; exit 1 on any difference")
    p.add_argument("--allow-added", action="store_true", help="with --compare: fields B has and A has not (added "
                   "to the contract since) are listed, not counted as differences")
    p.add_argument("--count", action="store_true", help="print the number of requests per kind")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare, allow_added=args.allow_added)
    if args.count:
        reqs = requests()
        for kind in RUNNERS:
            print(kind, sum(k == kind for k, _ in reqs))
        print("total", len(reqs))
        return 0
    if not args.out:
        p.error("--out, --compare or --count")
    run(args.out, args.shuffle, set(args.only.split(",")) if args.only else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
