"""Bring your own config (issue 30): read the configs a team already has into an :class:`EstimateRequest` and a
reading report.

Formats (one module each under :mod:`app.imports.formats`): axolotl, LLaMA-Factory, Hugging Face
``TrainingArguments`` / TRL ``SFTConfig`` (YAML, JSON or command-line flags), torchtune recipes, DeepSpeed JSON,
accelerate config YAML, torchtitan TOML and overrides, Megatron-LM / NeMo arguments (command lines or launch
scripts), and a Hugging Face ``config.json`` for the model. The format is detected from the content unless given.

Several files make one request (:func:`import_files`): a model config first, then the trainer-level files, then
DeepSpeed (whose ``"auto"`` values resolve from the trainer arguments), then accelerate. A value two files set
differently is refused naming both keys. Every problem is an :class:`ImportProblem` naming the file and key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.imports import safe
from app.imports.core import Reader, Report
from app.imports.formats import (
    accelerate,
    axolotl,
    cmdline,
    deepspeed,
    llamafactory,
    megatron,
    torchtitan,
    torchtune,
    trainer,
)
from app.imports.safe import ImportProblem
from estimator.errors import EstimatorError
from estimator.model.spec import parse_hf_config
from estimator.request import EstimateRequest

__all__ = ["FORMATS", "ImportProblem", "ImportResult", "SourceFile", "detect", "import_files"]

#: every format name ``--format`` / the API's ``format`` accepts
FORMATS = ("axolotl", "llama-factory", "trainer", "torchtune", "deepspeed", "accelerate", "torchtitan", "megatron",
           "hf-config")
MAX_FILES = 8
_ORDER = {"hf-config": 0, "axolotl": 1, "llama-factory": 1, "trainer": 1, "torchtune": 1, "torchtitan": 2,
          "megatron": 2, "deepspeed": 3, "accelerate": 4}
_TOML_HEADER = re.compile(r"^\s*\[[\w.\-\"]+\]\s*(#.*)?$", re.M)
_LAUNCH = re.compile(r"(^#!|\btorchrun\b|\bpretrain_\w+\.py\b|\bpython3?\s+\S+\.py\b|^\s*--[a-z]|\bdeepspeed\s+"
                     r"--|\baccelerate\s+launch\b|\btorchtitan\.train\b)", re.M)


@dataclass
class SourceFile:
    name: str
    content: str
    format: str | None = None


@dataclass
class ImportResult:
    request: EstimateRequest
    report: Report

    def as_dict(self) -> dict[str, Any]:
        return {"request": self.request.model_dump(mode="json", exclude_unset=True), "report": self.report.as_dict()}


@dataclass
class _Parsed:
    file: SourceFile
    format: str
    doc: Any


def _is_hf_config(doc: Any) -> bool:
    return isinstance(doc, dict) and "model_type" in doc and any(
        k in doc for k in ("architectures", "num_hidden_layers", "hidden_size", "n_layer", "text_config"))


def _mapping_format(doc: dict[str, Any]) -> str | None:
    if _is_hf_config(doc):
        return "hf-config"
    if "base_model" in doc:
        return "axolotl"
    if torchtune.is_torchtune(doc):
        return "torchtune"
    if deepspeed.is_deepspeed(doc) and "model_name_or_path" not in doc:
        return "deepspeed"
    if torchtitan.is_torchtitan(doc):
        return "torchtitan"
    if accelerate.is_accelerate(doc):
        return "accelerate"
    if any(k in doc for k in ("finetuning_type", "cutoff_len", "template", "stage", "quantization_bit")):
        return "llama-factory"
    if any(k in doc for k in ("per_device_train_batch_size", "model_name_or_path", "output_dir", "optim",
                              "gradient_accumulation_steps", "max_length", "max_seq_length")):
        return "trainer"
    return None


def _parse(f: SourceFile) -> _Parsed:
    name, text = f.name, f.content
    safe.check_size(name, text)
    fmt = f.format
    if fmt is not None and fmt not in FORMATS:
        raise ImportProblem(name, "format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    stripped = text.lstrip()
    if fmt in ("megatron",) or (fmt is None and not stripped.startswith(("{", "[")) and _LAUNCH.search(text)
                                and not _TOML_HEADER.search(text)):
        return _parse_cmdline(f, fmt)
    if stripped.startswith("{") or (fmt in ("deepspeed", "hf-config") and stripped.startswith("[")):
        doc = safe.load_json(name, text)
    elif fmt == "torchtitan" or (fmt is None and _TOML_HEADER.search(text) and not stripped.startswith("-")):
        doc = safe.load_toml(name, text)
    else:
        doc = safe.load_yaml(name, text)
    if isinstance(doc, str) and fmt is None:
        return _parse_cmdline(f, fmt)
    if not isinstance(doc, dict):
        raise ImportProblem(name, "", "is not a mapping of settings (a YAML/JSON/TOML config, or a command line)")
    found = fmt or _mapping_format(doc)
    if found is None:
        keys = ", ".join(list(map(str, doc))[:6])
        raise ImportProblem(name, "", f"cannot tell which tool's config this is (keys: {keys}); give the format "
                            f"({', '.join(FORMATS)})")
    if found == "torchtitan":
        doc = torchtitan.flatten(doc)
    return _Parsed(f, found, doc)


def _parse_cmdline(f: SourceFile, fmt: str | None) -> _Parsed:
    opts = cmdline.options(cmdline.tokens(f.name, f.content))
    names = {n for n, _ in opts}
    if fmt == "torchtitan" or (fmt is None and (any(n.startswith(("job.", "parallelism.", "training.",
                                                                    "activation_checkpoint.")) for n in names)
                                                or "@torchtitan.train" in names)):
        return _Parsed(f, "torchtitan-cmdline", opts)
    if fmt == "megatron" or (fmt is None and megatron.is_megatron(opts)):
        return _Parsed(f, "megatron", opts)
    if fmt == "trainer" or (fmt is None and names & {"deepspeed", "per_device_train_batch_size", "model_name_or_path",
                                                     "output_dir", "gradient_accumulation_steps", "fsdp"}):
        return _Parsed(f, "trainer-cmdline", opts)
    if fmt is None:
        raise ImportProblem(f.name, "", "a command line, but not one capplan reads (Megatron-LM / NeMo arguments, "
                            "torchtitan overrides, or Hugging Face TrainingArguments flags)")
    raise ImportProblem(f.name, "format", f"a command line cannot be read as {fmt}")


def detect(f: SourceFile) -> str:
    """The format of one file, as :func:`import_files` would read it."""
    return _parse(f).format.replace("-cmdline", "")


def _launcher(r: Reader, opts: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """torchrun / deepspeed / accelerate launcher options: the hardware; the rest returned."""
    rest = []
    for name, value in opts:
        flag = name.replace("_", "-")
        if flag in ("nproc-per-node", "num-gpus", "num-processes") and value and value.isdigit():
            r.context["procs"] = (f"--{name}", int(value))
        elif flag in ("nnodes", "num-nodes", "num-machines") and value and value.split(":")[0].isdigit():
            r.context["nodes"] = (f"--{name}", int(value.split(":")[0]))
        elif flag in ("standalone", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "node-rank", "master-addr",
                      "master-port", "config-file", "config_file"):
            r.no_effect(f"--{name}")
        else:
            rest.append((name, value))
    procs, nodes = r.context.get("procs"), r.context.get("nodes")
    if procs:
        r.set("hardware.gpus_per_node", procs[1], procs[0], procs[1])
    if nodes:
        r.set("hardware.num_nodes", nodes[1], nodes[0], nodes[1])
    return rest


#: the formats whose document one reader takes as parsed (the command lines and torchtitan's TOML + overrides are
#: assembled first, in :func:`_read`)
_READERS: dict[str, Callable[[Reader, Any], None]] = {
    "axolotl": axolotl.read, "llama-factory": llamafactory.read, "trainer": trainer.read,
    "torchtune": torchtune.read, "deepspeed": deepspeed.read, "accelerate": accelerate.read,
    "megatron": megatron.read,
}
#: the formats of a trainer's own file (DeepSpeed "auto" values resolve from it)
_TRAINER_FORMATS = frozenset({"axolotl", "llama-factory", "trainer", "trainer-cmdline", "torchtune"})


def _read(r: Reader, p: _Parsed, parsed: list[_Parsed]) -> None:
    r.file = p.file.name
    fmt = p.format
    if fmt == "hf-config":
        try:
            parse_hf_config(p.doc)
        except EstimatorError as exc:
            raise ImportProblem(p.file.name, exc.field or "", exc.message) from None
        r.set("model", {"hf_config": p.doc}, "(config.json)", p.doc.get("model_type"), note="the model's config.json",
              overrides=True)
        r.report.needs[:] = [n for n in r.report.needs if not n.startswith("model:")]
        r.context["model_file"] = p.file.name
        return
    if fmt in _TRAINER_FORMATS:
        r.context["trainer"] = True
    if fmt in _READERS:
        _READERS[fmt](r, p.doc)
    elif fmt == "trainer-cmdline":
        rest = _launcher(r, p.doc)
        trainer.read(r, {n: (True if v is None else v) for n, v in rest if not n.startswith("@")})
    elif fmt in ("torchtitan", "torchtitan-cmdline"):
        values: dict[str, Any] = {}
        if fmt == "torchtitan-cmdline":
            rest = _launcher(r, p.doc)
            toml_name = next((v for n, v in rest if n == "job.config_file"), None)
            base = next((q for q in parsed if q.format == "torchtitan" and toml_name and
                         q.file.name.rsplit("/", 1)[-1] == toml_name.rsplit("/", 1)[-1]), None)
            if base is not None:
                values.update(base.doc)
            for n, v in rest:
                if n.startswith("@") or n == "job.config_file":
                    continue
                values[n] = True if v is None else v
        else:
            values = dict(p.doc)
        torchtitan.read(r, values)


def import_files(files: list[SourceFile]) -> ImportResult:
    """Read ``files`` into one request and its report."""
    if not files:
        raise ImportProblem("(files)", "", "no file given")
    if len(files) > MAX_FILES:
        raise ImportProblem("(files)", "", f"{len(files)} files: at most {MAX_FILES}")
    parsed = [_parse(f) for f in files]
    # a torchtitan TOML named by a torchtitan command line is read through it (the command line overrides it)
    named = {v.rsplit("/", 1)[-1] for p in parsed if p.format == "torchtitan-cmdline" for n, v in p.doc
             if n == "job.config_file" and v}
    reading = [p for p in parsed if not (p.format == "torchtitan" and p.file.name.rsplit("/", 1)[-1] in named)]
    reading.sort(key=lambda p: _ORDER.get(p.format.replace("-cmdline", ""), 1))
    r = Reader()
    for p in parsed:
        r.report.files.append({"name": p.file.name, "format": p.format.replace("-cmdline", " (command line)")})
    for p in reading:
        try:
            _read(r, p, parsed)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, ZeroDivisionError, OverflowError) as exc:
            # a value of a type the reader does not expect (a list where a number goes): named, never a 500
            raise ImportProblem(p.file.name, "", f"cannot read a value ({type(exc).__name__}: {exc})"[:300]) from None
    r.file = "(import)"
    _finish(r, parsed)
    return ImportResult(r.request(), r.report)


def _finish(r: Reader, parsed: list[_Parsed]) -> None:
    formats = {p.format for p in parsed}
    ds_file = r.context.get("deepspeed_file") or r.context.get("deepspeed_inline")
    if r.context.get("deepspeed_inline"):
        _key, doc = r.context["deepspeed_inline"]
        r.file = "(inline deepspeed)"
        deepspeed.read(r, doc)
    elif ds_file and "deepspeed" not in formats:
        r.report.needs.append(f"DeepSpeed config {ds_file[1]!r} (named by {ds_file[0]}): add it as one more file; "
                              "until then the ZeRO stage and offload are capplan's defaults")
    fsdp_file = r.context.get("fsdp_config_file")
    if fsdp_file and "accelerate" not in formats:
        r.report.needs.append(f"FSDP config {fsdp_file[1]!r} (named by {fsdp_file[0]}): add it as one more file")
    dp = r.context.get("dp")
    if dp is not None and not r.has("hardware.gpus_per_node"):
        n = dp[1] * r.get("parallelism.tp", 1) * r.get("parallelism.pp", 1) * r.get("parallelism.cp", 1)
        per_node = n if n <= 8 else 8
        if n % per_node == 0:
            r.set("hardware.gpus_per_node", per_node, dp[0], dp[1], note="from the data-parallel size",
                  explicit=False)
            r.set("hardware.num_nodes", n // per_node, dp[0], dp[1], explicit=False)
    if not r.has("hardware.gpus_per_node"):
        r.default("hardware.gpus_per_node", 8, "the files do not say how many GPUs: one 8-GPU node")
        r.default("hardware.num_nodes", 1, "the files do not say how many nodes")
    if not r.has("model") and not any(n.startswith("model:") for n in r.report.needs):
        r.report.needs.append("model: the files name no model: add its config.json or name a preset")
    if not r.has("model"):
        r.report.defaults.append({"field": "model", "value": EstimateRequest.model_fields["model"].default,
                                  "why": "no readable model in the files: capplan's default model until one is "
                                  "given"})


def result_json(result: ImportResult) -> str:
    return json.dumps(result.as_dict(), indent=2)
