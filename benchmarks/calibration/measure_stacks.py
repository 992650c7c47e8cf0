"""Measure the cases of stack_cases.py (issues 29 and 33) on one GPU, one forked process per case.

Driver:  python3 benchmarks/calibration/measure_stacks.py --call 1 --out DIR [--deadline 520] [--git-sha SHA]
Dry run: python3 benchmarks/calibration/measure_stacks.py --dry-run --out /tmp/dry   (CPU, tiny shapes)
Smoke:   --smoke first imports each carried library and runs one tiny op of each on the GPU (DIR/smoke.json).

Same semantics as measure.py (docs/calibration-method.md): the driver never initialises CUDA; each case runs in a
forked child and its result is appended to DIR/results.jsonl at once. What is added per case:

* the ``stack`` mechanisms (loss kernel, Liger kernels, activation offloading, optimizers, allocator setting);
* ``nvml_peak_used_bytes``: NVML used memory sampled every 10 ms during the memory steps (a thread), which sees
  CUDA managed memory (bitsandbytes' paged optimizer states) that ``torch.cuda`` counters do not;
* ``host_rss_*``: the process' RSS at start, after the build and its peak during the memory steps (sampled with
  NVML), and ``ru_maxrss``; pinned host memory from ``torch.cuda.host_memory_stats()`` where present;
* ``adam_impl``: which of torch's Adam/AdamW implementations actually ran (``_fused_adam``,
  ``_multi_tensor_adam``, ``_single_tensor_adam``), counted by wrapping them;
* ``paged_state_bytes``: bytes of optimizer state tensors that bitsandbytes put in managed memory.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import measure as M  # noqa: E402  (sets the environment, imports torch/transformers without CUDA init)
import stack_cases as S  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

GIB = M.GIB
_STATE = M._STATE


# ------------------------------------------------------------------------------------------------- config
def hf_config(case: dict[str, Any]):
    arch = case["hf_arch"]
    a = case["request"]["model"]
    if arch in ("llama", "mistral", "qwen2", "gemma2", "mixtral"):
        return M.hf_config(case)
    kw: dict[str, Any] = dict(num_hidden_layers=a["num_layers"], hidden_size=a["hidden_size"],
                              num_attention_heads=a["num_attention_heads"], intermediate_size=a["ffn_hidden_size"],
                              vocab_size=a["vocab_size"], tie_word_embeddings=bool(a.get("tied_embeddings")),
                              use_cache=False)
    if arch == "gpt_neox":
        from transformers import GPTNeoXConfig as Cfg

        kw["attention_bias"] = bool(a.get("attention_bias", True))
    elif arch == "qwen3_moe":
        from transformers import Qwen3MoeConfig as Cfg

        kw.update(num_key_value_heads=a.get("num_kv_heads") or a["num_attention_heads"], head_dim=a["head_dim"],
                  num_experts=a["num_experts"], num_experts_per_tok=a["experts_per_token"],
                  moe_intermediate_size=a["moe_ffn_hidden_size"])
    else:
        raise ValueError(arch)
    kw.update(case["hf_extra"])
    return Cfg(**kw)


def dry_shrink(case: dict[str, Any]) -> dict[str, Any]:
    c = M.dry_shrink(case)
    a = c["request"]["model"]
    if a.get("num_experts", 1) > 1:
        a.update(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=32)
        a["head_dim"] = 16
    if c["hf_arch"] in ("gpt_neox", "qwen3_moe"):
        c["hf_extra"]["max_position_embeddings"] = 128
    c["steps"], c["timed_steps"] = 2, 1
    return c


# ------------------------------------------------------------------------------------------ samplers
class Sampler:
    """NVML used bytes and host RSS every ``period`` seconds in a thread (ctypes/psutil release the GIL)."""

    def __init__(self, nv: Any, h: Any, period: float = 0.01) -> None:
        import psutil

        self.nv, self.h, self.period = nv, h, period
        self.proc = psutil.Process()
        self.nvml_peak = 0
        self.rss_peak = 0
        self.n = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.period)

    def sample(self) -> None:
        with contextlib.suppress(Exception):
            self.rss_peak = max(self.rss_peak, int(self.proc.memory_info().rss))
        mem = M._nvml_mem(self.nv, self.h)
        if mem:
            self.nvml_peak = max(self.nvml_peak, mem["used"])
        self.n += 1

    def start(self) -> Sampler:
        self._t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._t.join(5)
        self.sample()


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


# -------------------------------------------------------------------------------------- adam tracking
_ADAM_CALLS: dict[str, int] = {}


def track_adam_impl() -> None:
    import torch.optim.adam as adam_mod

    for name in ("_fused_adam", "_multi_tensor_adam", "_single_tensor_adam"):
        fn = getattr(adam_mod, name, None)
        if fn is None:
            continue

        def wrap(*a: Any, __fn: Any = fn, __name: str = name, **k: Any) -> Any:
            _ADAM_CALLS[__name] = _ADAM_CALLS.get(__name, 0) + 1
            return __fn(*a, **k)

        setattr(adam_mod, name, wrap)


# ------------------------------------------------------------- the mechanisms: app/check/stacks.py (one implementation)
#: app/check/stacks.py, one implementation with ``capplan check`` (measure.shared_module: beside this file on the GPU
#: machine, else loaded from the repository by its path)
stacks = M.shared_module("stacks")

from stacks import (  # noqa: E402  (the names run_case and smoke use)
    Combined,
    add_trl_head,
    add_trl_head_direct,
    apply_liger,
    ensure_trl_utils,
    make_loss,
    state_bytes,
)

__all__ = ["Combined", "add_trl_head", "add_trl_head_direct", "apply_liger", "ensure_trl_utils", "make_loss",
           "make_optimizer", "run_case", "state_bytes"]


def make_optimizer(name: str, tr: dict[str, Any], model: nn.Module, params: list[torch.Tensor]
                   ) -> tuple[Any, dict[str, Any]]:
    """stacks.make_optimizer with measure.py's plain optimizers (adamw, adamw-8bit)."""
    return stacks.make_optimizer(name, tr, model, params, base=M.make_optimizer)


