"""Micro-benchmarks of two optimizers' step on one GPU, to separate what the device runs from what the host
issues (issue 29: bitsandbytes' 8-bit AdamW and Muon under FSDP2 missed their step-time bars on the H100).

* ``bnb``: bitsandbytes ``AdamW8bit`` / ``PagedAdamW8bit`` (and torch's fused AdamW as the reference) on parameter
  sets of one model's real shapes and on synthetic sets (a few large tensors: device-bound; many small ones:
  host-bound). For each: the wall time of ``step()`` (synchronised, median), and from ``torch.profiler`` the CUDA
  time of every kernel and of the update kernel alone. bitsandbytes updates one tensor at a time and synchronises
  after each (``Optimizer8bit.step``: ``sync_gpu(p)``), so wall = kernels + host per tensor.
* ``muon``: ``torch.optim._muon._zeropower_via_newtonschulz`` (5 steps) on each decoder matrix shape as an FSDP2
  shard (a ``DTensor`` ``Shard(0)`` on the fake process group, rank 0 of W) and whole (W = 1): wall (synchronised)
  and issue time (the call returning, not synchronised), the CUDA time of the kernels and of the GEMMs, the local
  GEMM shapes DTensor ran (``aten::mm`` / ``aten::addmm`` under the profiler), and the DTensor-level operators the
  call dispatched. Then one ``torch.optim.Muon.step`` over a layer's seven matrices (momentum, Nesterov, decay).

Each part runs in its own process (the fake process group is per process). Writes ``<out>/kernels.jsonl`` and
``provenance.json``; ``--dry-run`` runs tiny shapes on the CPU (no bitsandbytes) to check the script.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing as mp
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent

#: decoder matrices (out_features, in_features) of one layer, from each model's config.json
LAYERS: dict[str, list[tuple[int, int]]] = {
    "llama-3.1-8b": [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096),
                     (4096, 14336)],
    "llama-3.2-3b": [(3072, 3072), (1024, 3072), (1024, 3072), (3072, 3072), (8192, 3072), (8192, 3072),
                     (3072, 8192)],
    "qwen2.5-1.5b": [(1536, 1536), (256, 1536), (256, 1536), (1536, 1536), (8960, 1536), (8960, 1536),
                     (1536, 8960)],
}
#: LoRA r16 on all linears of one Llama 3.1 8B layer: each adapter's A (16 x in) and B (out x 16)
LORA_LAYERS: dict[str, list[tuple[int, int]]] = {
    "llama-3.1-8b-lora16": [m for out, inp in LAYERS["llama-3.1-8b"] for m in ((16, inp), (out, 16))],
}
#: Llama 3.2 1B's parameter tensors (tied embedding, 16 layers: 7 matrices + 2 RMSNorm weights, final norm)
L1B = [(128256, 2048)] + [s for _ in range(16) for s in
                          [(2048, 2048), (512, 2048), (512, 2048), (2048, 2048), (8192, 2048), (8192, 2048),
                           (2048, 8192), (2048,), (2048,)]] + [(2048,)]


#: Qwen2.5 1.5B's (tied embedding; q/k/v biases; 28 layers)
Q1B5 = [(151936, 1536)] + [s for _ in range(28) for s in
                           [(1536, 1536), (1536,), (256, 1536), (256,), (256, 1536), (256,), (1536, 1536),
                            (8960, 1536), (8960, 1536), (1536, 8960), (1536,), (1536,)]] + [(1536,)]


def _sets(dry: bool, only: list[str] | None = None) -> dict[str, list[tuple[int, ...]]]:
    if dry:
        return {"tiny": [(64, 64)] * 3 + [(64,)]}
    sets = _all_sets()
    return {k: v for k, v in sets.items() if not only or k in only}


def _all_sets() -> dict[str, list[tuple[int, ...]]]:
    return {"llama-3.2-1b": L1B, "qwen2.5-1.5b": Q1B5,
            "large-4": [(16384, 16384)] * 4,  # 1.07 G elements in 4 tensors: the kernel's rate
            "small-400": [(256, 256)] * 400,  # 26 M elements in 400 tensors: the per-tensor host path
            "mid-100": [(4096, 2048)] * 100}  # 839 M elements in 100 tensors


def _median_time(fn: Any, sync: Any, reps: int, warm: int) -> tuple[float, list[float]]:
    for _ in range(warm):
        fn()
    sync()
    ts = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def _kernel_times(fn: Any, match: tuple[str, ...]) -> dict[str, Any]:
    """CUDA time of every kernel ``fn`` launched, of those whose name contains one of ``match``, and the kernel
    count (torch.profiler, CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    total = matched = 0.0
    n = n_matched = 0
    names: dict[str, float] = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = float(e.device_time)
        total += us
        n += 1
        names[e.name[:60]] = names.get(e.name[:60], 0.0) + us
        if any(m.lower() in e.name.lower() for m in match):
            matched += us
            n_matched += 1
    top = dict(sorted(names.items(), key=lambda kv: -kv[1])[:8])
    return {"kernels_s": total * 1e-6, "kernels": n, "matched_s": matched * 1e-6, "matched": n_matched,
            "top_kernels_s": {k: round(v * 1e-6, 6) for k, v in top.items()}}


def bnb_part(out: str, dry: bool, only: list[str] | None = None) -> None:
    dev = "cpu" if dry else "cuda"
    sync = (lambda: None) if dry else torch.cuda.synchronize
    rows = []
    opts: list[tuple[str, Any]] = [("torch-fused-adamw", lambda ps: torch.optim.AdamW(ps, lr=1e-5, fused=not dry))]
    if not dry:
        import bitsandbytes as bnb

        opts += [("adamw-8bit", lambda ps: bnb.optim.AdamW8bit(ps, lr=1e-5)),
                 ("paged-adamw-8bit", lambda ps: bnb.optim.PagedAdamW8bit(ps, lr=1e-5)),
                 ("paged-adamw-32bit", lambda ps: bnb.optim.PagedAdamW32bit(ps, lr=1e-5))]
    for set_name, shapes in _sets(dry, only).items():
        for dtype in (torch.float32, torch.bfloat16):
            if set_name != "llama-3.2-1b" and dtype == torch.bfloat16:
                continue
            for opt_name, make in opts:
                params = [torch.nn.Parameter(torch.randn(s, device=dev, dtype=dtype) * 0.02) for s in shapes]
                for p in params:
                    p.grad = torch.randn_like(p) * 1e-3
                opt = make(params)
                med, ts = _median_time(opt.step, sync, reps=8, warm=3)
                row = {"part": "bnb", "set": set_name, "dtype": str(dtype).removeprefix("torch."),
                       "optimizer": opt_name, "tensors": len(shapes),
                       "numel": sum(p.numel() for p in params), "step_s": med, "steps_s": ts}
                if not dry:
                    row.update(_kernel_times(opt.step, ("optimizer", "adam")))
                    sync()
                    t0 = time.perf_counter()
                    opt.step()
                    row["issue_s"] = time.perf_counter() - t0
                    sync()
                rows.append(row)
                print(json.dumps({k: row[k] for k in ("set", "dtype", "optimizer", "step_s")}
                                 | {"kernels_s": row.get("kernels_s"), "matched_s": row.get("matched_s")}),
                      flush=True)
                del opt, params
                if not dry:
                    torch.cuda.empty_cache()
    _write(out, rows)


def _probe_tools() -> Any:
    """benchmarks/check/muon_dtensor.py: its operator counter (``OpCount``) and its profile of the local GEMMs
    (``gemms_by_parent``), one implementation for the CPU probe and this GPU run."""
    sys.path.insert(0, str(HERE.parent / "check"))
    import muon_dtensor

    return muon_dtensor


def _local_gemms(fn: Any) -> dict[str, int]:
    """The GEMMs ``fn`` ran, by parent and shape (``muon_dtensor.gemms_by_parent``)."""
    from torch.profiler import profile

    with profile(record_shapes=True) as prof:
        fn()
    return _probe_tools().gemms_by_parent(prof)


def muon_part(out: str, dry: bool, world: int, lora: bool = False) -> None:
    from torch.optim._muon import _zeropower_via_newtonschulz

    dev = "cpu" if dry else "cuda"
    sync = (lambda: None) if dry else torch.cuda.synchronize
    mesh = None
    if world > 1:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
        mesh = init_device_mesh(dev, (world,))
    layers = {"tiny": [(64, 64), (256, 64)]} if dry else (LORA_LAYERS if lora else LAYERS)
    rows = []

    def as_param(shape: tuple[int, int]) -> torch.Tensor:
        t = torch.randn(shape, device=dev, dtype=torch.float32) * 0.02
        if mesh is None:
            return t
        from torch.distributed.tensor import Shard, distribute_tensor

        return distribute_tensor(t, mesh, [Shard(0)])

    coeffs = (3.4445, -4.7750, 2.0315)
    for model, mats in layers.items():
        for shape in sorted(set(mats)):
            g = as_param(shape)

            def ns(g: torch.Tensor = g) -> torch.Tensor:
                return _zeropower_via_newtonschulz(g, coeffs, 5, 1e-7)

            med, ts = _median_time(ns, sync, reps=5, warm=2)
            sync()
            t0 = time.perf_counter()
            ns()
            issue = time.perf_counter() - t0
            sync()
            counter = _probe_tools().OpCount()
            with counter:
                ns()
            sync()
            row = {"part": "muon-ns", "world": world, "model": model, "shape": list(shape), "step_s": med,
                   "steps_s": ts, "issue_s": issue, "dtensor_ops": sum(counter.counts.values()),
                   "dtensor_op_counts": counter.counts, "local_gemms": _local_gemms(ns)}
            if not dry:
                row.update(_kernel_times(ns, ("gemm", "gemv", "nvjet", "cutlass", "xmma", "sm90")))
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("world", "model", "shape", "step_s", "issue_s", "dtensor_ops")}
                             | {"kernels_s": row.get("kernels_s"), "gemm_s": row.get("matched_s")}), flush=True)
            del g
        # one Muon step over the layer's seven matrices (momentum, Nesterov, decay, the lr adjustment)
        params = [torch.nn.Parameter(as_param(s)) for s in mats]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        opt = torch.optim.Muon(params, lr=1e-5, weight_decay=0.01)
        med, ts = _median_time(opt.step, sync, reps=4, warm=2)
        sync()
        t0 = time.perf_counter()
        opt.step()
        issue = time.perf_counter() - t0
        sync()
        counter = _probe_tools().OpCount()
        with counter:
            opt.step()
        sync()
        row = {"part": "muon-step", "world": world, "model": model, "matrices": [list(s) for s in mats],
               "step_s": med, "steps_s": ts, "issue_s": issue, "dtensor_ops": sum(counter.counts.values()),
               "dtensor_op_counts": counter.counts}
        if not dry:
            row.update(_kernel_times(opt.step, ("gemm", "gemv", "nvjet", "cutlass", "xmma", "sm90")))
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("world", "model", "step_s", "issue_s", "dtensor_ops")}
                         | {"kernels_s": row.get("kernels_s")}), flush=True)
        del opt, params
    _write(out, rows)


