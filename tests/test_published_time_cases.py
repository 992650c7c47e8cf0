"""Published training throughputs expressed as estimator requests (shared by the step-time tests and docs).

Rows of ``tests/data/published-results.csv`` (a copy of ``shared/reference/published-results.csv``) that the
request contract can express, each turned into tokens/s per GPU:

- llm-foundry (``mosaicml/llm-foundry`` ``scripts/train/benchmarking/README.md``): every BF16 row of the
  H100, A100-80GB and A100-40GB tables (``tokens_per_s_per_gpu``). MPT models: LayerNorm, plain GELU MLP of 4h,
  tied 50368-token vocabulary, learned positions (the table's NumParams include ``max_seq_len x d_model``),
  flash attention, FSDP FULL_SHARD (SHARD_GRAD_OP rows as ZeRO-2), activation checkpointing as listed. A100
  nodes have 8 x 200 Gb/s RoCE ("1600 Gbps"), the default for A100 in :mod:`estimator.training.comm`.
- torchtitan (``pytorch/torchtitan`` ``docs/performance.md``): the eager (no ``torch.compile``) BF16 rows:
  Llama 3.1 8B FSDP on 8 and 128 H100 (Table 1 and 3), and the older A100-80GB table (Llama 3 8B / 70B,
  Llama 2 13B / 70B on 64 GPUs).
- Korthikanti et al. 2022 (arXiv 2205.05198) Table 5: iteration time of GPT 22B, 175B, 530B, 1T on A100
  (Megatron-LM, TP 8, full recompute without / selective recompute with sequence parallelism).
- Narayanan et al. 2021 (arXiv 2104.04473) Table 1: achieved TFLOP/s of GPT 1.7B..1T on Selene A100s with
  full recomputation, converted to tokens/s with the paper's own FLOP formula (Eq. 3:
  ``96 B s l h^2 (1 + s/6h + V/16lh)``).
- Megatron-Core H100 weak scaling (``NVIDIA/Megatron-LM`` README): model TFLOP/s converted with Megatron's
  ``num_floating_point_operations`` (``72 B s l h^2 (1 + s/6h + V/12lh)`` for a 4h GELU MLP).

Left out, and why:

- rows run with ``torch.compile`` (torchtitan's "+ torch.compile", all its Float8 rows, the 70B/405B
  2D/3D/4D rows, AsyncTP, the Trainy H200 rows): the request has no compile switch and compiled kernels fuse
  the elementwise work the eager model prices;
- llm-foundry's FP8 table: Transformer Engine fp8 (``amp_fp8``) with its own fused kernels; likewise no switch;
- rows without a throughput or a layout (memory-only rows, MFU-only strong-scaling rows, DeepSpeed/Azure rows
  whose layout is "not stated", torchtune/Unsloth/PEFT rows without the parallel layout or GPU count).

Assumptions where a source is silent (stated so the errors can be read): Narayanan Table 1 and Megatron-Core
micro-batch 1 and no interleaving; Megatron-Core rows use sequence parallelism with TP > 1, flash attention and
no recomputation; Korthikanti and Narayanan (2021-22 Megatron) use the unfused-score ("eager") attention that
predates flash attention in Megatron; torchtitan's "H100 SXM 96GB HBM2e @500W" is priced as the catalog's
H100 SXM 80GB (its power cap and HBM2e are slower: those rows read optimistic).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

CSV = Path(__file__).resolve().parent / "data" / "published-results.csv"

MPT = {"125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24), "1b": (2048, 16, 24),
       "3b": (2560, 20, 32), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48),
       "70b": (8192, 64, 80)}
FOUNDRY_GPU = {"H100-80GB": "h100-sxm5-80gb", "A100-80GB (1600Gbps RoCE)": "a100-sxm4-80gb",
               "A100-40GB (1600Gbps RoCE)": "a100-sxm4-40gb"}
# Narayanan et al. 2021, Table 1: (attention heads, hidden, layers, TP, PP, batch).
NARAYANAN = {"1.7": (24, 2304, 24, 1, 1), "3.6": (32, 3072, 30, 2, 1), "7.5": (32, 4096, 36, 4, 1),
             "18.4": (48, 6144, 40, 8, 1), "39.1": (64, 8192, 48, 8, 2), "76.1": (80, 10240, 60, 8, 4),
             "145.6": (96, 12288, 80, 8, 8), "310.1": (128, 16384, 96, 8, 16), "529.6": (128, 20480, 105, 8, 35),
             "1008.0": (160, 25600, 128, 8, 64)}
KORTHIKANTI_HEADS = {22: 64, 175: 96, 530: 128, 1000: 160}


@dataclass(frozen=True)
class PublishedCase:
    id: str
    source: str
    request: dict[str, Any]
    tokens_per_s_per_gpu: float  # measured (or derived from the published TFLOP/s or iteration time)
    gpu: str


@cache
def rows() -> tuple[dict[str, str], ...]:
    with CSV.open(newline="") as fh:
        return tuple(csv.DictReader(fh))


def _gpt(name: str, h: int, heads: int, layers: int, vocab: int, seq: int) -> dict[str, Any]:
    return {"name": name, "num_layers": layers, "hidden_size": h, "num_attention_heads": heads,
            "ffn_hidden_size": 4 * h, "vocab_size": vocab, "tied_embeddings": True, "gated_mlp": False,
            "norm": "layernorm", "attention_bias": True, "qkv_bias": True, "mlp_bias": True,
            "learned_position_embeddings": seq}


def _request(model: Any, gpu: str, gpus: int, *, mbs: int, seq: int, ga: int, ckpt: str, sharding: str,
             tp: int = 1, pp: int = 1, cp: int = 1, sp: bool = False, vp: int = 1, framework: str = "pytorch",
             attention: str = "flash", precision: str = "bf16-mixed") -> dict[str, Any]:
    per_node = min(8, gpus)
    return {"model": model,
            "training": {"precision": precision, "micro_batch_size": mbs, "seq_len": seq,
                         "gradient_accumulation_steps": ga, "activation_checkpointing": ckpt,
                         "attention": attention, "virtual_stages": vp,
                         "pipeline_schedule": "interleaved" if vp > 1 else "1f1b"},
            "parallelism": {"sharding": sharding, "tp": tp, "pp": pp, "cp": cp, "sequence_parallel": sp,
                            "framework": framework},
            "hardware": {"gpu": gpu, "num_nodes": gpus // per_node, "gpus_per_node": per_node}}


def foundry() -> list[PublishedCase]:
    out = []
    for r in rows():
        if r["source"] != "MosaicML llm-foundry benchmarks" or r["metric"] != "tokens_per_s_per_gpu":
            continue
        if "fp8" in r["precision"]:
            continue
        size = r["model"].split()[0].split("-")[1]
        h, heads, layers = MPT[size]
        seq, gpus = int(r["seq_len"]), int(r["num_gpus"])
        ga = int(re.search(r"GA=(\d+)", r["notes"]).group(1))  # type: ignore[union-attr]
        model = {"name": f"mpt-{size}", "num_layers": layers, "hidden_size": h, "num_attention_heads": heads,
                 "ffn_hidden_size": 4 * h, "vocab_size": 50368, "tied_embeddings": True, "gated_mlp": False,
                 "norm": "layernorm", "learned_position_embeddings": seq}
        ckpt = "full" if r["recompute"].startswith("full") else "none"
        sharding = "zero2" if "SHARD_GRAD_OP" in r["zero_or_fsdp"] else "fsdp"
        gpu = FOUNDRY_GPU[r["gpu"]]
        req = _request(model, gpu, gpus, mbs=int(r["micro_batch"]), seq=seq, ga=ga, ckpt=ckpt, sharding=sharding)
        tag = f"{gpu.split('-')[0]}-{gpu.split('-')[-1]}"
        cid = f"foundry-{tag}-mpt{size}-s{seq}-g{gpus}-b{r['micro_batch']}x{ga}-{ckpt}"
        if "PURE" in r["precision"]:
            cid += "-pure"
        out.append(PublishedCase(cid, "llm-foundry", req, float(r["value"]), gpu))
    return out


_TITAN_MODELS = {"Llama-3.1-8B": "llama-3.1-8b", "Llama-3-8B": "llama-3.1-8b", "Llama-3-70B": "llama-3.1-70b",
                 "Llama-2-13B": "llama-2-13b", "Llama-2-70B": "llama-2-70b"}


def torchtitan() -> list[PublishedCase]:
    out = []
    for r in rows():
        if r["source"] not in ("torchtitan", "torchtitan (older perf doc)") or r["metric"] != "tokens_per_s_per_gpu":
            continue
        if r["precision"] != "BF16" or "compile" in r["notes"] or r["tp"] not in ("", "1"):
            continue
        preset = _TITAN_MODELS[r["model"].split()[0]]
        ckpt = r["recompute"].split()[0]
        gpu = "a100-sxm4-80gb" if "A100" in r["gpu"] else "h100-sxm5-80gb"
        gpus = int(r["num_gpus"])
        req = _request(preset, gpu, gpus, mbs=int(r["micro_batch"]), seq=int(r["seq_len"]), ga=1,
                       ckpt=ckpt if ckpt in ("none", "full", "selective") else "selective", sharding="fsdp",
                       attention="sdpa")
        cid = f"titan-{gpu.split('-')[0]}-{preset}-g{gpus}-b{r['micro_batch']}-s{r['seq_len']}-{r['recompute']}"
        out.append(PublishedCase(cid.replace(" ", "").replace("(", "").replace(")", ""), "torchtitan", req,
                   float(r["value"]), gpu))
    return out


def korthikanti() -> list[PublishedCase]:
    out = []
    for r in rows():
        if r["source"] != "Megatron-LM (Korthikanti 2022)" or r["metric"] != "iteration_time" or not r["tp"]:
            continue
        m = re.search(r"h=(\d+), L=(\d+)", r["model"])
        h, layers = int(m.group(1)), int(m.group(2))  # type: ignore[union-attr]
        size = round(float(r["params_b"]))
        seq, gpus, gb = int(r["seq_len"]), int(r["num_gpus"]), int(r["global_batch"])
        tp, pp, mbs = int(r["tp"]), int(r["pp"]), int(r["micro_batch"])
        vp = int(re.search(r"VP/interleave=(\d+)", r["notes"]).group(1))  # type: ignore[union-attr]
        selective = r["recompute"].startswith("selective")
        dp = gpus // (tp * pp)
        req = _request(_gpt(f"gpt-{size}b", h, KORTHIKANTI_HEADS[size], layers, 51200, seq), "a100-sxm4-80gb",
                       gpus, mbs=mbs, seq=seq, ga=gb // (mbs * dp), ckpt="selective" if selective else "full",
                       sharding="none", tp=tp, pp=pp, sp=selective, vp=vp, framework="megatron",
                       attention="eager")
        req["parallelism"]["tp_comm_overlap"] = "off"  # 2022 Megatron-LM: no userbuffers TP overlap yet
        tps = gb * seq / float(r["value"]) / gpus
        out.append(PublishedCase(f"korthikanti-gpt{size}b-{'sel-sp' if selective else 'full'}", "Korthikanti 2022",
                                 req, tps, "a100-sxm4-80gb"))
    return out


def narayanan() -> list[PublishedCase]:
    out = []
    for r in rows():
        if r["source"] != "Megatron-LM (Narayanan 2021)" or r["metric"] != "achieved_tflops_per_gpu":
            continue
        heads, h, layers, tp, pp = NARAYANAN[r["params_b"]]
        seq, gpus, gb, vocab = 2048, int(r["num_gpus"]), int(r["global_batch"]), 51200
        dp = gpus // (tp * pp)
        req = _request(_gpt(f"gpt-{r['params_b']}b", h, heads, layers, vocab, seq), "a100-sxm4-80gb", gpus,
                       mbs=1, seq=seq, ga=gb // dp, ckpt="full", sharding="none", tp=tp, pp=pp,
                       framework="megatron", attention="eager")
        flops_per_token = 96 * layers * h * h * (1 + seq / (6 * h) + vocab / (16 * layers * h))
        tps = float(r["value"]) * 1e12 / flops_per_token
        out.append(PublishedCase(f"narayanan-gpt{r['params_b']}b", "Narayanan 2021", req, tps, "a100-sxm4-80gb"))
    return out


def megatron_core() -> list[PublishedCase]:
    out = []
    for r in rows():
        if r["source"] != "Megatron-Core H100 weak scaling" or r["metric"] != "model_tflops_per_gpu":
            continue
        m = re.search(r"h=(\d+), L=(\d+), heads=(\d+)", r["model"])
        h, layers, heads = (int(x) for x in m.groups())  # type: ignore[union-attr]
        seq, gpus, gb, vocab = 4096, int(r["num_gpus"]), int(r["global_batch"]), 131072
        tp, pp = int(r["tp"]), int(r["pp"])
        dp = gpus // (tp * pp)
        req = _request(_gpt(f"gpt-{r['params_b']}b", h, heads, layers, vocab, seq), "h100-sxm5-80gb", gpus,
                       mbs=1, seq=seq, ga=gb // dp, ckpt="none", sharding="zero1", tp=tp, pp=pp, sp=tp > 1,
                       framework="megatron")
        flops_per_token = 72 * layers * h * h * (1 + seq / (6 * h) + vocab / (12 * layers * h))
        tps = float(r["value"]) * 1e12 / flops_per_token
        out.append(PublishedCase(f"mcore-gpt{r['params_b']}b-g{gpus}", "Megatron-Core", req, tps, "h100-sxm5-80gb"))
    return out


# NeMo 24.07 / Megatron-Bridge models not among the presets: NeMo's GPT-3 configs (``conf/model/gpt3/*.yaml`` in
# NeMo-Framework-Launcher: learned positions, LayerNorm, GELU 4h MLP, 50k vocabulary) and Nemotron (Nemotron-4
# 340B, arXiv 2406.11704 Table 1; Nemotron-3 8B: squared-ReLU 4h MLP, 256k vocabulary, untied, rotary).
def _nemotron(name: str, h: int, heads: int, kv: int, layers: int) -> dict[str, Any]:
    return {"name": name, "num_layers": layers, "hidden_size": h, "num_attention_heads": heads, "num_kv_heads": kv,
            "ffn_hidden_size": 4 * h, "vocab_size": 256000, "tied_embeddings": False, "gated_mlp": False,
            "norm": "layernorm"}


_NEMO_MODELS: dict[str, Any] = {
    "GPT3-5B": _gpt("gpt3-5b", 4096, 32, 24, 50304, 2048), "GPT3-20B": _gpt("gpt3-20b", 6144, 48, 44, 50304, 2048),
    "GPT3-175B": _gpt("gpt3-175b", 12288, 96, 96, 50304, 2048), "LLAMA2-7B": "llama-2-7b",
    "LLAMA2-13B": "llama-2-13b", "LLAMA2-70B": "llama-2-70b", "LLAMA3-8B": "llama-3.1-8b", "LLAMA3_8B": "llama-3.1-8b",
    "LLAMA3-70B": "llama-3.1-70b", "LLAMA3_70B": "llama-3.1-70b", "LLAMA3.1_405B": "llama-3.1-405b",
    "Nemotron-8B": _nemotron("nemotron-8b", 4096, 32, 32, 32),
    "Nemotron-340B": _nemotron("nemotron-4-340b", 18432, 96, 8, 96),
    "Llama3": "llama-3.1-70b", "Qwen2.5": "qwen2.5-7b"}
# AutoModel's rows name the model as "<family> <size>": the preset of each
_AUTOMODEL_MODELS = {("Llama3", "70B"): "llama-3.1-70b", ("Llama3", "8B"): "llama-3.1-8b",
                     ("Qwen2.5", "7B"): "qwen2.5-7b", ("Qwen2.5", "32B"): "qwen2.5-32b"}
SQUAD_TOKENS = 256
_NEMO_SOURCES = {"NeMo performance summary": "NeMo", "Megatron-Bridge performance summary": "Megatron-Bridge",
                 "NeMo AutoModel performance summary": "AutoModel"}


def nemo() -> list[PublishedCase]:
    """NeMo 24.07 (pre-training and fine-tuning, fp8), Megatron-Bridge (Llama 3 70B / 3.1 405B pre-training,
    70B SFT and LoRA, fp8) and NeMo AutoModel (70B LoRA, bf16) rows on DGX-H100, as published: Megatron-Core
    with Transformer Engine (``framework: megatron``, distributed optimizer = ZeRO-1, sequence parallelism with
    TP > 1, cuDNN/TE fused attention, no recomputation: the performance recipes' settings, assumed where the
    tables are silent); AutoModel is PyTorch (TP + PP with DTensor, SDPA)."""
    out = []
    for r in rows():
        source = _NEMO_SOURCES.get(r["source"])
        if source is None or r["metric"] != "tokens_per_s_per_gpu":
            continue
        name = r["model"].split()[0]
        model = (_AUTOMODEL_MODELS[(name, r["model"].split()[1])] if source == "AutoModel" else _NEMO_MODELS[name])
        task = re.search(r"task=(\w+)", r["notes"]).group(1)  # type: ignore[union-attr]
        vp = int(re.search(r"VP=(\d+)", r["notes"]).group(1))  # type: ignore[union-attr]
        gpus, tp, pp, cp = int(r["num_gpus"]), int(r["tp"]), int(r["pp"]), int(r["cp"])
        seq, mbs, gbs = int(r["seq_len"]), int(r["micro_batch"]), int(r["global_batch"])
        dp = gpus // (tp * pp * cp)
        megatron = source != "AutoModel"
        req = _request(model, "h100-sxm5-80gb", gpus, mbs=mbs, seq=seq, ga=max(1, gbs // (mbs * dp)),
                       ckpt="full" if r["recompute"] == "full" else "none",
                       sharding="zero1" if megatron else ("fsdp" if dp > 1 else "none"), tp=tp, pp=pp, cp=cp,
                       sp=tp > 1 and megatron,
                       vp=vp, framework="megatron" if megatron else "pytorch",
                       attention="flash" if megatron else "sdpa",
                       precision="fp8-mixed" if r["precision"].startswith("FP8") else "bf16-mixed")
        if task == "lora":
            req["training"]["method"] = "lora"
        if task == "lora" and not megatron:
            # AutoModel's LoRA recipes: PeftConfig(match_all_linear, dim 16, use_triton=True) on its own Llama / Qwen2
            # with combined qkv_proj / gate_up_proj (the citation's config file): fused adapters
            req["training"].update(lora_rank=16, lora_kernel="fused")
        if task == "lora" and megatron:
            # NeMo 1.x's default LoRA (megatron_gpt_finetuning_config.yaml: target_modules ['attention_qkv'],
            # adapter_dim 32) and Megatron-Bridge's LoRA perf recipe (peft.target_modules = ["linear_qkv"], dim 32)
            req["training"].update(lora_targets="qkv", lora_rank=32)
        if task in ("sft", "lora") and megatron:
            # NeMo / Megatron-Bridge fine-tuning packs SQuAD v1.1 to the sequence length (the NeMo table says so);
            # a SQuAD prompt (context, question, answer: ~150 words) is ~256 tokens -- an assumption
            req["training"]["packed_document_tokens"] = SQUAD_TOKENS
        rel = re.search(r"release ([\d.]+)", r["notes"])
        tag = name.lower().replace(".", "") + (r["model"].split()[1].lower() if source == "AutoModel" else "")
        cid = f"{source.lower()}-{tag}-{task}-g{gpus}-tp{tp}pp{pp}cp{cp}vp{vp}-gbs{gbs}"
        cid += f"-{rel.group(1)}" if rel else ""
        out.append(PublishedCase(cid, source, req, float(r["value"]), "h100-sxm5-80gb"))
    return out


def all_cases() -> list[PublishedCase]:
    return [*foundry(), *torchtitan(), *korthikanti(), *narayanan(), *megatron_core(), *nemo()]
