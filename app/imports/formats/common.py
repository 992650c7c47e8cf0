"""Readings several formats share: the model id, Hugging Face optimizer names, attention implementations,
LoRA targets, integer and boolean values with their key named on error."""

from __future__ import annotations

import re
from typing import Any

from app.imports.core import Reader
from app.imports.models import hf_cache_config, preset_for
from app.imports.safe import ImportProblem

__all__ = ["as_bool", "as_int", "attention", "hf_optimizer", "lora_targets", "model_id", "walk", "words"]


def words(text: str) -> frozenset[str]:
    """The whitespace-separated names of ``text`` (the long key lists of each format)."""
    return frozenset(text.split())

#: Hugging Face ``TrainingArguments.optim`` (``transformers/training_args.py`` ``OptimizerNames``; axolotl and
#: LLaMA-Factory pass it through) -> (optimizer, implementation, stack optimizer or None, what differs)
_OPTIM: dict[str, tuple[str, str | None, str | None, str]] = {
    "adamw_torch": ("adamw", "foreach", None, ""),  # torch.optim.AdamW, foreach by default on CUDA
    "adamw_torch_fused": ("adamw", "fused", None, ""),
    "adamw_hf": ("adamw", "for-loop", None, ""),
    "adamw_apex_fused": ("adamw", "fused", None, ""),
    "adamw_bnb_8bit": ("adamw-8bit", None, None, ""),
    "adamw_8bit": ("adamw-8bit", None, None, ""),
    "adamw_torch_8bit": ("adamw-8bit", None, "ao-adamw-8bit", "torchao 8-bit AdamW (not bitsandbytes): a 256-element "
                         "block per fp32 scale, its step compiled per parameter"),
    "paged_adamw_8bit": ("adamw-8bit", None, "paged-adamw-8bit", "bitsandbytes paged 8-bit AdamW: states in CUDA "
                         "unified memory, evicted to the host under memory pressure"),
    "paged_adamw_32bit": ("adamw", None, "paged-adamw", "bitsandbytes paged AdamW: 32-bit states in CUDA unified "
                          "memory, evicted to the host under memory pressure"),
    "paged_adamw": ("adamw", None, "paged-adamw", "bitsandbytes paged AdamW (32-bit states in unified memory)"),
    "adamw_torch_4bit": ("adamw-8bit", None, "adamw-4bit", "torchao 4-bit AdamW states (half of 8-bit's)"),
    "adamw_4bit": ("adamw-8bit", None, "adamw-4bit", "torchao 4-bit AdamW states (half of 8-bit's)"),
    "muon": ("adamw", None, "muon", "Muon: one momentum buffer per 2-D matrix (AdamW for the rest); under FSDP2 "
             "Newton-Schulz runs on DTensor shards, bound by the host's dispatch"),
    "adafactor": ("adafactor", None, None, ""),
    "sgd": ("sgd", None, None, ""),
    "lion_32bit": ("lion", None, None, ""),
    "lion_8bit": ("lion", None, None, "8-bit Lion state (bitsandbytes): sized as 32-bit Lion"),
    "paged_lion_32bit": ("lion", None, None, "paged Lion (unified memory): sized as Lion"),
    "paged_lion_8bit": ("lion", None, None, "paged 8-bit Lion: sized as 32-bit Lion"),
}