def _write(out: str, rows: list[dict[str, Any]]) -> None:
    with open(out, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _run(target: Any, args: tuple[Any, ...], timeout: float) -> str:
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_guarded, args=(target, *args))
    p.start()
    p.join(timeout)
    if p.is_alive():
        p.kill()
        return "timeout"
    return "ok" if p.exitcode == 0 else f"exit {p.exitcode}"


def _guarded(target: Any, *args: Any) -> None:
    try:
        target(*args)
    except Exception:
        traceback.print_exc()
        sys.exit(1)


def provenance(dry: bool, git_sha: str | None) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    p: dict[str, Any] = {"date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                         "command": " ".join([Path(sys.executable).name, *sys.argv]),
                         "python": platform.python_version(), "torch": torch.__version__,
                         "torch_cuda": torch.version.cuda, "platform": platform.platform(), "dry_run": dry,
                         "git_sha": git_sha, "cpu": platform.processor()}
    try:
        p["bitsandbytes"] = version("bitsandbytes")
    except PackageNotFoundError:
        p["bitsandbytes"] = None
    if not dry and torch.cuda.is_available():
        p["device"] = torch.cuda.get_device_name(0)
        props = torch.cuda.get_device_properties(0)
        p["sm_count"] = props.multi_processor_count
    cpuinfo = Path("/proc/cpuinfo")
    names = [ln.split(":", 1)[1].strip() for ln in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if ln.startswith("model name")]
    p["cpu_model"] = names[0] if names else None
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--parts", nargs="*", default=["bnb", "muon1", "muon8", "muon4"],
                    help="bnb, muonW (a decoder layer's matrices at W ranks), muonloraW (its LoRA r16 adapters)")
    ap.add_argument("--git-sha", default=None)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--sets", nargs="*", default=None, help="the bnb part's parameter sets (default: all)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "provenance.json").write_text(json.dumps(provenance(args.dry_run, args.git_sha), indent=1))
    res = str(out / "kernels.jsonl")
    for part in args.parts:
        t0 = time.perf_counter()
        if part == "bnb":
            status = _run(bnb_part, (res, args.dry_run, args.sets), args.timeout)
        elif part.startswith("muonlora"):
            status = _run(muon_part, (res, args.dry_run, int(part.removeprefix("muonlora")), True), args.timeout)
        else:
            status = _run(muon_part, (res, args.dry_run, int(part.removeprefix("muon"))), args.timeout)
        print(f"part {part}: {status} in {time.perf_counter() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
