"""Measure host memory (peak RSS) of FSDP2 CPU-offload training, one subprocess per case (issue #8).

Each case is rank 0 of a W-rank job, stood in for by PyTorch's fake process group on one GPU: FSDP2
``fully_shard`` on every decoder layer and the root, ``MixedPrecisionPolicy(bf16 params, fp32 reduce)``,
``CPUOffloadPolicy(pin_memory=True)``; the model is built on the meta device, materialised with
``to_empty(device="cpu")``, its local shards initialised, the rotary ``inv_freq`` buffer rebuilt on the GPU;
random weights from a transformers config; AdamW (torch's default for CPU tensors: the for-loop
implementation) for 3 steps. Recorded per case: ``resource.getrusage`` ``ru_maxrss``, RSS and system memory
sampled by a thread every 10 ms with psutil, the RSS before any model state exists (the framework baseline),
``torch.cuda.max_memory_allocated`` and the step times.

Device run (one H200, about 5 minutes)::

    PYTHONUNBUFFERED=1 python3 benchmarks/calibration/host_memory.py --out $OUT

Dry run here (CPU, tiny shapes, same code path)::

    .venv/bin/python benchmarks/calibration/host_memory.py --dry-run --out /tmp/host-dry

Output: one JSON line per case on stdout and in ``OUT/host_memory_h200.jsonl``, and
``OUT/host_memory_h200.json`` = ``{"provenance": {...}, "cases": [{"id", "status", "request", "measured"}]}``,
the file ``tests/test_host_calibration.py`` reads from ``tests/data/host_memory_h200.json``. Each ``request`` is
an ``EstimateRequest`` dict describing exactly what ran. Only the standard library, torch, transformers and
psutil are imported (the device machine has no pydantic).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

GIB = 1 << 30
HERE = Path(__file__).resolve()
GPU_ID = "h200-sxm-141gb"
STEPS = 3

_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
MODELS: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": {
        "arch": {"name": "Llama 3.2 1B", "source": "meta-llama/Llama-3.2-1B config.json", "num_layers": 16,
                 "hidden_size": 2048, "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 8192,
                 "vocab_size": 128256, "tied_embeddings": True},
        "rope": {"rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0}},
    },
    "llama-3.1-8b": {
        "arch": {"name": "Llama 3.1 8B", "source": "meta-llama/Llama-3.1-8B config.json", "num_layers": 32,
                 "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336,
                 "vocab_size": 128256, "tied_embeddings": False},
        "rope": {"rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0}},
    },
}
# (model, W): W = 1 is a single rank holding everything; W = 16 is rank 0 of two 8-GPU nodes.
GRID = [("llama-3.2-1b", 1), ("llama-3.2-1b", 8), ("llama-3.2-1b", 16), ("llama-3.1-8b", 1),
        ("llama-3.1-8b", 8), ("llama-3.1-8b", 16)]


def make_case(model: str, world: int, dry: bool) -> dict[str, Any]:
    arch = dict(MODELS[model]["arch"])
    seq = 2048
    if dry:
        arch.update(name=arch["name"] + " (dry-run shape)", num_layers=2, hidden_size=64, num_attention_heads=4,
                    num_kv_heads=2, ffn_hidden_size=160, vocab_size=1000)
        seq = 32
    nodes, per_node = (1, world) if world <= 8 else (world // 8, 8)
    request = {
        "model": arch,
        "training": {"method": "full", "precision": "bf16-mixed", "optimizer": "adamw",
                     "optimizer_impl": "for-loop", "micro_batch_size": 1, "seq_len": seq,
                     "gradient_accumulation_steps": 1, "activation_checkpointing": "none", "attention": "sdpa"},
        "parallelism": {"sharding": "fsdp", "offload": "optimizer+params", "framework": "pytorch"},
        "hardware": {"gpu": GPU_ID, "num_nodes": nodes, "gpus_per_node": per_node},
    }
    return {"id": f"{model}-fsdp2-cpu-offload-w{world}", "model": model, "world_size": world, "request": request,
            "rope": MODELS[model]["rope"]}


def rough_host_bytes(case: dict[str, Any]) -> float:
    """A scheduling guess (16 bytes per parameter of the shard, pinned rounding, 4 GiB baseline)."""
    a = case["request"]["model"]
    h, layers, v = a["hidden_size"], a["num_layers"], a["vocab_size"]
    kv = a["num_kv_heads"] * h // a["num_attention_heads"]
    params = layers * (2 * h * h + 2 * h * kv + 3 * h * a["ffn_hidden_size"]) + v * h * (1 if a["tied_embeddings"]
                                                                                          else 2)
    return 16 * params / case["world_size"] * 1.3 + 4 * GIB


# ------------------------------------------------------------------------------------------------- sampler
class Sampler:
    """RSS and system memory in use (total - available), sampled every ``period`` seconds."""

    def __init__(self, period: float = 0.01) -> None:
        import psutil

        self._proc = psutil.Process()
        self._vm = psutil.virtual_memory
        self.period = period
        self.system_start = self._used()
        self.rss_start = self._proc.memory_info().rss
        self.peak_rss = self.rss_start
        self.peak_system = self.system_start
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _used(self) -> int:
        vm = self._vm()
        return int(vm.total - vm.available)

    def sample(self) -> None:
        self.peak_rss = max(self.peak_rss, self._proc.memory_info().rss)
        self.peak_system = max(self.peak_system, self._used())
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def rss_now() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


# -------------------------------------------------------------------------------------------------- worker
def worker(case: dict[str, Any], dry: bool) -> dict[str, Any]:
    sampler = Sampler()
    m: dict[str, Any] = {"rss_at_start_bytes": sampler.rss_start}
    res: dict[str, Any] = {"id": case["id"], "status": "error", "request": case["request"], "measured": m}
    try:
        _run(case, dry, m, sampler, res)
        res["status"] = "ok"
    except Exception as e:  # a failed case is reported, not raised
        oom = "out of memory" in str(e).lower()
        res["status"] = "oom" if oom else "error"
        res["error"] = f"{type(e).__name__}: {e}"[:800]
        res["traceback"] = traceback.format_exc()[-3000:]
    sampler.stop()
    m["peak_rss_bytes"] = maxrss_bytes()
    m["peak_rss_sampled_bytes"] = sampler.peak_rss
    m["system_used_delta_peak_bytes"] = sampler.peak_system - sampler.system_start
    # cudaHostAlloc'ed (pinned) pages may not be counted in RSS: the peak host memory is the larger of RSS and
    # what the process added to the system's used memory
    m["peak_host_bytes"] = max(m["peak_rss_bytes"], sampler.rss_start + m["system_used_delta_peak_bytes"])
    m["samples"] = sampler.samples
    return res


def _run(case: dict[str, Any], dry: bool, m: dict[str, Any], sampler: Sampler, res: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import AutoModelForCausalLM, LlamaConfig

    dev = "cpu" if dry else "cuda"
    req, W = case["request"], case["world_size"]
    a, tr = req["model"], req["training"]
    if dev == "cuda":
        torch.cuda.init()
        torch.empty(1, device=dev)
        torch.cuda.synchronize()
        props = torch.cuda.get_device_properties(0)
        res["device"] = {"name": props.name, "total_memory_bytes": int(props.total_memory)}
    m["rss_after_cuda_init_bytes"] = rss_now()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=W)
    mesh = init_device_mesh(dev, (W,))
    cfg = LlamaConfig(num_hidden_layers=a["num_layers"], hidden_size=a["hidden_size"],
                      num_attention_heads=a["num_attention_heads"], num_key_value_heads=a["num_kv_heads"],
                      intermediate_size=a["ffn_hidden_size"], vocab_size=a["vocab_size"],
                      tie_word_embeddings=a["tied_embeddings"], use_cache=False, rms_norm_eps=1e-5,
                      max_position_embeddings=131072 if not dry else 8192, **case["rope"])
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa")
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    offload = CPUOffloadPolicy(pin_memory=not dry)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp, offload_policy=offload)
    fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=offload)
    sampler.sample()
    m["baseline_rss_bytes"] = rss_now()  # torch, CUDA, transformers and the meta model: no state yet
    m["baseline_maxrss_bytes"] = maxrss_bytes()

    model.to_empty(device="cpu")
    with torch.no_grad():
        gen = torch.Generator(device="cpu")
        gen.manual_seed(0)
        for p in model.parameters():
            local = p.to_local() if isinstance(p, DTensor) else p
            if local.numel() == 0:
                continue
            if local.dim() >= 2:
                local.normal_(0.0, 0.02, generator=gen)
            else:
                local.fill_(1.0)
    # buffers (rotary inv_freq) were materialised on the CPU as garbage: rebuild them on the compute device
    for mod in model.modules():
        if type(mod).__name__.endswith("RotaryEmbedding"):
            with torch.device("cpu"):
                fresh = type(mod)(config=mod.config)
            for bname in list(mod._buffers):
                mod._buffers[bname] = fresh._buffers[bname].to(dev)
            if hasattr(mod, "original_inv_freq"):
                mod.original_inv_freq = fresh.original_inv_freq.to(dev)
    for mod in model.modules():
        for bname, buf in list(mod._buffers.items()):
            if buf is not None and buf.device.type != dev:
                mod._buffers[bname] = buf.to(dev)
    m["tied"] = bool(model.get_input_embeddings().weight is model.get_output_embeddings().weight)
    params = list(model.parameters())
    local = [p.to_local() if isinstance(p, DTensor) else p for p in params]
    m["param_tensors"] = len(params)
    m["local_param_numel"] = int(sum(t.numel() for t in local))
    m["local_param_storage_bytes"] = int(sum(t.untyped_storage().nbytes() for t in local))
    m["param_devices"] = sorted({str(t.device) for t in local})
    m["params_pinned"] = bool(all(t.is_pinned() for t in local)) if not dry else False
    sampler.sample()
    m["rss_after_materialize_bytes"] = rss_now()

    opt = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.01, foreach=False, fused=False)
    res["optimizer"] = {"class": "torch.optim.AdamW", "foreach": False, "fused": False,
                        "impl": tr["optimizer_impl"]}
    g = torch.Generator(device="cpu")
    g.manual_seed(1)
    x = torch.randint(0, a["vocab_size"], (tr["micro_batch_size"], tr["seq_len"]), generator=g).to(dev)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, rss_steps = [], []
    for _ in range(STEPS):
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        sampler.sample()
        rss_steps.append(rss_now())
        del loss
    m["step_times_s"] = times
    m["step_time_s"] = statistics.median(times[1:]) if len(times) > 1 else times[0]
    m["rss_after_step_bytes"] = rss_steps
    m["optimizer_state_bytes"] = int(sum(v.untyped_storage().nbytes() for s in opt.state.values()
                                         for v in s.values() if torch.is_tensor(v) and v.dim() > 0))
    if dev == "cuda":
        m["gpu_max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        m["gpu_max_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        stats = getattr(torch.cuda, "host_memory_stats", None)
        if callable(stats):
            try:
                hs = stats()
                m["host_allocator"] = {k: int(v) for k, v in hs.items() if isinstance(v, int | float)
                                       and ("bytes" in k or "segment" in k)}
            except Exception as e:  # an older torch
                m["host_allocator"] = {"error": str(e)[:200]}
    dist.destroy_process_group()


# -------------------------------------------------------------------------------------------------- driver
def provenance(args: argparse.Namespace) -> dict[str, Any]:
    p: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python3", *sys.argv]),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "dry_run": args.dry_run,
        "script_sha256": hashlib.sha256(HERE.read_bytes()).hexdigest()[:16],
        "method": "FSDP2 fully_shard + CPUOffloadPolicy(pin_memory=True) under the fake process group; rank 0 of "
                  "W; meta init, to_empty(cpu); AdamW for-loop; 3 steps; peak_host_bytes = max(ru_maxrss, RSS at "
                  "start + peak rise of system used memory)",
    }
    try:
        out = subprocess.run([sys.executable, "-c", "import torch, transformers, psutil; print(torch.__version__, "
                              "torch.version.cuda, transformers.__version__, psutil.__version__)"],
                             capture_output=True, text=True, timeout=120, check=False)
        torch_v, cuda_v, tf_v, ps_v = (out.stdout.split() + ["?"] * 4)[:4]
        p.update(torch=torch_v, torch_cuda=cuda_v, transformers=tf_v, psutil=ps_v)
    except Exception as e:
        p["versions_error"] = str(e)[:200]
    try:
        import psutil

        p["host_memory_total_bytes"] = int(psutil.virtual_memory().total)
        p["cpu_count"] = os.cpu_count()
    except ImportError:
        pass
    if not args.dry_run:
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=False)
            p["nvidia_smi"] = q.stdout.strip()
        except Exception as e:
            p["nvidia_smi"] = f"failed: {e}"
    return p


def host_limit_bytes(arg_gib: float | None) -> float:
    if arg_gib:
        return arg_gib * GIB
    limits = []
    try:
        import psutil

        limits.append(0.85 * psutil.virtual_memory().total)
    except ImportError:
        pass
    cg = Path("/sys/fs/cgroup/memory.max")
    if cg.exists() and cg.read_text().strip().isdigit():
        limits.append(0.85 * int(cg.read_text().strip()))
    return min(limits) if limits else 100 * GIB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the JSON files")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, no pinned memory")
    ap.add_argument("--ids", nargs="*", help="run only these case ids")
    ap.add_argument("--max-host-gib", type=float, default=None,
                    help="skip cases expected above this (default: 85%% of the machine's memory; a case that "
                         "needs more would be killed by the OOM killer). Pass a value to override.")
    ap.add_argument("--deadline", type=float, default=540.0, help="start no case after this many seconds")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per case")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        result = worker(json.loads(args.worker), args.dry_run)
        print("RESULT " + json.dumps(result), flush=True)
        return

    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = [make_case(model, w, args.dry_run) for model, w in GRID]
    if args.ids:
        cases = [c for c in cases if c["id"] in args.ids]
    limit = host_limit_bytes(args.max_host_gib)
    prov = provenance(args)
    prov["host_limit_bytes"] = int(limit)
    results: list[dict[str, Any]] = []
    jsonl = out / "host_memory_h200.jsonl"
    jsonl.write_text("")
    for case in cases:
        r: dict[str, Any]
        elapsed = time.perf_counter() - t0
        guess = rough_host_bytes(case)
        if guess > limit:
            r = {"id": case["id"], "status": "skipped", "request": case["request"], "measured": {},
                 "reason": f"expected ~{guess / GIB:.0f} GiB of host memory, over the {limit / GIB:.0f} GiB limit"}
        elif elapsed > args.deadline:
            r = {"id": case["id"], "status": "skipped", "request": case["request"], "measured": {},
                 "reason": f"deadline: {elapsed:.0f} s"}
        else:
            cmd = [sys.executable, str(HERE), "--worker", json.dumps(case)] + (["--dry-run"] if args.dry_run else [])
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
                   "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env, check=False)
                line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
                if line is None:
                    r = {"id": case["id"], "status": "crashed", "request": case["request"], "measured": {},
                         "returncode": proc.returncode, "stderr": proc.stderr[-2000:]}
                else:
                    r = json.loads(line[len("RESULT "):])
            except subprocess.TimeoutExpired:
                r = {"id": case["id"], "status": "timeout", "request": case["request"], "measured": {},
                     "timeout_s": args.timeout}
        r["wall_s"] = round(time.perf_counter() - t0 - elapsed, 1)
        results.append(r)
        print(json.dumps(r), flush=True)
        with jsonl.open("a") as f:
            f.write(json.dumps(r) + "\n")
        m = r.get("measured", {})
        print(f"# {r['id']}: {r['status']} peak_host={m.get('peak_host_bytes', 0) / GIB:.2f} GiB "
              f"rss={m.get('peak_rss_bytes', 0) / GIB:.2f} GiB baseline={m.get('baseline_rss_bytes', 0) / GIB:.2f} "
              f"GiB step={m.get('step_time_s')} {r.get('reason') or r.get('error') or ''}", file=sys.stderr,
              flush=True)
    doc = {"provenance": prov, "cases": results}
    (out / "host_memory_h200.json").write_text(json.dumps(doc, indent=1) + "\n")
    ok = sum(r["status"] == "ok" for r in results)
    print(f"# done: {len(results)} cases, {ok} ok, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