def walk(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Leaf keys of nested mappings as (dotted key, value); lists are leaves."""
    if not isinstance(value, dict):
        return [(prefix, value)]
    out: list[tuple[str, Any]] = []
    for k, v in value.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out += walk(v, key) if isinstance(v, dict) and v else [(key, v)]
    return out


def as_int(r: Reader, key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ImportProblem(r.file, key, f"must be a whole number, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d[\d_]*", value.strip()):
        return int(value.strip().replace("_", ""))
    raise ImportProblem(r.file, key, f"must be a whole number, not {value!r}")


def as_bool(r: Reader, key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0", "auto"):
        return value.strip().lower() in ("true", "yes", "1", "auto")
    if isinstance(value, int):
        return bool(value)
    raise ImportProblem(r.file, key, f"must be true or false, not {value!r}")


def model_id(r: Reader, key: str, value: Any) -> None:
    """The model named by ``value`` (a hub id or preset id): a preset, the cached config.json, or a need."""
    if not isinstance(value, str) or not value.strip():
        raise ImportProblem(r.file, key, f"must be a model id such as meta-llama/Llama-3.1-8B, not {value!r}")
    name = value.strip()
    given = r.context.get("model_file")
    if given:
        r.report.read.append({"file": r.file, "key": key, "value": name, "field": "model", "set": "(config.json)",
                              "note": f"the shape from {given}"})
        return
    found = preset_for(name)
    if found is not None:
        r.set("model", found, key, name, note="capplan preset")
        return
    cfg = hf_cache_config(name)
    if cfg is not None:
        r.set("model", {"hf_config": cfg}, key, name, note="config.json from the local Hugging Face cache")
        return
    r.context["model_id"] = name
    r.report.needs.append(f"model: {name!r} is not a capplan preset and its config.json is not in the local "
                          "Hugging Face cache: add the config.json as one more file (or name a preset)")


def hf_optimizer(r: Reader, key: str, value: Any) -> None:
    name = str(value).strip().lower()
    entry = _OPTIM.get(name)
    if entry is None:
        r.unrepresented(key, value, "an optimizer capplan does not size; estimated as adamw",
                        maps_to=None)
        r.set("training.optimizer", "adamw", key, value, note="nearest represented optimizer", explicit=False)
        return
    optimizer, impl, stack, note = entry
    if stack is not None:
        r.stack("training.optimizer", stack, key, value, note, fallback=("training.optimizer", optimizer))
    else:
        if note:
            r.unrepresented(key, value, note)
        r.set("training.optimizer", optimizer, key, value)
    if impl is not None:
        r.set("training.optimizer_impl", impl, key, value)


def attention(r: Reader, key: str, value: Any) -> None:
    name = str(value).strip().lower()
    if name.startswith(("flash", "kernels-community/")) or name in ("fa2", "fa3", "fa"):
        r.set("training.attention", "flash", key, value)
    elif name in ("sdpa", "sdp", "sdp_attention", "flex_attention", "flex"):
        if name.startswith("flex"):
            r.unrepresented(key, value, "FlexAttention: sized as SDPA (memory-efficient kernel)")
        r.set("training.attention", "sdpa", key, value)
    elif name == "eager":
        r.set("training.attention", "eager", key, value)
    else:
        r.unrepresented(key, value, "an attention kernel capplan does not know; the flash default kept")


_ATTN = {"q", "k", "v", "o"}
_MLP = {"gate", "up", "down"}
_ALIASES = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "output_proj": "o", "out_proj": "o",
            "gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w3": "up", "w2": "down",
            "wq": "q", "wk": "k", "wv": "v", "wo": "o", "query": "q", "key": "k", "value": "v",
            "qkv_proj": "qkv", "gate_up_proj": "gate_up", "linear_qkv": "qkv", "linear_proj": "o",
            "linear_fc1": "gate_up", "linear_fc2": "down"}


def lora_targets(r: Reader, key: str, value: Any) -> None:
    """peft ``target_modules`` (a list, a comma list, or "all-linear") as capplan's three choices."""
    if isinstance(value, str):
        if value.strip().lower() in ("all", "all-linear", "all_linear"):
            r.set("training.lora_targets", "all-linear", key, value)
            return
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, list):
        items = [str(v) for v in value]
    else:
        raise ImportProblem(r.file, key, f"must be a list of module names or \"all-linear\", not {value!r}")
    names: set[str] = set()
    for item in items:
        short = item.rsplit(".", 1)[-1]
        alias = _ALIASES.get(short, short)
        names |= {"q", "k", "v"} if alias == "qkv" else {"gate", "up"} if alias == "gate_up" else {alias}
    if names >= _ATTN | _MLP:
        choice, exact = "all-linear", names == _ATTN | _MLP
    elif names == _ATTN:
        choice, exact = "attention", True
    elif names == {"q", "k", "v"}:
        choice, exact = "qkv", True
    else:
        choice, exact = ("all-linear" if names & _MLP else "attention" if "o" in names else "qkv"), False
    r.set("training.lora_targets", choice, key, value)
    if not exact:
        r.unrepresented(key, value, f"LoRA on {', '.join(sorted(names))}: capplan sizes all-linear, attention or "
                        f"q/k/v adapters; sized as {choice}")
