"""Serving under sustained load on one GPU (device call 3): what a throughput benchmark that runs for minutes
gets, against the short bursts of calls 1 and 2.

* ``gemm``: fp8 GEMMs (``torch._scaled_mm``, e4m3, per-tensor scales) at Llama projection shapes, timed in a
  burst (20 after 3 warm-ups, as call 2 did) and then back to back for ``SUSTAIN_S`` seconds, in windows;
  SM clock, power and temperature sampled by ``nvidia-smi`` beside it;
* ``step B CTX [C]``: an engine-like Llama-3.1-8B decode step (32 layers: fp8 q/k/v, o, gate-up, down GEMMs of
  M = B (+ C) tokens with their fp8 activation casts, SiLU-and-mul, residual adds, decode attention with
  ``scaled_dot_product_attention(enable_gqa=True)`` over a contiguous bf16 KV cache of B x CTX tokens, and,
  with C, one causal prefill chunk of C tokens in the same step, the mixed batch of in-flight batching; bf16
  lm_head over the B (+1) last tokens), captured in one CUDA graph and replayed: burst (30 replays) and
  sustained (back to back for ``SUSTAIN_S`` s).

Random weights (no download). Each case runs in its own process::

    python3 measure_sustained.py gemm | step 256 2048 | step 512 1024 1024 ...    # JSON to $OUT/<case>.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback

import torch
import torch.nn.functional as F

SUSTAIN_S = 12.0
WINDOW_S = 0.5
H, HQ, HKV, D, FFN, LAYERS, VOCAB = 4096, 32, 8, 128, 14336, 32, 128256


class Smi:
    """``nvidia-smi`` sampling SM clock (MHz), power (W) and temperature (C) every 200 ms into a list."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader,nounits",
             "-lms", "200"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.t0 = time.time()

    def stop(self) -> list[list[float]]:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=5)
        rows = []
        for line in out.splitlines():
            try:
                rows.append([float(x) for x in line.split(",")])
            except ValueError:
                continue
        return rows


def _burst(fn, reps: int, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / 1000 / reps


def _sustained(fn, per_call_s: float) -> list[float]:
    """Mean time a call in consecutive windows of about WINDOW_S, back to back for SUSTAIN_S."""
    n = max(1, int(WINDOW_S / max(per_call_s, 1e-6)))
    windows = []
    start = time.time()
    while time.time() - start < SUSTAIN_S:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        b.synchronize()
        windows.append(a.elapsed_time(b) / 1000 / n)
    return windows


def _fp8(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float8_e4m3fn)


def gemm() -> dict:
    one = torch.ones((), device="cuda", dtype=torch.float32)
    rows = []
    for name, m, k, n in [("8b-gate-up", 1024, 4096, 28672), ("70b-gate-up-tp4", 2048, 8192, 14336)]:
        w8 = _fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
        x8 = _fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))

        def fn(x8=x8, w8=w8):
            return torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        smi = Smi()
        burst = _burst(fn, 20)
        windows = _sustained(fn, burst)
        rows.append({"shape": name, "m": m, "k": k, "n": n, "burst_s": burst, "windows_s": windows,
                     "smi": smi.stop()})
        time.sleep(3)  # let the clock recover before the next shape
    return {"rows": rows}


def step(batch: int, ctx: int, chunk: int = 0) -> dict:
    dev, bf = "cuda", torch.bfloat16
    one = torch.ones((), device=dev, dtype=torch.float32)
    q_out, kv_out = HQ * D, HKV * D
    layers = []
    for _ in range(LAYERS):  # weights [N, K], fp8, one set per layer
        layers.append({
            "qkv": _fp8(torch.randn(q_out + 2 * kv_out, H, device=dev, dtype=bf) * 0.02),
            "o": _fp8(torch.randn(H, q_out, device=dev, dtype=bf) * 0.02),
            "gu": _fp8(torch.randn(2 * FFN, H, device=dev, dtype=bf) * 0.02),
            "down": _fp8(torch.randn(H, FFN, device=dev, dtype=bf) * 0.02),
        })
    lm_head = torch.randn(VOCAB, H, device=dev, dtype=bf) * 0.02
    # one KV cache per layer would not fit at the largest B x CTX; every layer reads a distinct slice of 2 GB+,
    # far beyond the 60 MB L2, so a shared pool of two buffers still reads HBM every layer
    kv_pool = [torch.randn(2, batch, HKV, ctx, D, device=dev, dtype=bf) for _ in range(2)]
    tokens = batch + chunk
    x = torch.randn(tokens, H, device=dev, dtype=bf)

    def lin(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(_fp8(t), w.t(), scale_a=one, scale_b=one, out_dtype=bf)

    def forward() -> torch.Tensor:
        h = x
        for i, w in enumerate(layers):
            qkv = lin(h, w["qkv"])
            q = qkv[:, :q_out]
            kv = kv_pool[i % 2]
            dq = q[:batch].reshape(batch, HQ, 1, D)
            att = F.scaled_dot_product_attention(dq, kv[0], kv[1], enable_gqa=True).reshape(batch, q_out)
            if chunk:
                pq = q[batch:].reshape(1, chunk, HQ, D).transpose(1, 2)
                pk = qkv[batch:, q_out:q_out + kv_out].reshape(1, chunk, HKV, D).transpose(1, 2)
                pv = qkv[batch:, q_out + kv_out:].reshape(1, chunk, HKV, D).transpose(1, 2)
                pa = F.scaled_dot_product_attention(pq, pk, pv, is_causal=True, enable_gqa=True)
                att = torch.cat([att, pa.transpose(1, 2).reshape(chunk, q_out)])
            h = h + lin(att, w["o"])
            gu = lin(h, w["gu"])
            h = h + lin(F.silu(gu[:, :FFN]) * gu[:, FFN:], w["down"])
        return h[:batch + (1 if chunk else 0)] @ lm_head.t()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            forward()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        forward()
    smi = Smi()
    burst = _burst(g.replay, 30, warm=5)
    windows = _sustained(g.replay, burst)
    kv_bytes = LAYERS * 2 * batch * HKV * ctx * D * 2
    weight_bytes = sum(t.numel() for w in layers for t in w.values()) + lm_head.numel() * 2
    return {"batch": batch, "ctx": ctx, "chunk": chunk, "layers": LAYERS, "burst_s": burst, "windows_s": windows,
            "kv_bytes_read": kv_bytes, "weight_bytes": weight_bytes, "smi": smi.stop(),
            "kv_dtype": "bf16", "weights_dtype": "fp8 e4m3 (per-tensor scales), lm_head bf16"}


def main() -> None:
    name = sys.argv[1]
    prov = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "sustain_s": SUSTAIN_S}
    args = [int(a) for a in sys.argv[2:]]
    tag = "_".join([name, *sys.argv[2:]])
    try:
        res = gemm() if name == "gemm" else step(*args)
    except Exception as exc:
        res = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    res["case"] = tag
    res["provenance"] = prov
    line = json.dumps(res)
    print("RESULT", line[:300], flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"sustained_{tag}.json"), "w") as f:
            f.write(line)


if __name__ == "__main__":
    main()
