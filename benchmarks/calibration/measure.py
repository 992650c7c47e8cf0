"""Measure real training memory and step time for the cases in cases.py, one forked process per case.

Driver:  python3 benchmarks/calibration/measure.py --call 1 --out DIR [--deadline 540] [--git-sha SHA]
Dry run: python3 benchmarks/calibration/measure.py --dry-run --out /tmp/dry   (CPU, tiny shapes, same code path)

The driver imports torch/transformers once, never touches CUDA itself, and forks one child per case
(a fresh CUDA context and caching allocator each time; peft and bitsandbytes are imported in the child).
The child writes one JSON result; the driver appends it to DIR/results.jsonl at once, so a timeout or a
crash still leaves every finished case. Semantics are in docs/calibration-method.md.
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import hashlib
import json
import multiprocessing as mp
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Keep the driver from initialising the CUDA driver (torch.cuda.is_available() called at import time by a
# library would otherwise do it), so that forked children can create their own context.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases as cases_mod  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402


def shared_module(name: str) -> Any:
    """A torch-only module of ``app/check/`` shared with ``capplan check`` (one implementation): beside this file on
    the GPU machine (copied there, docs/check.md), else loaded from the repository by its path (it imports no
    capplan package)."""
    import importlib
    import importlib.util

    try:
        return importlib.import_module(name)
    except ImportError:
        path = HERE.parents[1] / "app" / "check" / f"{name}.py"
        if not path.exists():
            sys.exit(f"measure.py needs {name}.py beside it (copy app/check/{name}.py into {HERE})")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod


random_init = shared_module("random_init")
gpu_memory = shared_module("gpu_memory")

#: one implementation with ``capplan check`` (app/check/random_init.py): tied-weight-keeping ``to_empty`` and the
#: random weights (normal(0, 0.02) matrices, zero LoRA B and biases, unit norms, rotary buffers rebuilt)
materialize = random_init.materialize
init_weights = random_init.init_weights

# peft and bitsandbytes are imported in the case's child process only: importing bitsandbytes initialises CUDA
# (it reads the device's compute capability), and peft imports bitsandbytes when it is installed, so either in
# the driver would stop forked children from creating their own CUDA context.

GIB = 1024**3
_STATE: dict[str, Any] = {"phase": "start", "step": 0}


# ----------------------------------------------------------------------------------------------- helpers
#: one implementation with ``capplan check --run`` (app/check/gpu_memory.py): NVML memory info version 2
_nvml = gpu_memory.nvml
_nvml_mem = gpu_memory.nvml_memory


def _nvml_proc_used(nv, h) -> int | None:
    if nv is None:
        return None
    try:
        for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == os.getpid() and p.usedGpuMemory is not None:
                return int(p.usedGpuMemory)
    except Exception:
        return None
    return None


def _nvml_clocks(nv, h) -> dict[str, Any] | None:
    if nv is None:
        return None
    out: dict[str, Any] = {}
    for key, fn in (("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                    ("mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
                    ("temperature_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                    ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)):
        try:
            out[key] = fn()
        except Exception:
            out[key] = None
    return out


def dry_shrink(case: dict[str, Any]) -> dict[str, Any]:
    """Tiny shapes for the CPU dry run; same structure (GQA, bias, ties, MoE, head_dim)."""
    c = copy.deepcopy(case)
    a = c["request"]["model"]
    heads = 4
    kv = heads if (a.get("num_kv_heads") or a["num_attention_heads"]) == a["num_attention_heads"] else 2
    a.update(num_layers=2, hidden_size=64, num_attention_heads=heads, num_kv_heads=kv, ffn_hidden_size=128,
             vocab_size=512)
    if a.get("head_dim"):
        a["head_dim"] = 32
    if a.get("sliding_window"):
        a["sliding_window"] = 16
    t = c["request"]["training"]
    t["seq_len"] = 32
    t["micro_batch_size"] = min(2, t["micro_batch_size"])
    t["lora_rank"] = min(4, t.get("lora_rank", 4))
    c["steps"], c["timed_steps"] = 2, 2
    c["hf_extra"] = {k: v for k, v in c["hf_extra"].items() if k != "max_position_embeddings"}
    c["hf_extra"]["max_position_embeddings"] = 8192 if c["hf_arch"] == "llama" else 128
    return c


def hf_config(case: dict[str, Any]):
    a = case["request"]["model"]
    kw: dict[str, Any] = dict(
        num_hidden_layers=a["num_layers"], hidden_size=a["hidden_size"],
        num_attention_heads=a["num_attention_heads"],
        num_key_value_heads=a.get("num_kv_heads") or a["num_attention_heads"],
        intermediate_size=a["ffn_hidden_size"], vocab_size=a["vocab_size"],
        tie_word_embeddings=bool(a.get("tied_embeddings", False)), use_cache=False,
    )
    if a.get("head_dim"):
        kw["head_dim"] = a["head_dim"]
    extra = dict(case["hf_extra"])
    arch = case["hf_arch"]
    if arch == "llama":
        from transformers import LlamaConfig as C

        kw["attention_bias"] = bool(a.get("attention_bias", False))
        kw["mlp_bias"] = bool(a.get("mlp_bias", False))
    elif arch == "mistral":
        from transformers import MistralConfig as C
    elif arch == "qwen2":
        from transformers import Qwen2Config as C
    elif arch == "gemma2":
        from transformers import Gemma2Config as C

        kw["sliding_window"] = a.get("sliding_window")
    elif arch == "mixtral":
        from transformers import MixtralConfig as C

        kw["num_local_experts"] = a["num_experts"]
        kw["num_experts_per_tok"] = a["experts_per_token"]
    else:
        raise ValueError(arch)
    kw.update(extra)
    return C(**kw)


def _sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def _peak(dev: str) -> dict[str, int]:
    if dev != "cuda":
        return {"alloc": 0, "reserved": 0, "now": 0}
    return {"alloc": int(torch.cuda.max_memory_allocated()), "reserved": int(torch.cuda.max_memory_reserved()),
            "now": int(torch.cuda.memory_allocated())}


def _reset(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _fake_oom(phase: str, step: int) -> None:
    want = os.environ.get("CALIB_FAKE_OOM")  # dry-run test hook: "phase:step"
    if want and want == f"{phase}:{step}":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB (simulated)")


# ------------------------------------------------------------------------------------------------ QLoRA
def bnb_4bit_config():
    """The QLoRA recipe (Dettmers et al. 2023): NF4, double quantisation, bf16 compute, uint8 storage."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_storage=torch.uint8)