# ------------------------------------------------------------------------------------------------ worker
def run_case(case: dict[str, Any], res: dict[str, Any], dry: bool) -> None:
    dev = "cpu" if dry else "cuda"
    st = case["stack"]
    req = case["request"]
    tr = req["training"]
    W = case.get("world_size_fake")
    attn = tr.get("attention", "sdpa")
    method, prec = tr["method"], tr["precision"]
    mbs, seq = tr["micro_batch_size"], tr["seq_len"]
    ckpt = tr["activation_checkpointing"]
    m = res["measured"]
    res["stack"] = st
    res["issue"], res["holdout"] = case["issue"], case["holdout"]
    m["host_rss_start_bytes"] = _rss()
    if st.get("alloc_conf"):
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = st["alloc_conf"]
        if not dry:
            try:
                torch.cuda.memory._set_allocator_settings(st["alloc_conf"])
                res["alloc_conf_set"] = True
            except Exception as e:
                res["alloc_conf_set"] = f"{type(e).__name__}: {e}"[:200]
    res["env_alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    track_adam_impl()

    nv, h = (None, None) if dry else M._nvml()
    _STATE["phase"] = "init"
    before = M._nvml_mem(nv, h)
    if dev == "cuda":
        torch.cuda.init()
        torch.empty(1, device=dev)
        torch.cuda.synchronize()
        after = M._nvml_mem(nv, h)
        if before and after:
            m["nvml_used_before_init_bytes"] = before["used"]
            m["cuda_context_bytes"] = after["used"] - before["used"] - int(torch.cuda.memory_reserved())
        props = torch.cuda.get_device_properties(0)
        res["device"] = {"name": props.name, "total_memory_bytes": int(props.total_memory),
                         "capability": f"{props.major}.{props.minor}",
                         "multiprocessors": props.multi_processor_count}
        with contextlib.suppress(Exception):
            res["device"]["driver"] = nv.nvmlSystemGetDriverVersion()

    if st["liger_kernels"] or st["loss"] == "liger":
        apply_liger(case["hf_arch"], st["liger_kernels"], st["loss"] == "liger", res)
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
        model = AutoModelForCausalLM.from_config(cfg, dtype=base_dtype, attn_implementation=attn)
        model.config.use_cache = False
        if ckpt == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if st["loss"] == "trl":
            add_trl_head(model, res)
        if method == "lora":
            from peft import LoraConfig, get_peft_model

            if tr["lora_targets"] == "all-linear":
                targets: Any = "all-linear"
            else:
                targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
            r = tr["lora_rank"]
            model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules=targets,
                                                     lora_dropout=0.0, bias="none"))
            res["lora_modules"] = sorted({n.split(".")[-1] for n, mm in model.named_modules()
                                          if hasattr(mm, "lora_A") and hasattr(mm, "base_layer")})
    res["attn_implementation"] = model.config._attn_implementation
    res["hf_config"] = {k: v for k, v in cfg.to_dict().items() if isinstance(v, int | float | str | bool | list | dict)
                        and k not in ("id2label", "label2id")}
    m["total_params"] = int(sum(p.numel() for p in model.parameters()))
    m["trainable_params"] = int(sum(p.numel() for p in model.parameters() if p.requires_grad))

    if W:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mpp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        inner = model.get_base_model() if method == "lora" else model
        for layer in inner.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mpp)
        units = stacks.loss_fsdp_units(st["loss"], model)  # what the loss calls outside the causal LM's forward
        for _name, unit in units:
            fully_shard(unit, mesh=mesh, mp_policy=mpp)
        if units:
            res["fsdp_extra_units"] = [name for name, _unit in units]
        fully_shard(model, mesh=mesh, mp_policy=mpp)
        model.to_empty(device=dev)
        res["fsdp"] = {"world_size": W, "mp_param_dtype": "bfloat16", "mp_reduce_dtype": "float32",
                       "reshard_after_forward": True, "process_group": "fake"}
    else:
        M.materialize(model, dev)
    M.init_weights(model, dev)
    M._sync(dev)
    if dev == "cuda":
        m["after_build_bytes"] = int(torch.cuda.memory_allocated())
    m["host_rss_after_build_bytes"] = _rss()

    _STATE["phase"] = "optimizer_init"
    params = [p for p in model.parameters() if p.requires_grad]
    opt, res["optimizer"] = make_optimizer(st["optimizer"], tr, model, params)
    model.train()
    use_autocast = not W and (prec == "bf16-mixed" or method == "lora")
    res["autocast_bf16"] = use_autocast
    g = torch.Generator(device="cpu")
    g.manual_seed(0)
    x = torch.randint(0, req["model"]["vocab_size"], (mbs, seq), generator=g).to(dev)
    loss_fn = make_loss(case, model, x, res)

    off_ctx: Any = stacks.offload_context(model, res, dry) if st["offload"] == "trl" else contextlib.nullcontext()

    def fwd():
        if use_autocast:
            with torch.autocast(dev, dtype=torch.bfloat16):
                return loss_fn()
        return loss_fn()

    phase_peaks = m["phase_peaks"] = []
    step_times_mem = m["memory_step_times_s"] = []
    peak_alloc = peak_res = 0
    sampler = Sampler(nv, h).start() if not dry else None
    try:
        for step in range(1, case["steps"] + 1):
            _STATE["step"] = step
            rec: dict[str, Any] = {"step": step}
            phase_peaks.append(rec)
            M._sync(dev)
            t0 = time.perf_counter()
            with off_ctx:
                for phase in ("forward", "backward"):
                    _STATE["phase"] = phase
                    M._reset(dev)
                    M._fake_oom(phase, step)  # the dry run's hook (CALIB_FAKE_OOM="phase:step"), as measure.py
                    if phase == "forward":
                        loss = fwd()
                    else:
                        loss.backward()
                    M._sync(dev)
                    pk = M._peak(dev)
                    rec[phase], rec[phase + "_reserved"], rec[phase + "_end"] = pk["alloc"], pk["reserved"], pk["now"]
                    peak_alloc, peak_res = max(peak_alloc, pk["alloc"]), max(peak_res, pk["reserved"])
                    m["peak_allocated_bytes"], m["peak_reserved_bytes"] = peak_alloc, peak_res
            _STATE["phase"] = "optimizer"
            M._reset(dev)
            opt.step()
            opt.zero_grad(set_to_none=True)
            M._sync(dev)
            pk = M._peak(dev)
            rec["optimizer"], rec["optimizer_reserved"], rec["optimizer_end"] = pk["alloc"], pk["reserved"], pk["now"]
            peak_alloc, peak_res = max(peak_alloc, pk["alloc"]), max(peak_res, pk["reserved"])
            m["peak_allocated_bytes"], m["peak_reserved_bytes"] = peak_alloc, peak_res
            rec["loss"] = float(loss.detach().float().item())
            del loss
            step_times_mem.append(time.perf_counter() - t0)
            if sampler is not None:
                rec["nvml_peak_so_far"] = sampler.nvml_peak
                rec["rss_peak_so_far"] = sampler.rss_peak
            if step == 2 and dev == "cuda":
                mem = M._nvml_mem(nv, h)
                if mem:
                    m["nvml_used_bytes"] = mem["used"]
                    m["nvml_total_bytes"] = mem["total"]
                    m["nvml_used_minus_torch_reserved_bytes"] = mem["used"] - int(torch.cuda.memory_reserved())
                m["nvml_process_used_bytes"] = M._nvml_proc_used(nv, h)
    finally:
        if sampler is not None:
            sampler.stop()
            m["nvml_peak_used_bytes"] = sampler.nvml_peak
            m["host_rss_peak_bytes"] = sampler.rss_peak
            m["sampler_samples"] = sampler.n
    m["ru_maxrss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        m.update(state_bytes(opt))
    except Exception as e:  # a bookkeeping failure must not lose the measurement
        m["state_bytes_error"] = f"{type(e).__name__}: {e}"[:200]
    if dev == "cuda":
        try:
            hs = torch.cuda.host_memory_stats()
            m["host_pinned"] = {k: hs.get(k) for k in ("allocated_bytes.current", "allocated_bytes.peak",
                                                       "reserved_bytes.current", "reserved_bytes.peak")
                                if k in hs} or {k: v for k, v in list(hs.items())[:12]}
        except Exception as e:
            m["host_pinned"] = {"error": f"{type(e).__name__}: {e}"[:200]}

    _STATE["phase"] = "timed"
    times = m["step_times_s"] = []
    M._reset(dev)
    for i in range(case["timed_steps"]):
        _STATE["step"] = case["steps"] + 1 + i
        M._sync(dev)
        t0 = time.perf_counter()
        with off_ctx:
            loss = fwd()
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
        M._sync(dev)
        times.append(time.perf_counter() - t0)
    if times:
        m["step_time_s"] = statistics.median(times)
        m["step_time_incl_memory_steps_2plus_s"] = statistics.median(step_times_mem[1:] + times)
        m["tokens_per_step"] = mbs * seq
    pk = M._peak(dev)
    m["timed_steps_peak_allocated_bytes"] = pk["alloc"]
    m["timed_steps_peak_reserved_bytes"] = pk["reserved"]
    if dev == "cuda":
        stt = torch.cuda.memory_stats()
        m["allocator"] = {k: stt.get(k) for k in ("num_alloc_retries", "num_ooms", "num_device_alloc",
                                                  "num_device_free", "inactive_split_bytes.all.peak")}
        m["clocks_after_timed"] = M._nvml_clocks(nv, h)
    m["adam_impl_calls"] = dict(_ADAM_CALLS)
    m["oom"] = False
    if case.get("probe_saved"):
        opt.zero_grad(set_to_none=True)
        try:
            m["saved_tensors"] = M.probe_saved(model, fwd, dev)
        except Exception as e:
            m["saved_tensors"] = {"error": f"{type(e).__name__}: {e}"[:300]}


def worker(case: dict[str, Any], out_path: str, dry: bool) -> None:
    """measure.py's worker running this file's :func:`run_case`; an out-of-memory record also says which Adam
    implementation had run."""
    M.worker(case, out_path, dry, run=run_case,
             on_oom=lambda m: m.update(adam_impl_calls=dict(_ADAM_CALLS)))


# ------------------------------------------------------------------------------------------------ smoke
def smoke(out: Path, dry: bool) -> dict[str, Any]:
    """Each carried library imported and one tiny op of it run (on the GPU unless dry)."""
    dev = "cpu" if dry else "cuda"
    r: dict[str, Any] = {}

    def tryit(name: str, fn: Any) -> None:
        t = time.perf_counter()
        try:
            r[name] = {"ok": True, "info": fn()}
        except Exception as e:
            r[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:400]}
        r[name]["s"] = round(time.perf_counter() - t, 2)

    def liger():
        import liger_kernel.transformers as lt
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        h = torch.randn(64, 32, device=dev, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(100, 32, device=dev, dtype=torch.bfloat16, requires_grad=True)
        y = torch.randint(0, 100, (64,), device=dev)
        loss = LigerFusedLinearCrossEntropyLoss()(w, h, y)
        loss.backward()
        ref = nn.functional.cross_entropy((h.float() @ w.float().t()), y)
        return {"loss": float(loss), "ref": float(ref), "has_llama": hasattr(lt, "apply_liger_kernel_to_llama")}

    def cce():
        from cut_cross_entropy import linear_cross_entropy

        h = torch.randn(64, 32, device=dev, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(100, 32, device=dev, dtype=torch.bfloat16, requires_grad=True)
        y = torch.randint(0, 100, (64,), device=dev)
        loss = linear_cross_entropy(h, w, y)
        loss.backward()
        ref = nn.functional.cross_entropy((h.float() @ w.float().t()), y)
        return {"loss": float(loss), "ref": float(ref)}

    def bnb():
        import bitsandbytes as b

        p = nn.Parameter(torch.randn(4096, 64, device=dev))
        o = b.optim.PagedAdamW8bit([p], lr=1e-3)
        p.grad = torch.randn_like(p)
        o.step()
        return {"version": b.__version__, "paged": [getattr(v, "is_paged", None) for v in o.state[p].values()
                                                    if torch.is_tensor(v)]}

    def ao():
        import torchao
        from torchao.optim import AdamW4bit, AdamW8bit

        p = nn.Parameter(torch.randn(4096, 256, device=dev))
        p.grad = torch.randn_like(p)
        for cls in (AdamW8bit, AdamW4bit):
            o = cls([p], lr=1e-3)
            o.step()
        return {"version": torchao.__version__}

    def muon():
        p = nn.Parameter(torch.randn(256, 128, device=dev))
        o = torch.optim.Muon([p], lr=1e-3)
        p.grad = torch.randn_like(p)
        o.step()
        return {"ok": True}

    def trl_():
        import trl

        info: dict[str, Any] = {"version": trl.__version__}
        try:
            from trl.trainer.utils import add_fused_lm_head  # noqa: F401

            info["trainer_utils"] = True
        except Exception as e:
            info["trainer_utils"] = f"{type(e).__name__}: {e}"[:200]
        info["trainer_utils_real"] = ensure_trl_utils(info)
        from trl.kernels import ChunkedLogProbFunction
        from trl.models.activation_offloading import get_act_offloading_ctx_manager  # noqa: F401

        h = torch.randn(64, 32, device=dev, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(100, 32, device=dev, dtype=torch.bfloat16, requires_grad=True)
        y = torch.randint(0, 100, (64,), device=dev)
        lp = ChunkedLogProbFunction.apply(h, w, None, y, 1.0, 32768, None, 1.0, ("log_probs",))[0]
        (-lp.mean()).backward()
        ref = nn.functional.cross_entropy((h.float() @ w.float().t()), y)
        info.update(loss=float(-lp.mean()), ref=float(ref))
        return info

    for name, fn in (("liger", liger), ("cce", cce), ("bitsandbytes", bnb), ("torchao", ao), ("muon", muon),
                     ("trl", trl_)):
        tryit(name, fn)
    return r


def smoke_worker(out_path: str, dry: bool) -> None:
    try:
        r = smoke(Path(out_path).parent, dry)
    except Exception as e:
        r = {"error": f"{type(e).__name__}: {e}"}
    Path(out_path).write_text(json.dumps(r, indent=1))
    os._exit(0)


# ------------------------------------------------------------------------------------------------ driver
def estimate_seconds(case: dict[str, Any]) -> float:
    est = M.estimate_seconds(case)
    st = case["stack"]
    if st["offload"] != "none":
        est *= 1.6
    if st["optimizer"].startswith(("paged", "ao-")) or st["optimizer"] == "muon":
        est += 4
    if case["hf_arch"] == "qwen3_moe":
        est = 20 + (case["steps"] + case["timed_steps"]) * 6.0
    return est


def device_name() -> str:
    """The GPU's name from nvidia-smi (the driver never initialises CUDA)."""
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()[0]
    except Exception:
        return ""


def provenance(args: argparse.Namespace) -> dict[str, Any]:
    p = M.provenance(args)
    p["command"] = " ".join([Path(sys.executable).name, *sys.argv])
    p["script_sha256"].update({n: hashlib.sha256((HERE / n).read_bytes()).hexdigest()[:16]
                               for n in ("measure_stacks.py", "stack_cases.py")})
    p["script_sha256"]["stacks.py"] = hashlib.sha256(Path(stacks.__file__).read_bytes()).hexdigest()[:16]
    for d in ("liger-kernel", "cut-cross-entropy", "torchao", "trl", "bitsandbytes", "triton", "psutil"):
        p[d] = M._dist_version(d)
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--call", type=int, action="append")
    ap.add_argument("--ids", nargs="*")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--deadline", type=float, default=520.0)
    ap.add_argument("--git-sha", default=None)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--skip-done-file", action="append", default=[])
    ap.add_argument("--h200-repeats", action="store_true",
                    help="measure stack_cases.H200_REPEATS, on an H200 only (nothing elsewhere)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sel = S.STACK_CASES
    if args.ids:
        sel = [S.by_id(i) for i in args.ids]
    elif args.call:
        sel = [c for c in sel if c["call"] in args.call]
    if args.h200_repeats:
        sel = [S.by_id(i) for i in S.H200_REPEATS]
    name = device_name() if not args.dry_run else "dry run"
    print("device:", name, flush=True)
    if "H200" in name:  # the same cases measured on an H200 are h200-... cases with the H200 in their request
        sel = [S.as_h200(c) for c in sel]
    elif args.h200_repeats:
        sel = []
    prov = provenance(args)
    prov["selected"] = [c["id"] for c in sel]
    (out / "provenance.json").write_text(json.dumps(prov, indent=1))
    print("provenance:", {k: prov.get(k) for k in ("date_utc", "torch", "transformers", "peft", "liger-kernel",
                                                     "cut-cross-entropy", "torchao", "trl", "bitsandbytes")},
          prov.get("nvidia_smi"), flush=True)
    ctx = M.mp.get_context("fork")
    if args.smoke:
        path = out / "smoke.json"
        proc = ctx.Process(target=smoke_worker, args=(str(path), args.dry_run))
        proc.start()
        proc.join(180)
        if proc.is_alive():
            proc.kill()
        print("smoke:", path.read_text() if path.exists() else "no result", flush=True)
    done: set[str] = set()
    for fn in args.skip_done_file:
        for line in Path(fn).read_text().splitlines():
            if line.strip() and json.loads(line).get("status") in ("ok", "oom"):
                done.add(json.loads(line)["id"])
    res_path = out / "results.jsonl"
    n = {"ok": 0, "oom": 0, "other": 0}
    for case in sel:
        if case["id"] in done:
            continue
        run = dry_shrink(case) if args.dry_run else copy.deepcopy(case)
        est = estimate_seconds(case) if not args.dry_run else 10.0
        elapsed = time.perf_counter() - t0
        if elapsed + est > args.deadline:
            r = {"id": case["id"], "status": "skipped", "reason": f"deadline: {elapsed:.0f}+{est:.0f}s",
                 "measured": {}}
        else:
            tmp = out / f".{case['id']}.tmp.json"
            timeout = max(60.0, 3.0 * est + 30.0)
            timeout = min(timeout, max(30.0, args.deadline + 40 - elapsed))
            if tmp.exists():
                tmp.unlink()
            proc = ctx.Process(target=worker, args=(run, str(tmp), args.dry_run))
            proc.start()
            proc.join(timeout)
            if proc.is_alive():
                proc.kill()
                proc.join(10)
                r = {"id": case["id"], "status": "timeout", "measured": {}, "timeout_s": timeout}
            elif tmp.exists():
                r = json.loads(tmp.read_text())
                tmp.unlink()
            else:
                r = {"id": case["id"], "status": "crashed", "exitcode": proc.exitcode, "measured": {}}
        r.update(est_s=round(est, 1), dry_run=args.dry_run, issue=case["issue"], holdout=case["holdout"],
                 call=case["call"])
        if not args.dry_run:
            r["case"] = case
        with res_path.open("a") as f:
            f.write(json.dumps(r) + "\n")
        n["ok" if r["status"] == "ok" else "oom" if r["status"] == "oom" else "other"] += 1
        mm = r.get("measured", {})
        print(M.summary_line(r), f"nvmlpk={M.fmt_gib(mm.get('nvml_peak_used_bytes'))} "
              f"rsspk={M.fmt_gib(mm.get('host_rss_peak_bytes'))}", flush=True)
        if r["status"] == "error":
            print("   ", r.get("traceback", "")[-1200:], flush=True)
    print(f"done: {n} in {time.perf_counter() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
