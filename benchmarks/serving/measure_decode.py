"""Serving measurements on one GPU, no downloads: weights and KV-cache memory of a static-cache decode loop
(Hugging Face transformers, SDPA, random weights built from a config), prefill time, and decode tokens/s at
batch 1-256 with the decode step captured in a CUDA graph (``torch.cuda.graph``), which is what serving
engines do for decode (vLLM captures the decode forward in CUDA graphs for batch sizes up to
``max_cudagraph_capture_size``; TensorRT-LLM and SGLang likewise). One case per process:

    python3 measure_decode.py bench            # HBM copy bandwidth, bf16 matmul rate (the ceilings)
    python3 measure_decode.py 8b               # Llama-3.1-8B shape, 32 layers, bf16, static cache 2048
    python3 measure_decode.py 8b-ctx8k         # the same, static cache 8192 (KV read dominates at large batch)
    python3 measure_decode.py 70b-l20          # Llama-3.1-70B widths, 20 of 80 layers, bf16, static cache 2048

Each prints one JSON line (``RESULT {...}``) and writes it to ``$OUT/<case>.json``.

What a figure stands for: HF's StaticCache attends over its whole ``max_cache_len`` each decode step (the
mask is skipped for a one-token query: masking_utils._ignore_causal_mask_sdpa), so a decode step reads
weights + batch x max_cache_len x KV bytes per token, like an engine at that context length. The graph replay
removes Python and launch overhead, as an engine's CUDA-graph decode does; it keeps HF's unfused kernels
(separate RMSNorm, rotary, SwiGLU, SDPA decode), which an engine fuses, so it is a floor for an engine's
decode speed at that batch and context.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch

GiB = 1024**3
CASES = {
    "8b": dict(layers=32, hidden=4096, inter=14336, heads=32, kv=8, vocab=128256, cache=2048,
               batches=[1, 2, 4, 8, 16, 32, 64, 128, 256], prefill=[512, 2048, 8192]),
    "8b-ctx8k": dict(layers=32, hidden=4096, inter=14336, heads=32, kv=8, vocab=128256, cache=8192,
                     batches=[1, 4, 16, 32, 64], prefill=[]),
    "70b-l20": dict(layers=20, hidden=8192, inter=28672, heads=64, kv=8, vocab=128256, cache=2048,
                    batches=[1, 2, 4, 8, 16, 32, 64, 128, 256], prefill=[512, 2048, 8192]),
}


def _sync_time(fn, reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / reps


def _mem() -> dict[str, int]:
    free, total = torch.cuda.mem_get_info()
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
            "max_allocated": torch.cuda.max_memory_allocated(), "device_used": total - free,
            "device_total": total}


def bench() -> dict:
    out: dict = {}
    x = torch.empty(4 * GiB // 2, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    t = _sync_time(lambda x=x, y=y: y.copy_(x), 20)
    out["copy_bytes_moved"] = 2 * x.numel() * 2
    out["copy_s"] = t
    out["copy_tb_s"] = 2 * x.numel() * 2 / t / 1e12
    del x, y
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a @ b
    t = _sync_time(lambda: a @ b, 10)
    out["matmul_8192_tflops"] = 2 * 8192**3 / t / 1e12
    # a decode-like GEMV read: [1, 8192] x [8192, 28672] bf16 (one 70B MLP up-projection)
    w = torch.randn(8192, 28672 * 4, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(1, 8192, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        v @ w
    t = _sync_time(lambda: v @ w, 20)
    out["gemv_read_tb_s"] = w.numel() * 2 / t / 1e12
    return out


def model_case(name: str) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

    c = CASES[name]
    cfg = LlamaConfig(hidden_size=c["hidden"], intermediate_size=c["inter"], num_hidden_layers=c["layers"],
                      num_attention_heads=c["heads"], num_key_value_heads=c["kv"], vocab_size=c["vocab"],
                      max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    out: dict = {"case": name, "config": c, "attn_implementation": "sdpa", "dtype": "bfloat16"}
    torch.cuda.reset_peak_memory_stats()
    out["mem_start"] = _mem()
    torch.set_default_dtype(torch.bfloat16)
    t0 = time.time()
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model.eval()
    torch.cuda.synchronize()
    out["init_s"] = time.time() - t0
    out["param_count"] = sum(p.numel() for p in model.parameters())
    out["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    out["buffer_bytes"] = sum(b.numel() * b.element_size() for b in model.buffers())
    out["mem_after_weights"] = _mem()
    weights_alloc = torch.cuda.memory_allocated()

    # prefill: one request of S tokens, no cache, logits of the last token only (as an engine computes them)
    prefill = []
    with torch.no_grad():
        for s in c["prefill"]:
            ids = torch.randint(0, c["vocab"], (1, s), device="cuda")
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
            t = _sync_time(lambda ids=ids: model(input_ids=ids, use_cache=False, logits_to_keep=1), 3)
            prefill.append({"tokens": s, "s": t, "activation_peak_bytes": peak})
            del ids
            torch.cuda.empty_cache()
    out["prefill"] = prefill

    decode = []
    L = c["cache"]
    with torch.no_grad():
        for batch in c["batches"]:
            row: dict = {"batch": batch, "cache_len": L}
            try:
                torch.cuda.empty_cache()
                before = torch.cuda.memory_allocated()
                cache = StaticCache(config=cfg, max_cache_len=L)
                ids = torch.randint(0, c["vocab"], (batch, 1), device="cuda")
                pos = torch.zeros((batch, 1), dtype=torch.long, device="cuda")

                def step(ids=ids, pos=pos, cache=cache):
                    return model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True).logits

                step()  # lazy-allocates the static cache
                torch.cuda.synchronize()
                row["alloc_delta_after_first_step"] = torch.cuda.memory_allocated() - before
                kv_alloc = sum(lay.keys.numel() * lay.keys.element_size() + lay.values.numel()
                               * lay.values.element_size() for lay in cache.layers)
                row["kv_cache_tensor_bytes"] = kv_alloc

                def reset(cache=cache):
                    for lay in cache.layers:
                        lay.cumulative_length.fill_(1)

                if batch == 1:
                    reset()
                    for _ in range(3):
                        step()
                    reset()
                    row["eager_step_s"] = _sync_time(step, 10)
                reset()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(s)
                reset()
                g = torch.cuda.CUDAGraph()
                torch.cuda.reset_peak_memory_stats()
                with torch.cuda.graph(g):
                    step()
                torch.cuda.synchronize()
                reset()
                for _ in range(5):
                    g.replay()
                reps = 30
                t = _sync_time(g.replay, reps)
                row["graph_step_s"] = t
                row["tokens_per_s"] = batch / t
                row["graph_pool_peak_bytes"] = torch.cuda.max_memory_allocated() - weights_alloc - kv_alloc
                row["mem"] = _mem()
                del g, cache, ids, pos
            except Exception as exc:  # record, go on with the next batch
                row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                row["traceback"] = traceback.format_exc()[-3000:]
                if "out of memory" in str(exc):
                    torch.cuda.empty_cache()
            decode.append(row)
            torch.cuda.empty_cache()
    out["decode"] = decode
    return out


def main() -> None:
    name = sys.argv[1]
    prov = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        import transformers
        prov["transformers"] = transformers.__version__
    except Exception:
        pass
    try:
        res = bench() if name == "bench" else model_case(name)
    except Exception as exc:
        res = {"case": name, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    res["provenance"] = prov
    line = json.dumps(res)
    print("RESULT", line, flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            f.write(line)


if __name__ == "__main__":
    main()