def replace_linears_4bit(model: nn.Module, bnb_cfg) -> str:
    """Swap every decoder nn.Linear for a (meta) bnb Linear4bit, keeping the LM head, as from_pretrained does.

    Uses transformers' own ``replace_with_bnb_linear`` (what ``from_pretrained(quantization_config=...)`` calls
    before loading weights); falls back to the same swap written out if its signature differs."""
    import bitsandbytes as bnb

    try:
        from transformers.integrations.bitsandbytes import replace_with_bnb_linear

        replace_with_bnb_linear(model, modules_to_not_convert=["lm_head"], quantization_config=bnb_cfg)
        how = "transformers.integrations.bitsandbytes.replace_with_bnb_linear(modules_to_not_convert=['lm_head'])"
    except Exception as e:  # a signature or behaviour change across transformers versions
        fallback_reason = f"{type(e).__name__}: {e}"[:200]
        for name, mod in list(model.named_modules()):
            if type(mod) is nn.Linear and not name.endswith("lm_head"):
                with torch.device("meta"):
                    new = bnb.nn.Linear4bit(mod.in_features, mod.out_features, mod.bias is not None,
                                            torch.bfloat16, compress_statistics=True, quant_type="nf4",
                                            quant_storage=torch.uint8)
                new.requires_grad_(False)
                model.set_submodule(name, new)
        how = f"own swap nn.Linear -> bnb.nn.Linear4bit (transformers' replace_with_bnb_linear: {fallback_reason})"
    n = sum(isinstance(mm, bnb.nn.Linear4bit) for mm in model.modules())
    if n == 0:
        raise RuntimeError("no linear was replaced by Linear4bit")
    return how


@torch.no_grad()
def quantize_linears_4bit(model: nn.Module, device: str, source: dict[str, torch.Tensor] | None = None) -> int:
    """Give each Linear4bit random bf16 weights on the device (or ``source[name + ".weight"]``) and quantise them
    there, exactly as transformers' Bnb4bitQuantize does while loading:
    ``Params4bit(value, requires_grad=False, **old.__dict__).to(device)``. One layer's bf16 weight exists at a
    time; the packed uint8 weight and its quant_state stay."""
    import bitsandbytes as bnb

    gen = torch.Generator(device=device)
    gen.manual_seed(4321)
    n = 0
    for name, mod in model.named_modules():
        if isinstance(mod, bnb.nn.Linear4bit):
            old = mod.weight
            if source is not None:
                w = source[name + ".weight"].to(device=device, dtype=torch.bfloat16)
            else:
                w = torch.empty(mod.out_features, mod.in_features, dtype=torch.bfloat16, device=device)
                w.normal_(0.0, 0.02, generator=gen)
            mod.weight = bnb.nn.Params4bit(w, requires_grad=False, **old.__dict__).to(w.device)
            del w, old
            n += 1
    return n


def quant_layout(model: nn.Module) -> dict[str, int]:
    """Bytes of the NF4 weights by part (packed 4-bit data, absmax, nested absmax, code books) and of the rest."""
    import bitsandbytes as bnb

    out = {"linear4bit_modules": 0, "nf4_logical_params": 0, "packed_bytes": 0, "absmax_bytes": 0,
           "nested_absmax_bytes": 0, "code_bytes": 0, "other_param_bytes": 0}
    seen: set[int] = set()

    def add(key: str, t: torch.Tensor | None) -> None:
        if t is not None and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            out[key] += t.numel() * t.element_size()

    for mod in model.modules():
        if isinstance(mod, bnb.nn.Linear4bit):
            out["linear4bit_modules"] += 1
            out["nf4_logical_params"] += mod.in_features * mod.out_features
            qs = mod.weight.quant_state
            add("packed_bytes", mod.weight.data)
            add("absmax_bytes", qs.absmax)
            add("code_bytes", qs.code)
            if getattr(qs, "nested", False):
                add("nested_absmax_bytes", qs.state2.absmax)
                add("code_bytes", qs.state2.code)
                add("code_bytes", qs.offset if torch.is_tensor(qs.offset) else None)
    for p in model.parameters():
        if not isinstance(p, bnb.nn.Params4bit):
            out["other_param_bytes"] += p.numel() * p.element_size()
    out["absmax_dtype_uint8"] = int(all(
        mm.weight.quant_state.absmax.dtype == torch.uint8 for mm in model.modules()
        if isinstance(mm, bnb.nn.Linear4bit)))
    return out


