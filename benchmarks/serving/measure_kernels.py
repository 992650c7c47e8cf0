"""Serving micro-benchmarks on one GPU (device call 2): the achieved rates an engine's decode and prefill are
made of, measured rather than assumed.

* bf16 and fp8 (``torch._scaled_mm``, e4m3, per-tensor scales, bf16 out) GEMMs ``[M, K] x [K, N]`` at the
  Llama 8B / 70B projection shapes, M = tokens in the step (1 .. 8192);
* decode attention as a paged-attention engine runs it: ``scaled_dot_product_attention`` with one query per
  request and ``enable_gqa=True`` (K/V read once, no repeat_kv), B requests x L context, bf16;
* the floor of one small kernel inside a CUDA graph (what a fused engine pays per kernel and layer).

    python3 measure_kernels.py gemm | attention | launch      # one JSON line each, also $OUT/<case>.json
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

SHAPES = {  # (K, N) of one projection at TP1
    "8b-qkv": (4096, 6144), "8b-gate-up": (4096, 28672), "8b-down": (14336, 4096),
    "70b-qkv": (8192, 10240), "70b-gate-up": (8192, 57344), "70b-down": (28672, 8192),
}
MS = [1, 16, 64, 128, 256, 512, 1024, 2048, 8192]


def _time(fn, reps: int = 20, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / reps


def gemm() -> dict:
    rows = []
    for name, (k, n) in SHAPES.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        w8 = w.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda", dtype=torch.float32)
        for m in MS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            t16 = _time(lambda x=x, w=w: x @ w.t())
            row = {"shape": name, "m": m, "k": k, "n": n, "bf16_s": t16}
            try:
                x8 = x.to(torch.float8_e4m3fn)
                t8 = _time(lambda x8=x8, w8=w8, one=one: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                                          out_dtype=torch.bfloat16))
                row["fp8_s"] = t8
            except Exception as exc:  # recorded, the bf16 figure stays
                row["fp8_error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
            del x
        del w, w8
        torch.cuda.empty_cache()
    return {"rows": rows}


def attention() -> dict:
    rows = []
    hq, hkv, d = 32, 8, 128
    for batch, ctx in [(1, 4096), (16, 1024), (16, 4096), (64, 1024), (64, 4096), (256, 1024), (256, 2048)]:
        q = torch.randn(batch, hq, 1, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, hkv, ctx, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        row = {"batch": batch, "ctx": ctx, "kv_bytes": 2 * k.numel() * 2}
        try:
            row["gqa_s"] = _time(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        except Exception as exc:
            row["gqa_error"] = f"{type(exc).__name__}: {exc}"[:300]
        try:  # the HF path: repeat_kv, then SDPA
            def rep(q=q, k=k, v=v, batch=batch, ctx=ctx):
                kk = k[:, :, None].expand(batch, hkv, hq // hkv, ctx, d).reshape(batch, hq, ctx, d)
                vv = v[:, :, None].expand(batch, hkv, hq // hkv, ctx, d).reshape(batch, hq, ctx, d)
                return F.scaled_dot_product_attention(q, kk, vv)
            row["repeat_kv_s"] = _time(rep)
        except Exception as exc:
            row["repeat_error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
        del q, k, v
        torch.cuda.empty_cache()
    return {"rows": rows, "heads": [hq, hkv, d]}


def launch() -> dict:
    x = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    n = 200

    def body():
        y = x
        for _ in range(n):
            y = y * 1.0001
        return y

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    t = _time(g.replay, reps=50)
    return {"kernels": n, "graph_s": t, "per_kernel_s": t / n, "eager_per_kernel_s": _time(body, reps=5) / n}


def main() -> None:
    name = sys.argv[1]
    prov = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        res = {"gemm": gemm, "attention": attention, "launch": launch}[name]()
    except Exception as exc:
        res = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    res["case"] = name
    res["provenance"] = prov
    line = json.dumps(res)
    print("RESULT", line[:400], flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"kernels_{name}.json"), "w") as f:
            f.write(line)


if __name__ == "__main__":
    main()
