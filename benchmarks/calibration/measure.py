"""Measure real training memory and step time for the cases in cases.py, one forked process per case.

Driver:  python3 benchmarks/calibration/measure.py --call 1 --out DIR [--deadline 540] [--git-sha SHA]
Dry run: python3 benchmarks/calibration/measure.py --dry-run --out /tmp/dry   (CPU, tiny shapes, same code path)

The driver imports torch/transformers/peft once, never touches CUDA itself, and forks one child per case
(a fresh CUDA context and caching allocator each time). The child writes one JSON result; the driver appends
it to DIR/results.jsonl at once, so a timeout or a crash still leaves every finished case. Semantics are in
docs/calibration-method.md.
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

try:
    import peft
except ImportError:  # pragma: no cover
    peft = None

GIB = 1024**3
_STATE: dict[str, Any] = {"phase": "start", "step": 0}


# ----------------------------------------------------------------------------------------------- helpers
def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None, None


def _nvml_mem(nv, h) -> dict[str, int] | None:
    if nv is None:
        return None
    try:
        try:
            m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            return {"used": int(m.used), "total": int(m.total), "free": int(m.free),
                    "reserved": int(getattr(m, "reserved", 0))}
        except Exception:
            m = nv.nvmlDeviceGetMemoryInfo(h)
            return {"used": int(m.used), "total": int(m.total), "free": int(m.free)}
    except Exception:
        return None


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


def materialize(model: nn.Module, device: str) -> None:
    """``to_empty`` that keeps tied parameters tied (nn.Module.to_empty unties them)."""
    memo: dict[int, torch.Tensor] = {}
    keep = []
    for mod in model.modules():
        for store in (mod._parameters, mod._buffers):
            for k, t in list(store.items()):
                if t is None:
                    continue
                if id(t) not in memo:
                    new = torch.empty_like(t, device=device)
                    if isinstance(t, nn.Parameter):
                        new = nn.Parameter(new, requires_grad=t.requires_grad)
                    memo[id(t)] = new
                    keep.append(t)
                store[k] = memo[id(t)]


@torch.no_grad()
def init_weights(model: nn.Module, device: str) -> None:
    from torch.distributed.tensor import DTensor

    gen = torch.Generator(device=device)
    gen.manual_seed(1234)
    for name, p in model.named_parameters():
        t = p.to_local() if isinstance(p, DTensor) else p
        if t.numel() == 0:
            continue
        if "lora_B" in name:
            t.zero_()
        elif t.dim() >= 2:
            t.normal_(0.0, 0.02, generator=gen)
        elif name.endswith("bias"):
            t.zero_()
        else:
            t.fill_(1.0)
    # Non-persistent rotary buffers are garbage after to_empty: rebuild them from the config.
    for mod in model.modules():
        if type(mod).__name__.endswith("RotaryEmbedding") and hasattr(mod, "config"):
            with torch.device("cpu"):
                fresh = type(mod)(mod.config)
            for bname, buf in mod._buffers.items():
                if buf is not None and bname in fresh._buffers:
                    buf.copy_(fresh._buffers[bname].to(buf.device, buf.dtype))


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


# ------------------------------------------------------------------------------------------------ worker
def run_case(case: dict[str, Any], res: dict[str, Any], dry: bool) -> None:
    dev = "cpu" if dry else "cuda"
    req = case["request"]
    tr = req["training"]
    W = case.get("world_size_fake")
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
        mesh = init_device_mesh(dev, (W,))

    _STATE["phase"] = "build"
    base_dtype = torch.bfloat16 if (method == "lora" or prec == "bf16-true") else torch.float32
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=base_dtype, attn_implementation="sdpa")
        model.config.use_cache = False
        if ckpt == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        elif ckpt != "none":
            raise ValueError(ckpt)
        if method == "lora":
            from peft import LoraConfig, get_peft_model

            targets = ("all-linear" if tr["lora_targets"] == "all-linear"
                       else ["q_proj", "k_proj", "v_proj", "o_proj"])
            r = tr["lora_rank"]
            model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules=targets,
                                                     lora_dropout=0.0, bias="none"))
    res["attn_implementation"] = model.config._attn_implementation
    m["param_dtypes"] = sorted({str(p.dtype) for p in model.parameters()})
    m["total_params"] = int(sum(p.numel() for p in model.parameters()))
    m["trainable_params"] = int(sum(p.numel() for p in model.parameters() if p.requires_grad))
    m["total_param_bytes"] = int(sum(p.numel() * p.element_size() for p in model.parameters()))

    if W:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mpp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        inner = model.get_base_model() if method == "lora" else model
        for layer in inner.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mpp)
        fully_shard(model, mesh=mesh, mp_policy=mpp)
        model.to_empty(device=dev)
        res["fsdp"] = {"world_size": W, "mp_param_dtype": "bfloat16", "mp_reduce_dtype": "float32",
                       "reshard_after_forward": True, "process_group": "fake"}
    else:
        materialize(model, dev)
    init_weights(model, dev)
    if method == "full" and not W:
        emb = model.get_input_embeddings().weight
        out_w = model.get_output_embeddings().weight
        m["tied_check"] = bool(emb is out_w)
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
    impl = tr["optimizer_impl"]
    params = [p for p in model.parameters() if p.requires_grad]
    opt_kw: dict[str, Any] = {"lr": 1e-5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    if impl == "fused":
        opt_kw["fused"] = True
    elif impl == "foreach":
        opt_kw["foreach"] = True
    else:
        opt_kw["foreach"] = False
    opt = torch.optim.AdamW(params, **opt_kw)
    res["optimizer"] = {"class": "torch.optim.AdamW", **{k: v for k, v in opt_kw.items() if k != "betas"}}
    model.train()

    use_autocast = (not W) and (prec == "bf16-mixed" or method == "lora")
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


def worker(case: dict[str, Any], out_path: str, dry: bool) -> None:
    t_start = time.perf_counter()
    res: dict[str, Any] = {"id": case["id"], "measured": {"oom": None}}
    try:
        run_case(case, res, dry)
        res["status"] = "ok"
    except torch.OutOfMemoryError as e:
        m = res["measured"]
        msg = str(e)
        m["oom"] = True
        m["oom_phase"] = _STATE["phase"]
        m["oom_step"] = _STATE["step"]
        mt = re.search(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB|B)", msg)
        if mt:
            mult = {"GiB": GIB, "MiB": 1024**2, "KiB": 1024, "B": 1}[mt.group(2)]
            m["oom_tried_to_allocate_bytes"] = int(float(mt.group(1)) * mult)
        m["oom_message"] = msg[:600]
        if not dry:
            m["allocated_at_oom_bytes"] = int(torch.cuda.memory_allocated())
            m["reserved_at_oom_bytes"] = int(torch.cuda.memory_reserved())
            m["phase_peak_at_oom_bytes"] = int(torch.cuda.max_memory_allocated())
            m["peak_allocated_bytes"] = max(m.get("peak_allocated_bytes", 0), m["phase_peak_at_oom_bytes"])
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
    mult = 6 if t["method"] == "full" else 4
    flops = mult * active * tokens + attn
    if t["activation_checkpointing"] == "full":
        flops *= 4 / 3
    step = flops / 3.5e14 + 0.05 + total * 16 / 3.0e12 / (case.get("world_size_fake") or 1)
    if a.get("num_experts", 1) > 1:
        step *= 2.5
    n = case["steps"] + case["timed_steps"] + 1
    if case["expect"] == "oom":
        n = 2
    return 5.0 + total * 2 / 40e9 + n * step


def provenance(args: argparse.Namespace) -> dict[str, Any]:
    p: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "peft": getattr(peft, "__version__", None),
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