def build_qlora(cfg, case: dict[str, Any], dev: str, attn: str, res: dict[str, Any]) -> nn.Module:
    """NF4 base built from the config with random weights (no download), then PEFT LoRA on all linears."""
    import bitsandbytes as bnb
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    tr = case["request"]["training"]
    bnb_cfg = bnb_4bit_config()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation=attn)
    model.config.use_cache = False
    how = replace_linears_4bit(model, bnb_cfg)
    materialize(model, dev, skip=lambda t: isinstance(t, bnb.nn.Params4bit))
    n4 = quantize_linears_4bit(model, dev)
    init_weights(model, dev)  # embeddings, norms, LM head (bf16); packed weights are skipped
    model.is_loaded_in_4bit = True  # what the bnb quantizer sets after loading; PEFT dispatches on it
    ckpt = tr["activation_checkpointing"]
    gc_kw = {"use_reentrant": False}
    prep = case.get("qlora_prep", "none")
    if prep == "kbit":
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=ckpt == "full",
                                                gradient_checkpointing_kwargs=gc_kw)
    elif ckpt == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kw)
    targets = "all-linear" if tr["lora_targets"] == "all-linear" else ["q_proj", "k_proj", "v_proj", "o_proj"]
    r = tr["lora_rank"]
    model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules=targets,
                                             lora_dropout=float(tr.get("lora_dropout", 0.0)), bias="none"))
    if case.get("input_require_grads"):
        model.enable_input_require_grads()
    lora_classes = sorted({f"{type(mm).__module__}.{type(mm).__name__}" for mm in model.modules()
                           if hasattr(mm, "lora_A") and isinstance(getattr(mm, "base_layer", None),
                                                                   bnb.nn.Linear4bit)})
    plain_lora = sum(1 for mm in model.modules() if hasattr(mm, "lora_A")
                     and not isinstance(getattr(mm, "base_layer", None), bnb.nn.Linear4bit))
    res["qlora"] = {
        "bnb_config": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
                       "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_storage": "uint8"},
        "build": ("AutoModelForCausalLM.from_config(dtype=bfloat16) on meta; " + how + "; embeddings, norms and "
                  "LM head materialised on the GPU in bf16; each Linear4bit given random bf16 weights on the GPU "
                  "and quantised by Params4bit(w, requires_grad=False, **old.__dict__).to(device) (transformers' "
                  "Bnb4bitQuantize); model.is_loaded_in_4bit = True; then PEFT get_peft_model"),
        "linear4bit_quantised": n4,
        "prepare_model_for_kbit_training": prep == "kbit",
        "lora_layer_classes": lora_classes,
        "lora_layers_not_on_4bit": plain_lora,
        "adapter_dtypes": sorted({str(p.dtype) for n, p in model.named_parameters() if "lora_" in n}),
        "layout": quant_layout(model),
        "bitsandbytes": getattr(bnb, "__version__", None),
    }
    if not lora_classes or plain_lora:
        raise RuntimeError(f"LoRA not on the 4-bit layers: {lora_classes} plain={plain_lora}")
    return model


def qlora_check(case: dict[str, Any], dev: str) -> dict[str, Any]:
    """Is the NF4 base built here laid out like ``from_pretrained(..., quantization_config=...)``'s?

    Saves a small bf16 model with ``case``'s layer shapes, loads it with transformers' bitsandbytes quantizer,
    then builds the same model the way build_qlora does from the same weights; compares the allocated bytes,
    the parameter names/dtypes/shapes, the packed weights and absmax byte for byte, and PEFT's LoRA layers."""
    import tempfile

    import bitsandbytes as bnb
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out: dict[str, Any] = {"case_shape": case["id"], "num_layers": case["request"]["model"]["num_layers"]}
    cfg = hf_config(case)

    def alloc() -> int:
        _sync(dev)
        return int(torch.cuda.memory_allocated()) if dev == "cuda" else 0

    def describe(model: nn.Module) -> dict[str, Any]:
        return {"params": sorted(f"{n}:{p.dtype}:{tuple(p.shape)}:{type(p).__name__}"
                                 for n, p in model.named_parameters()),
                "layout": quant_layout(model)}

    def lora_summary(model: nn.Module) -> dict[str, Any]:
        peft_model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                      lora_dropout=0.0, bias="none"))
        return {"trainable": int(sum(p.numel() for p in peft_model.parameters() if p.requires_grad)),
                "classes": sorted({type(mm).__name__ for mm in peft_model.modules() if hasattr(mm, "lora_A")})}

    with tempfile.TemporaryDirectory() as tmp:
        with torch.device("meta"):
            src = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        materialize(src, dev)
        init_weights(src, dev)
        src.save_pretrained(tmp)
        del src
        if dev == "cuda":
            torch.cuda.empty_cache()
        sd = load_file(str(Path(tmp) / "model.safetensors"))
        base = alloc()
        a = AutoModelForCausalLM.from_pretrained(tmp, quantization_config=bnb_4bit_config(), dtype=torch.bfloat16,
                                                 device_map={"": 0} if dev == "cuda" else {"": "cpu"},
                                                 attn_implementation="sdpa")
        out["from_pretrained_bytes"] = alloc() - base
        da = describe(a)
        qa = {n: (mm.weight.data.clone(), mm.weight.quant_state.absmax.clone())
              for n, mm in a.named_modules() if isinstance(mm, bnb.nn.Linear4bit)}
        out["from_pretrained_is_loaded_in_4bit"] = bool(getattr(a, "is_loaded_in_4bit", False))
        out["from_pretrained_lora"] = lora_summary(a)
        del a
        if dev == "cuda":
            torch.cuda.empty_cache()
        base = alloc()  # the kept copies of the loaded packed weights and absmax are in here
        with torch.device("meta"):
            b = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        b.config.use_cache = False
        out["build_how"] = replace_linears_4bit(b, bnb_4bit_config())
        materialize(b, dev, skip=lambda t: isinstance(t, bnb.nn.Params4bit))
        quantize_linears_4bit(b, dev, source=sd)
        init_weights(b, dev)
        b.is_loaded_in_4bit = True
        out["own_build_bytes"] = alloc() - base
        db = describe(b)
        out["params_equal"] = da["params"] == db["params"]
        out["params_only_from_pretrained"] = sorted(set(da["params"]) - set(db["params"]))[:20]
        out["params_only_own"] = sorted(set(db["params"]) - set(da["params"]))[:20]
        out["layout_from_pretrained"] = da["layout"]
        out["layout_own"] = db["layout"]
        out["layout_equal"] = da["layout"] == db["layout"]
        qb = {n: mm for n, mm in b.named_modules() if isinstance(mm, bnb.nn.Linear4bit)}
        out["packed_and_absmax_equal"] = bool(set(qa) == set(qb) and all(
            torch.equal(qa[n][0], qb[n].weight.data) and torch.equal(qa[n][1], qb[n].weight.quant_state.absmax)
            for n in qa))
        out["own_lora"] = lora_summary(b)
        out["lora_equal"] = out["own_lora"] == out["from_pretrained_lora"]
    return out


