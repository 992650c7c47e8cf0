# ruff: noqa
"""Micro-benchmarks on one H200 for the step-time efficiency curves (GEMM, flash attention, memory-bound).

Run once on the lent H200 (torch 2.11, 2026-12-02) with ``python3 benchmarks/calibration/time/micro.py``; its
output is ``tests/data/micro_h200.json``, from which ``estimator/training/efficiency.py`` takes its measured constants
(GEMM efficiency curve, SDPA attention curves, fp8 ratio, HBM copy fraction, AdamW bytes, launch cost). Kept as
it ran (a device script, not linted).
"""
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

dev = "cuda"
out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "gemm": [], "fp8": [], "attn": [],
       "mem": {}, "adam": [], "launch": {}}


def bench(fn, min_ms=12.0, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); torch.cuda.synchronize()
    one = max(s.elapsed_time(e), 1e-3)
    n = max(3, min(200, int(min_ms / one)))
    s.record()
    for _ in range(n):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n / 1e3


random.seed(0)
hs = [768, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 8192]
ms = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
shapes = set()
for h in hs:
    for f in (h, 3 * h, 4 * h, int(3.5 * h) // 128 * 128, h // 4, h // 8):
        for m in ms:
            shapes.add((m, h, f))
shapes = sorted(shapes)
random.shuffle(shapes)
shapes = shapes[:90]
shapes += [(4096, 4096, 16), (4096, 16, 4096), (4096, 4096, 64), (4096, 64, 4096), (8192, 2048, 16),
           (8192, 16, 2048), (4096, 4096, 128256), (4096, 2048, 128256), (8192, 4096, 128256), (2048, 768, 50368)]
t0 = time.time()
for (m, k, n) in shapes:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    g = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
    rec = {"m": m, "k": k, "n": n}
    rec["fwd_s"] = bench(lambda: a @ b)          # Y = X W
    rec["dgrad_s"] = bench(lambda: g @ b.t())     # dX = dY W^T
    rec["wgrad_s"] = bench(lambda: a.t() @ g)     # dW = X^T dY
    out["gemm"].append(rec)
    del a, b, g
out["gemm_wall_s"] = time.time() - t0

# fp8
try:
    for (m, k, n) in [(2048, 2048, 8192), (8192, 4096, 14336), (8192, 8192, 8192), (4096, 4096, 4096),
                      (16384, 4096, 4096), (2048, 1024, 4096), (8192, 2048, 8192)]:
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device=dev)
        t = bench(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        tc = bench(lambda: (x * 1.5).to(torch.float8_e4m3fn))
        ta = bench(lambda: x.abs().max())
        out["fp8"].append({"m": m, "k": k, "n": n, "s": t, "cast_s": tc, "amax_s": ta})
except Exception as exc:  # noqa: BLE001
    out["fp8_error"] = repr(exc)

# attention (SDPA, causal)
for s_len in (1024, 2048, 4096, 8192, 16384):
    for (hq, hkv, d) in ((32, 8, 128), (16, 8, 128), (64, 8, 128), (16, 16, 64)):
        b = max(1, 8192 // s_len)
        q = torch.randn(b, hq, s_len, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        kk = torch.randn(b, hkv, s_len, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b, hkv, s_len, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        gq = hq != hkv

        def f():
            return F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=gq)
        tf = bench(f)
        o = f()
        go = torch.randn_like(o)

        def fb():
            o = f()
            o.backward(go)
        tfb = bench(fb)
        out["attn"].append({"b": b, "s": s_len, "hq": hq, "hkv": hkv, "d": d, "fwd_s": tf, "fwdbwd_s": tfb})
        del q, kk, v, o, go

# memory-bound
x = torch.empty(2 * 1024**3 // 2, device=dev, dtype=torch.bfloat16)
y = torch.empty_like(x)
out["mem"]["copy_bytes_per_s"] = 2 * x.numel() * 2 / bench(lambda: y.copy_(x))
xf = torch.empty(x.numel() // 2, device=dev, dtype=torch.float32)
out["mem"]["cast_f32_bf16_bytes_per_s"] = xf.numel() * 6 / bench(lambda: xf.to(torch.bfloat16))
out["mem"]["add_bytes_per_s"] = 3 * x.numel() * 2 / bench(lambda: x + y)
del x, y, xf
# HF-style RMSNorm eager and SwiGLU eager on [8192, 4096]
hdn = torch.randn(8192, 4096, device=dev, dtype=torch.bfloat16, requires_grad=True)
w = torch.ones(4096, device=dev, dtype=torch.bfloat16, requires_grad=True)


def rms():
    h32 = hdn.to(torch.float32)
    var = h32.pow(2).mean(-1, keepdim=True)
    return w * (h32 * torch.rsqrt(var + 1e-5)).to(torch.bfloat16)


out["mem"]["rmsnorm_fwd_s_8192x4096"] = bench(rms)
go = torch.randn(8192, 4096, device=dev, dtype=torch.bfloat16)
out["mem"]["rmsnorm_fwdbwd_s_8192x4096"] = bench(lambda: rms().backward(go))
gate = torch.randn(8192, 14336, device=dev, dtype=torch.bfloat16, requires_grad=True)
up = torch.randn(8192, 14336, device=dev, dtype=torch.bfloat16, requires_grad=True)
go2 = torch.randn(8192, 14336, device=dev, dtype=torch.bfloat16)
out["mem"]["swiglu_fwd_s_8192x14336"] = bench(lambda: F.silu(gate) * up)
out["mem"]["swiglu_fwdbwd_s_8192x14336"] = bench(lambda: (F.silu(gate) * up).backward(go2))
del hdn, gate, up, go2, go

# AdamW
for dtype, impl in ((torch.float32, "fused"), (torch.float32, "foreach"), (torch.bfloat16, "fused"),
                    (torch.bfloat16, "foreach"), (torch.float32, "forloop")):
    n_t, per = (100, 8 * 1024 * 1024) if impl != "forloop" else (100, 8 * 1024 * 1024)
    ps = [torch.zeros(per, device=dev, dtype=dtype, requires_grad=True) for _ in range(n_t)]
    for p in ps:
        p.grad = torch.randn_like(p)
    kw = {"fused": True} if impl == "fused" else ({"foreach": True} if impl == "foreach" else {"foreach": False})
    opt = torch.optim.AdamW(ps, lr=1e-5, weight_decay=0.01, **kw)
    t = bench(opt.step, min_ms=50)
    out["adam"].append({"dtype": str(dtype), "impl": impl, "params": n_t * per, "tensors": n_t, "s": t})
    del ps, opt
# small tensors for-loop: launch-bound
ps = [torch.zeros(4096, device=dev, requires_grad=True) for _ in range(500)]
for p in ps:
    p.grad = torch.randn_like(p)
for impl in ("forloop", "foreach", "fused"):
    kw = {"fused": True} if impl == "fused" else ({"foreach": True} if impl == "foreach" else {"foreach": False})
    opt = torch.optim.AdamW(ps, lr=1e-5, **kw)
    out["adam"].append({"dtype": "torch.float32", "impl": impl + "_small", "params": 500 * 4096, "tensors": 500,
                        "s": bench(opt.step, min_ms=50)})
# launch overhead: 1000 tiny adds
z = torch.zeros(16, device=dev)


def tiny():
    for _ in range(1000):
        z.add_(1.0)


out["launch"]["tiny_kernel_s"] = bench(tiny, min_ms=50) / 1000
odir = os.environ.get("OUT", "/tmp")
with open(os.path.join(odir, "micro_h200.json"), "w") as fh:
    json.dump(out, fh, indent=1)
print("done", out["gemm_wall_s"], len(out["gemm"]), file=sys.stderr)
