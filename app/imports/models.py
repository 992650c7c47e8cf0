"""A model named by its Hugging Face hub id (``meta-llama/Llama-3.1-8B``) as a capplan model: a preset when one
has that shape, else the ``config.json`` in the local Hugging Face cache, else nothing (the report asks for the
config; nothing is downloaded).

Presets are matched by the hub id in their ``source`` (estimator/data/model_presets.yaml) and by the repository
name without the suffixes that do not change the shape (``-hf``, ``-Instruct``, ``-it``, ``-chat``, ``-base``,
``-v0.1``/``-v0.2``, ``-fp16``/``-bf16`` re-uploads), with ``Meta-`` dropped (``NousResearch/Meta-Llama-3.1-8B``
is ``llama-3.1-8b``). Llama 3 and
Llama 3.1 of one size share every shape field of ``config.json`` (only the RoPE scaling and the context length
differ), so ``Meta-Llama-3-8B`` is sized as ``llama-3.1-8b``.

The cache layout is huggingface_hub's (``huggingface_hub/constants.py``: ``HF_HUB_CACHE``, else
``HF_HOME/hub``, else ``~/.cache/huggingface/hub``; ``models--{org}--{name}/refs/main`` names the snapshot under
``snapshots/``).
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

from estimator.model.spec import list_presets, parse_hf_config

__all__ = ["hf_cache_config", "preset_for"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
_SUFFIXES = ("-hf", "-instruct", "-it", "-chat", "-base", "-v0.1", "-v0.2", "-fp16", "-bf16")
#: the same config.json shape under another name (see the module docstring)
_SAME_SHAPE = {"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b"}


def _normal(name: str) -> str:
    name = name.lower().rsplit("/", 1)[-1]
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if name.endswith(suffix):
                name, changed = name[: -len(suffix)], True
    if name.startswith("meta-llama-"):
        name = name[len("meta-"):]
    return _SAME_SHAPE.get(name, name)


@cache
def _index() -> dict[str, str]:
    out: dict[str, str] = {}
    for p in list_presets():
        out[p["id"]] = p["id"]
        first = str(p["source"]).split()[0] if p["source"] else ""
        if "/" in first:
            out[first.lower()] = p["id"]
            out.setdefault(_normal(first), p["id"])
    return out


def preset_for(model_id: str) -> str | None:
    """The preset id for a hub id or a preset name, or ``None``."""
    index = _index()
    key = model_id.strip().lower()
    return index.get(key) or index.get(_normal(key))


def _cache_roots() -> list[Path]:
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"])]
    if env.get("HF_HOME"):
        return [Path(env["HF_HOME"]) / "hub"]
    xdg = env.get("XDG_CACHE_HOME")
    return [Path(xdg) / "huggingface" / "hub" if xdg else Path.home() / ".cache" / "huggingface" / "hub"]


def hf_cache_config(model_id: str) -> dict[str, Any] | None:
    """``config.json`` of ``model_id`` from the local Hugging Face cache (the snapshot ``refs/main`` names, else
    any snapshot), if it is there and capplan can read the shape; ``None`` otherwise."""
    if not _HUB_ID.match(model_id) or ".." in model_id:
        return None
    org, name = model_id.split("/")
    for root in _cache_roots():
        repo = root / f"models--{org}--{name}"
        snapshots = repo / "snapshots"
        if not snapshots.is_dir():
            continue
        candidates: list[Path] = []
        ref = repo / "refs" / "main"
        if ref.is_file():
            commit = ref.read_text(encoding="utf-8").strip()
            if re.fullmatch(r"[0-9a-f]{40}", commit):
                candidates.append(snapshots / commit / "config.json")
        candidates += sorted(snapshots.glob("*/config.json"))
        for path in candidates:
            try:
                if not path.is_file() or path.stat().st_size > 1 << 20:
                    continue
                cfg = json.loads(path.read_text(encoding="utf-8"))
                parse_hf_config(cfg)
            except Exception:  # an unreadable cached config is the same as none
                continue
            if isinstance(cfg, dict):
                return cfg
    return None