def qlora_check_worker(case: dict[str, Any], out_path: str, dry: bool) -> None:
    res: dict[str, Any] = {"id": "qlora-check"}
    try:
        res.update(qlora_check(case, "cpu" if dry else "cuda"))
        res["status"] = "ok"
    except Exception as e:
        res["status"] = "error"
        res["error"] = f"{type(e).__name__}: {e}"[:800]
        res["traceback"] = traceback.format_exc()[-3000:]
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)
    os._exit(0)


# -------------------------------------------------------------------------------------------- optimizers
def make_optimizer(tr: dict[str, Any], params: list[torch.Tensor]) -> tuple[Any, dict[str, Any]]:
    """The optimizer the request names, with the settings recorded."""
    name, impl = tr.get("optimizer", "adamw"), tr["optimizer_impl"]
    impl_kw: dict[str, Any] = ({"fused": True} if impl == "fused" else {"foreach": True} if impl == "foreach"
                               else {"foreach": False})
    if name == "adamw":
        kw: dict[str, Any] = {"lr": 1e-5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, **impl_kw}
        return torch.optim.AdamW(params, **kw), {"class": "torch.optim.AdamW",
                                                 **{k: v for k, v in kw.items() if k != "betas"}}
    if name == "adamw-8bit":
        import bitsandbytes as bnb

        kw = {"lr": 1e-5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
        opt = bnb.optim.AdamW8bit(params, **kw)
        args = {k: v for k, v in vars(opt.args).items() if isinstance(v, bool | int | float | str)}
        return opt, {"class": "bitsandbytes.optim.AdamW8bit", "lr": 1e-5, "eps": 1e-8, "weight_decay": 0.01,
                     "args": args, "is_paged": getattr(opt, "is_paged", None),
                     "bitsandbytes": getattr(bnb, "__version__", None)}
    if name == "sgd":
        kw = {"lr": 1e-5, "momentum": 0.9, "weight_decay": 0.0, **impl_kw}
        return torch.optim.SGD(params, **kw), {"class": "torch.optim.SGD", **kw}
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # The Hugging Face Trainer's optim="adafactor" settings: fixed lr, no parameter scaling, no momentum.
        kw = {"lr": 1e-5, "scale_parameter": False, "relative_step": False, "warmup_init": False,
              "weight_decay": 0.0, "beta1": None}
        return Adafactor(params, **kw), {"class": "transformers.optimization.Adafactor", **kw}
    raise ValueError(name)


def ddp_wrap(model: nn.Module, dev: str, bucket_view: bool, info: dict[str, Any]) -> nn.Module:
    """DistributedDataParallel over the (fake) default group; its reducer buckets are real allocations."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    kw: dict[str, Any] = {"device_ids": [0] if dev == "cuda" else None, "gradient_as_bucket_view": bucket_view}
    info.update({"class": "torch.nn.parallel.DistributedDataParallel", "gradient_as_bucket_view": bucket_view,
                 "bucket_cap_mb": 25, "broadcast_buffers": True, "find_unused_parameters": False,
                 "process_group": "fake", "world_size": dist.get_world_size()})
    try:
        ddp = DDP(model, **kw)
    except Exception as e:  # the fake group's all-gather leaves garbage, which the shape check may reject
        info["construct_error"] = f"{type(e).__name__}: {e}"[:300]
        real = dist._verify_params_across_processes
        dist._verify_params_across_processes = lambda *a, **k: None
        try:
            import torch.nn.parallel.distributed as ddp_mod

            saved = getattr(ddp_mod, "_verify_param_shape_across_processes", None)
            if saved is not None:
                ddp_mod._verify_param_shape_across_processes = lambda *a, **k: None
            info["verify_params_skipped"] = True
            ddp = DDP(model, **kw)
        finally:
            dist._verify_params_across_processes = real
            if saved is not None:
                ddp_mod._verify_param_shape_across_processes = saved
    world = dist.get_world_size()

    def local_allreduce_hook(_state, bucket):  # no annotations: DDP checks them against dist.GradBucket
        # The fake group's all-reduce future holds None, which the reducer rejects ("expected the hook result
        # is either a Tensor or a TensorList found None"). This hook does what DDP's built-in all-reduce does
        # to the bucket in torch's memory (divide by the world size in place, reduce in place) minus the wire.
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer().div_(world))
        return fut

    ddp.register_comm_hook(None, local_allreduce_hook)
    info["comm_hook"] = ("in-place bucket.buffer().div_(W) returned as a completed future (the fake group's "
                         "all-reduce returns None, which the reducer rejects); no communication")
    return ddp


# ------------------------------------------------------------------------------------ saved-tensor probe
def probe_saved(model: nn.Module, fwd: Any, dev: str) -> dict[str, Any]:
    """What autograd saves for backward in one forward, by decoder layer and by the innermost module that was
    running when the tensor was packed (``torch.autograd.graph.saved_tensors_hooks``). Each storage counts
    once (tensors sharing a storage, e.g. one input saved by q, k and v, are one entry); parameters and their
    views are left out. Run after the measured steps, so the peaks above do not include it."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    stack: list[str] = []
    hooks = []
    def enter(name: str) -> Any:
        def hook(_m: Any, _a: Any) -> None:
            stack.append(name)
        return hook

    def leave(_m: Any, _a: Any, _o: Any) -> None:  # returns None: the module's output is left as it is
        if stack:
            stack.pop()

    for name, mod in model.named_modules():
        hooks.append(mod.register_forward_pre_hook(enter(name)))
        hooks.append(mod.register_forward_hook(leave))
    seen: dict[int, tuple[str, int, str, list[int]]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            st = t.untyped_storage()
            ptr = st.data_ptr()
            if ptr not in params and ptr not in seen and st.nbytes() > 0:
                seen[ptr] = (stack[-1] if stack else "<root>", int(st.nbytes()), str(t.dtype), list(t.shape))
        except Exception:  # a tensor without a plain storage (e.g. a DTensor wrapper): skipped
            pass
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = fwd()
    finally:
        for h in hooks:
            h.remove()
    per_layer: dict[int, int] = {}
    by_module: dict[str, dict[str, int]] = {}
    outside = 0
    rx = re.compile(r"layers\.(\d+)\.(.*)$")
    for name, nbytes, dtype, _shape in seen.values():
        mt = rx.search(name)
        if not mt:
            outside += nbytes
            by_module.setdefault("<outside>:" + name.split(".")[-1], {}).setdefault(dtype, 0)
            by_module["<outside>:" + name.split(".")[-1]][dtype] += nbytes
            continue
        layer = int(mt.group(1))
        per_layer[layer] = per_layer.get(layer, 0) + nbytes
        if layer == 1:
            key = re.sub(r"\.default$", "", mt.group(2)) or "<layer>"
            by_module.setdefault(key, {}).setdefault(dtype, 0)
            by_module[key][dtype] += nbytes
    del loss
    _sync(dev)
    return {"per_layer_bytes": [per_layer.get(i, 0) for i in range(max(per_layer) + 1)] if per_layer else [],
            "layer1_by_module": by_module, "outside_layers_bytes": outside, "entries": len(seen)}


# ------------------------------------------------------------------------------------------------ worker
def run_case(case: dict[str, Any], res: dict[str, Any], dry: bool) -> None:
    dev = "cpu" if dry else "cuda"
    req = case["request"]
    tr = req["training"]
    W = case.get("world_size_fake")
    wrap = case.get("wrap") or ("fsdp2" if W else None)
    attn = tr.get("attention", "sdpa")
    method, prec = tr["method"], tr["precision"]
    mbs, seq = tr["micro_batch_size"], tr["seq_len"]
    ckpt = tr["activation_checkpointing"]
    m = res["measured"]

    nv, h = (None, None) if dry else _nvml()
    _STATE["phase"] = "init"
    before = _nvml_mem(nv, h)
    if dev == "cuda":
        torch.cuda.init()
        torch.empty(1, device=dev)
        torch.cuda.synchronize()
        after = _nvml_mem(nv, h)
        m["cuda_reserved_after_init_bytes"] = int(torch.cuda.memory_reserved())
        if before and after:
            m["nvml_used_before_init_bytes"] = before["used"]
            m["cuda_context_bytes"] = after["used"] - before["used"] - int(torch.cuda.memory_reserved())
        props = torch.cuda.get_device_properties(0)
        res["device"] = {"name": props.name, "total_memory_bytes": int(props.total_memory),
                         "capability": f"{props.major}.{props.minor}",
                         "multiprocessors": props.multi_processor_count,
                         "cudnn": torch.backends.cudnn.version()}
        if nv is not None:
            try:
                res["device"]["driver"] = nv.nvmlSystemGetDriverVersion()
                res["device"]["cuda_driver_version"] = nv.nvmlSystemGetCudaDriverVersion()
            except Exception:
                pass

    cfg = hf_config(case)
    if W:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=W)
        if wrap == "fsdp2":
            mesh = init_device_mesh(dev, (W,))

    _STATE["phase"] = "build"
    base_dtype = torch.bfloat16 if (method == "lora" or prec == "bf16-true") else torch.float32
    from transformers import AutoModelForCausalLM

    if ckpt not in ("none", "full"):
        raise ValueError(ckpt)
    if method == "qlora":
        if W:
            raise ValueError("QLoRA cases are single-GPU")
        model = build_qlora(cfg, case, dev, attn, res)
    with torch.device("meta"):
        if method != "qlora":
            model = AutoModelForCausalLM.from_config(cfg, dtype=base_dtype, attn_implementation=attn)
            model.config.use_cache = False
        if ckpt == "full" and method != "qlora":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if method == "lora":
            from peft import LoraConfig, get_peft_model

            targets = ("all-linear" if tr["lora_targets"] == "all-linear"
                       else ["q_proj", "k_proj", "v_proj", "o_proj"])
            r = tr["lora_rank"]
            model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules=targets,
                                                     lora_dropout=float(tr.get("lora_dropout", 0.0)),
                                                     bias="none"))
            if case.get("input_require_grads"):
                # HF's PreTrainedModel.enable_input_require_grads: a forward hook on the input embedding that
                # calls output.requires_grad_(True) (what peft/TRL set up before gradient checkpointing)
                model.enable_input_require_grads()
    res["attn_implementation"] = model.config._attn_implementation
    m["param_dtypes"] = sorted({str(p.dtype) for p in model.parameters()})
    m["total_params"] = int(sum(p.numel() for p in model.parameters()))
    m["trainable_params"] = int(sum(p.numel() for p in model.parameters() if p.requires_grad))
    m["total_param_bytes"] = int(sum(p.numel() * p.element_size() for p in model.parameters()))
    if method == "qlora":  # Params4bit.numel() counts packed bytes; count the logical weights instead
        lay = res["qlora"]["layout"]
        m["total_params"] = int(sum(p.numel() for p in model.parameters() if p.is_floating_point())
                                + lay["nf4_logical_params"])

    if wrap == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mpp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        raf = bool(case.get("fsdp_reshard_after_forward", True))
        shard_kw: dict[str, Any] = {} if raf else {"reshard_after_forward": False}
        inner = model.get_base_model() if method == "lora" else model
        for layer in inner.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mpp, **shard_kw)
        fully_shard(model, mesh=mesh, mp_policy=mpp, **shard_kw)
        model.to_empty(device=dev)
        res["fsdp"] = {"world_size": W, "mp_param_dtype": "bfloat16", "mp_reduce_dtype": "float32",
                       "reshard_after_forward": raf, "process_group": "fake"}
    elif method != "qlora":
        materialize(model, dev)
    if method != "qlora":
        init_weights(model, dev)
    if method == "full" and wrap != "fsdp2":
        emb = model.get_input_embeddings().weight
        out_w = model.get_output_embeddings().weight
        m["tied_check"] = bool(emb is out_w)
    if wrap == "ddp":
        _sync(dev)
        m["before_ddp_wrap_bytes"] = _peak(dev)["now"]
        res["ddp"] = {}
        model = ddp_wrap(model, dev, bool(case.get("ddp_gradient_as_bucket_view", False)), res["ddp"])
        _sync(dev)
        m["after_ddp_wrap_bytes"] = _peak(dev)["now"]
    _sync(dev)
    if dev == "cuda":
        m["after_build_bytes"] = int(torch.cuda.memory_allocated())
        m["after_build_reserved_bytes"] = int(torch.cuda.memory_reserved())
    from torch.distributed.tensor import DTensor

    m["local_param_numel"] = int(sum((p.to_local() if isinstance(p, DTensor) else p).numel()
                                     for p in model.parameters()))
    m["local_trainable_numel"] = int(sum((p.to_local() if isinstance(p, DTensor) else p).numel()
                                         for p in model.parameters() if p.requires_grad))

    _STATE["phase"] = "optimizer_init"
    params = [p for p in model.parameters() if p.requires_grad]
    opt, res["optimizer"] = make_optimizer(tr, params)
    model.train()

    use_autocast = wrap != "fsdp2" and (prec == "bf16-mixed" or (method in ("lora", "qlora")
                                                                  and prec != "bf16-true"))
    res["autocast_bf16"] = use_autocast
    g = torch.Generator(device="cpu")
    g.manual_seed(0)
    x = torch.randint(0, req["model"]["vocab_size"], (mbs, seq), generator=g).to(dev)
    _sync(dev)
    m["after_optimizer_init_bytes"] = _peak(dev)["now"]

    def fwd():
        if use_autocast:
            with torch.autocast(dev, dtype=torch.bfloat16):
                return model(input_ids=x, labels=x).loss
        return model(input_ids=x, labels=x).loss

    phase_peaks = m["phase_peaks"] = []
    step_times_mem = m["memory_step_times_s"] = []
    peak_alloc = 0
    peak_res = 0
    for step in range(1, case["steps"] + 1):
        _STATE["step"] = step
        rec: dict[str, Any] = {"step": step}
        phase_peaks.append(rec)
        _sync(dev)
        t0 = time.perf_counter()
        for phase in ("forward", "backward", "optimizer"):
            _STATE["phase"] = phase
            _reset(dev)
            _fake_oom(phase, step)
            if phase == "forward":
                loss = fwd()
            elif phase == "backward":
                loss.backward()
            else:
                opt.step()
                opt.zero_grad(set_to_none=True)
            _sync(dev)
            pk = _peak(dev)
            rec[phase] = pk["alloc"]
            rec[phase + "_reserved"] = pk["reserved"]
            rec[phase + "_end"] = pk["now"]
            peak_alloc = max(peak_alloc, pk["alloc"])
            peak_res = max(peak_res, pk["reserved"])
            m["peak_allocated_bytes"] = peak_alloc
            m["peak_reserved_bytes"] = peak_res
        rec["loss"] = float(loss.detach().float().item())
        del loss
        step_times_mem.append(time.perf_counter() - t0)
        if step == 2 and dev == "cuda":
            mem = _nvml_mem(nv, h)
            if mem:
                m["nvml_used_bytes"] = mem["used"]
                m["nvml_total_bytes"] = mem["total"]
                m["nvml_reserved_field_bytes"] = mem.get("reserved")
                m["nvml_used_minus_torch_reserved_bytes"] = mem["used"] - int(torch.cuda.memory_reserved())
                m["torch_reserved_at_nvml_read_bytes"] = int(torch.cuda.memory_reserved())
            m["nvml_process_used_bytes"] = _nvml_proc_used(nv, h)

    # Timed steps: no peak resets and no syncs inside the step.
    _STATE["phase"] = "timed"
    times = m["step_times_s"] = []
    _reset(dev)
    for i in range(case["timed_steps"]):
        _STATE["step"] = case["steps"] + 1 + i
        _sync(dev)
        t0 = time.perf_counter()
        loss = fwd()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
        _sync(dev)
        times.append(time.perf_counter() - t0)
    if times:
        m["step_time_s"] = statistics.median(times)
        m["step_time_incl_memory_steps_3plus_s"] = statistics.median(step_times_mem[2:] + times)
        m["tokens_per_step"] = mbs * seq
        m["tokens_per_s"] = mbs * seq / m["step_time_s"]
    pk = _peak(dev)
    m["timed_steps_peak_allocated_bytes"] = pk["alloc"]
    m["timed_steps_peak_reserved_bytes"] = pk["reserved"]
    m["overall_peak_allocated_bytes"] = max(peak_alloc, pk["alloc"])
    m["overall_peak_reserved_bytes"] = max(peak_res, pk["reserved"])
    if dev == "cuda":
        st = torch.cuda.memory_stats()
        m["allocator"] = {k: st.get(k) for k in ("num_alloc_retries", "num_ooms", "num_device_alloc",
                                                 "num_device_free")}
        m["clocks_after_timed"] = _nvml_clocks(nv, h)
    m["oom"] = False
    if case.get("probe_saved"):
        opt.zero_grad(set_to_none=True)
        try:
            m["saved_tensors"] = probe_saved(model, fwd, dev)
        except Exception as e:  # the probe must not turn a measured case into a failed one
            m["saved_tensors"] = {"error": f"{type(e).__name__}: {e}"[:300]}


def record_oom(m: dict[str, Any], e: BaseException, dry: bool) -> None:
    """What a case's ``measured`` keeps of a CUDA out-of-memory error: the phase and step it happened in, what it
    tried to allocate, and (on the GPU) the allocator's counters at that moment."""
    msg = str(e)
    m["oom"] = True
    m["oom_phase"] = _STATE["phase"]
    m["oom_step"] = _STATE["step"]
    mt = re.search(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB|B)", msg)
    if mt:
        mult = {"GiB": GIB, "MiB": 1024**2, "KiB": 1024, "B": 1}[mt.group(2)]
        m["oom_tried_to_allocate_bytes"] = int(float(mt.group(1)) * mult)
    m["oom_message"] = msg[:800]
    if not dry:
        m["allocated_at_oom_bytes"] = int(torch.cuda.memory_allocated())
        m["reserved_at_oom_bytes"] = int(torch.cuda.memory_reserved())
        m["phase_peak_at_oom_bytes"] = int(torch.cuda.max_memory_allocated())
        m["phase_peak_reserved_at_oom_bytes"] = int(torch.cuda.max_memory_reserved())
        m["peak_allocated_bytes"] = max(m.get("peak_allocated_bytes", 0), m["phase_peak_at_oom_bytes"])


def worker(case: dict[str, Any], out_path: str, dry: bool, run: Any = None, on_oom: Any = None) -> None:
    """The forked child of one case: ``run(case, res, dry)`` (this file's :func:`run_case` unless given:
    ``measure_stacks.py`` passes its own), its result written to ``out_path`` as ok, oom (``on_oom(measured)``
    adds to the record) or error, then ``os._exit`` (no CUDA teardown)."""
    t_start = time.perf_counter()
    res: dict[str, Any] = {"id": case["id"], "measured": {"oom": None}}
    try:
        (run or run_case)(case, res, dry)
        res["status"] = "ok"
    except torch.OutOfMemoryError as e:
        record_oom(res["measured"], e, dry)
        if on_oom is not None:
            on_oom(res["measured"])
        res["status"] = "oom"
    except Exception as e:  # a bug, not a measurement
        res["status"] = "error"
        res["error"] = f"{type(e).__name__}: {e}"[:800]
        res["traceback"] = traceback.format_exc()[-3000:]
    res["wall_s"] = time.perf_counter() - t_start
    with open(out_path, "w") as f:
        json.dump(res, f)
    sys.stdout.flush()
    os._exit(0)


# ------------------------------------------------------------------------------------------------ driver
def approx_params(a: dict[str, Any]) -> tuple[float, float]:
    """(total, active) parameter estimate, only for scheduling."""
    h, L, V = a["hidden_size"], a["num_layers"], a["vocab_size"]
    nh = a["num_attention_heads"]
    kv = a.get("num_kv_heads") or nh
    hd = a.get("head_dim") or h // nh
    attn = h * nh * hd * 2 + 2 * h * kv * hd
    mlp = 3 * h * a["ffn_hidden_size"]
    E, k = a.get("num_experts", 1), a.get("experts_per_token", 1)
    emb = V * h * (1 if a.get("tied_embeddings") else 2)
    return L * (attn + mlp * E) + emb, L * (attn + mlp * k) + emb


def estimate_seconds(case: dict[str, Any]) -> float:
    a = case["request"]["model"]
    t = case["request"]["training"]
    total, active = approx_params(a)
    tokens = t["micro_batch_size"] * t["seq_len"]
    attn = 6 * a["num_layers"] * a["hidden_size"] * t["seq_len"] * tokens
    if t.get("attention") == "eager":
        attn *= 4
    mult = 6 if t["method"] == "full" else 4
    flops = mult * active * tokens + attn
    if t["activation_checkpointing"] == "full":
        flops *= 4 / 3
    shards = (case.get("world_size_fake") or 1) if case.get("wrap", "fsdp2") == "fsdp2" else 1
    step = flops / 3.5e14 + 0.05 + total * 16 / 3.0e12 / shards
    if a.get("num_experts", 1) > 1:
        step *= 2.5
    if t["method"] == "qlora":
        step *= 1.5  # dequantisation of every base weight in forward and backward
    n = case["steps"] + case["timed_steps"] + 1
    if case["expect"] == "oom":
        n = 2
    build = 5.0 + total * 2 / 40e9 + (10.0 if t["method"] == "qlora" else 0.0)
    return build + n * step


def _dist_version(name: str) -> str | None:
    """A package's installed version without importing it (see the note on peft/bitsandbytes above)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def provenance(args: argparse.Namespace) -> dict[str, Any]:
    p: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "peft": _dist_version("peft"),
        "bitsandbytes": _dist_version("bitsandbytes"),
        "platform": platform.platform(),
        "dry_run": args.dry_run,
        "git_sha": args.git_sha,
        "script_sha256": {n: hashlib.sha256((HERE / n).read_bytes()).hexdigest()[:16]
                          for n in ("measure.py", "cases.py")},
        "env": {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES",
                                               "NCCL_NVLS_ENABLE")},
    }
    try:
        import accelerate

        p["accelerate"] = accelerate.__version__
    except ImportError:
        pass
    try:
        from importlib.metadata import version

        p["nvidia_ml_py"] = version("nvidia-ml-py")
    except Exception:
        p["nvidia_ml_py"] = None
    if not args.dry_run:
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used,"
                                "clocks.max.sm,power.limit,pstate", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
            p["nvidia_smi"] = q.stdout.strip()
        except Exception as e:
            p["nvidia_smi"] = f"failed: {e}"
    return p


def fmt_gib(b: Any) -> str:
    return f"{b / GIB:7.2f}" if isinstance(b, int | float) and b else "      -"


def summary_line(r: dict[str, Any]) -> str:
    m = r.get("measured", {})
    st = r.get("status", "?")
    t = m.get("step_time_s")
    extra = ""
    if st == "oom":
        extra = f"OOM@{m.get('oom_phase')}:{m.get('oom_step')} try={fmt_gib(m.get('oom_tried_to_allocate_bytes'))}"
    elif st not in ("ok",):
        extra = (r.get("error") or "")[:100]
    return (f"{r['id']:58s} {st:7s} peak={fmt_gib(m.get('peak_allocated_bytes'))} "
            f"res={fmt_gib(m.get('peak_reserved_bytes'))} nvml={fmt_gib(m.get('nvml_used_bytes'))} "
            f"t={t if t is None else round(t, 4)} wall={r.get('wall_s', 0):.1f} {extra}")


def run_one(case, run, tmp: Path, timeout: float, args, ctx, spawn: bool) -> dict[str, Any]:
    if tmp.exists():
        tmp.unlink()
    if spawn:
        cmd = [sys.executable, str(HERE / "measure.py"), "--out", args.out, "--worker", case["id"],
               "--worker-out", str(tmp)] + (["--dry-run"] if args.dry_run else [])
        p = subprocess.Popen(cmd)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
            return {"id": case["id"], "status": "timeout", "measured": {}, "timeout_s": timeout}
        code = p.returncode
    else:
        proc = ctx.Process(target=worker, args=(run, str(tmp), args.dry_run))
        proc.start()
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
            return {"id": case["id"], "status": "timeout", "measured": {}, "timeout_s": timeout}
        code = proc.exitcode
    if tmp.exists():
        r = json.loads(tmp.read_text())
        tmp.unlink()
        return r
    return {"id": case["id"], "status": "crashed", "exitcode": code, "measured": {}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--call", type=int, action="append", help="run the cases of this device call (repeatable)")
    ap.add_argument("--ids", nargs="*", help="run these case ids (overrides --call)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--deadline", type=float, default=540.0, help="start no case that would end after this")
    ap.add_argument("--git-sha", default=None)
    ap.add_argument("--spawn", action="store_true", help="start each case as a new interpreter, not a fork")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    ap.add_argument("--repeats-first", action="store_true",
                    help="first run cases.REPEAT_IDS again (results marked repeat=true)")
    ap.add_argument("--qlora-check", action="store_true",
                    help="first compare the QLoRA build with from_pretrained(quantization_config=...) on a "
                         "2-layer Llama 3.1 8B shape (OUT/qlora_check.json)")
    ap.add_argument("--skip-done", action="store_true", help="skip ids already in OUT/results.jsonl")
    ap.add_argument("--skip-done-file", action="append", default=[],
                    help="skip ids that finished (ok or oom) in this results.jsonl (repeatable)")
    args = ap.parse_args()

    if args.worker:
        case = cases_mod.by_id(args.worker)
        worker(dry_shrink(case) if args.dry_run else case, args.worker_out, args.dry_run)
        return
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sel = cases_mod.CASES
    if args.ids:
        sel = [cases_mod.by_id(i) for i in args.ids]
    elif args.call:
        sel = [c for c in sel if c["call"] in args.call]
    reps = [dict(cases_mod.by_id(i), _repeat=True) for i in cases_mod.REPEAT_IDS] if args.repeats_first else []
    prov = provenance(args)
    prov["selected"] = [c["id"] for c in sel]
    prov["repeats"] = [c["id"] for c in reps]
    (out / "provenance.json").write_text(json.dumps(prov, indent=1))
    print("provenance:", json.dumps({k: prov[k] for k in ("date_utc", "torch", "transformers", "peft",
                                                          "torch_cuda")}), prov.get("nvidia_smi"))
    res_path = out / "results.jsonl"
    done = set()
    if args.skip_done and res_path.exists():
        done = {json.loads(line)["id"] for line in res_path.read_text().splitlines() if line.strip()}
    for fn in args.skip_done_file:
        for line in Path(fn).read_text().splitlines():
            if line.strip() and json.loads(line).get("status") in ("ok", "oom"):
                done.add(json.loads(line)["id"])
    ctx = mp.get_context("fork")
    spawn = args.spawn
    if args.qlora_check:
        chk = copy.deepcopy(cases_mod.by_id("l8b-qlora16al-fused-b1-s4096-ck"))
        chk = dry_shrink(chk) if args.dry_run else chk
        chk["request"]["model"]["num_layers"] = 2
        path = out / "qlora_check.json"
        t1 = time.perf_counter()
        proc = ctx.Process(target=qlora_check_worker, args=(chk, str(path), args.dry_run))
        proc.start()
        proc.join(240)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        chk_res = json.loads(path.read_text()) if path.exists() else {"status": "crashed"}
        print("qlora-check:", chk_res.get("status"), {k: chk_res.get(k) for k in (
            "params_equal", "layout_equal", "packed_and_absmax_equal", "lora_equal", "from_pretrained_bytes",
            "own_build_bytes", "error")}, f"{time.perf_counter() - t1:.0f}s", flush=True)
    results = []
    for case in reps + sel:
        if case["id"] in done and not case.get("_repeat"):
            continue
        run = dry_shrink(case) if args.dry_run else case
        est = estimate_seconds(case) if not args.dry_run else 10.0
        elapsed = time.perf_counter() - t0
        if elapsed + est > args.deadline:
            r = {"id": case["id"], "status": "skipped", "reason": f"deadline: {elapsed:.0f}+{est:.0f}s",
                 "measured": {}}
            print(summary_line(r), flush=True)
            results.append(r)
            with res_path.open("a") as f:
                f.write(json.dumps(r) + "\n")
            continue
        timeout = max(60.0, 3.0 * est + 30.0)
        tmp = out / f".{case['id']}.tmp.json"
        r = run_one(case, run, tmp, timeout, args, ctx, spawn)
        if (not spawn and r.get("status") == "error" and "CUDA" in (r.get("error") or "")
                and "out of memory" not in (r.get("error") or "")):
            print("   fork child could not use CUDA; switching to --spawn and retrying:", r.get("error"))
            spawn = True
            r = run_one(case, run, tmp, timeout, args, ctx, spawn)
        r["launch"] = "spawn" if spawn else "fork"
        if case.get("_repeat"):
            r["repeat"] = True
        r["est_s"] = round(est, 1)
        r["dry_run"] = args.dry_run
        results.append(r)
        with res_path.open("a") as f:
            f.write(json.dumps(r) + "\n")
        print(summary_line(r), flush=True)
        if r.get("status") == "error":
            print("   ", r.get("traceback", "")[-1500:], flush=True)
    dt = time.perf_counter() - t0
    n_ok = sum(r.get("status") == "ok" for r in results)
    n_oom = sum(r.get("status") == "oom" for r in results)
    print(f"done: {len(results)} cases, {n_ok} ok, {n_oom} oom, "
          f"{len(results) - n_ok - n_oom} other, {dt:.0f}s", flush=True)


if __name__ == "__main__":
    main()
