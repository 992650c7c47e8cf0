# ruff: noqa
"""Device call (issue 14, item 4): single-GPU step time and where it goes, per model family, on one H200.

    python3 benchmarks/calibration/time/families.py --out DIR [--deadline 520] [--dry-run] [--only ID ...]

Families outside the calibration set (Qwen3, Phi-3, Gemma 2 with SDPA and eager attention, Qwen2.5 14B, Mistral)
beside Llama 3.1 8B, each built from its ``config.json`` fields (``transformers.AutoConfig.for_model``) with random
weights (no hub download) and the decoder truncated to ``layers`` layers of the real widths (the estimator is
given the same truncated config, so the comparison is like for like and the LM head's share is larger, which
makes the vocabulary's cost visible). Each case runs in its own forked process (fresh CUDA context and caching
allocator); the driver imports torch / transformers once and never touches CUDA itself.

Per step case: bf16 weights; LoRA (peft, r 16, all linear layers, dropout 0) under bf16 autocast, or full
fine-tuning in bf16 ("bf16-true") with fused AdamW; 3 warm-up steps, 5 timed steps (synchronised), the median;
CUDA events at the phase boundaries (forward, backward, optimizer) with the CPU time each phase took to issue;
one step under ``torch.profiler`` (CUDA activity): kernel time summed by category (GEMM, attention, loss, norm,
other elementwise) and the kernel count. The micro case times the components alone: the LM head and the HF loss
(fp32 upcast, cross-entropy) per (hidden, vocabulary), SDPA attention forward + backward per head dimension,
eager attention with Gemma 2's soft-capping, and HF RMSNorm variants.

Writes ``DIR/families.jsonl`` (one line per case, appended as each finishes) and ``DIR/provenance.json``.
"""
import argparse
import datetime as _dt
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

# config.json fields of each family (the published configs, copied field by field; layers truncated per case)
LLAMA31_8B = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "max_position_embeddings": 131072, "tie_word_embeddings": False}
LLAMA32_1B = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 8192, "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "max_position_embeddings": 131072, "tie_word_embeddings": True, "head_dim": 64}
QWEN3_8B = {"model_type": "qwen3", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False}
QWEN25_14B = {"model_type": "qwen2", "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8,
              "intermediate_size": 13824, "vocab_size": 152064, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
              "max_position_embeddings": 131072, "tie_word_embeddings": False}
PHI3_MINI = {"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32, "num_key_value_heads": 32,
             "intermediate_size": 8192, "vocab_size": 32064, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
             "tie_word_embeddings": False, "pad_token_id": 32000, "eos_token_id": 32000, "bos_token_id": 1}
PHI3_MEDIUM = {"model_type": "phi3", "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 10,
               "intermediate_size": 17920, "vocab_size": 32064, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
               "tie_word_embeddings": False, "pad_token_id": 32000, "eos_token_id": 32000, "bos_token_id": 1}
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "num_attention_heads": 16, "num_key_value_heads": 8,
             "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000, "rms_norm_eps": 1e-6,
             "rope_theta": 10000.0, "max_position_embeddings": 8192, "tie_word_embeddings": True,
             "sliding_window": 4096, "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0,
             "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh"}
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
              "max_position_embeddings": 32768, "tie_word_embeddings": False, "sliding_window": None}


def _case(cid, cfg, layers, method, seq, mbs=1, attn="sdpa", ckpt="none", steps=5):
    c = dict(cfg, num_hidden_layers=layers)
    return {"id": cid, "config": c, "method": method, "seq_len": seq, "micro_batch_size": mbs, "attention": attn,
            "activation_checkpointing": ckpt, "timed_steps": steps}


def all_cases():
    """In priority order (the driver stops at its deadline)."""
    c = _case
    out = [{"id": "micro"},
           c("llama31-8b-l8-lora-s4096", LLAMA31_8B, 8, "lora", 4096),
           c("llama31-8b-l8-full-s4096", LLAMA31_8B, 8, "full", 4096),
           c("qwen3-8b-l8-lora-s4096", QWEN3_8B, 8, "lora", 4096),
           c("qwen3-8b-l8-full-s4096", QWEN3_8B, 8, "full", 4096),
           c("gemma2-9b-l8-lora-s4096-eager", GEMMA2_9B, 8, "lora", 4096, attn="eager"),
           c("gemma2-9b-l8-full-s4096-eager", GEMMA2_9B, 8, "full", 4096, attn="eager"),
           c("phi3-mini-l8-lora-s4096", PHI3_MINI, 8, "lora", 4096),
           c("phi3-mini-l8-full-s4096", PHI3_MINI, 8, "full", 4096),
           c("llama32-1b-l16-full-s256", LLAMA32_1B, 16, "full", 256, steps=8),
           c("llama32-1b-l16-full-s512", LLAMA32_1B, 16, "full", 512, steps=8),
           c("llama32-1b-l16-full-s1024", LLAMA32_1B, 16, "full", 1024, steps=8),
           c("llama32-1b-l16-lora-s512", LLAMA32_1B, 16, "lora", 512, steps=8),
           c("llama31-8b-l4-lora-s65536-ck", LLAMA31_8B, 4, "lora", 65536, ckpt="full", steps=3),
           c("llama31-8b-l4-lora-s32768-ck", LLAMA31_8B, 4, "lora", 32768, ckpt="full", steps=3),
           c("qwen25-14b-l8-lora-s4096", QWEN25_14B, 8, "lora", 4096),
           c("phi3-medium-l8-lora-s4096", PHI3_MEDIUM, 8, "lora", 4096),
           c("mistral-7b-l8-lora-s4096", MISTRAL_7B, 8, "lora", 4096),
           c("gemma2-9b-l8-full-s2048-eager", GEMMA2_9B, 8, "full", 2048, attn="eager"),
           c("gemma2-9b-l8-lora-s4096-sdpa", GEMMA2_9B, 8, "lora", 4096),
           c("llama31-8b-l8-lora-s1024", LLAMA31_8B, 8, "lora", 1024),
           c("qwen3-8b-l8-lora-s1024", QWEN3_8B, 8, "lora", 1024),
           c("phi3-mini-l8-lora-s1024", PHI3_MINI, 8, "lora", 1024),
           c("llama31-8b-l8-lora-s16384", LLAMA31_8B, 8, "lora", 16384),
           c("qwen25-14b-l8-full-s4096", QWEN25_14B, 8, "full", 4096),
           c("mistral-7b-l8-full-s4096", MISTRAL_7B, 8, "full", 4096),
           c("phi3-medium-l8-full-s4096", PHI3_MEDIUM, 8, "full", 4096)]
    return out


def dry(case):
    """CPU dry run: tiny widths, same code path."""
    if case["id"] == "micro":
        return case
    c = json.loads(json.dumps(case))
    cfg = c["config"]
    cfg.update(hidden_size=64, num_attention_heads=4, num_key_value_heads=2 if cfg["num_key_value_heads"] <
               cfg["num_attention_heads"] else 4, intermediate_size=128, vocab_size=512, num_hidden_layers=2)
    if cfg.get("head_dim"):
        cfg["head_dim"] = 16
    if cfg.get("sliding_window"):
        cfg["sliding_window"] = 16
    for key in ("pad_token_id", "eos_token_id", "bos_token_id"):
        if key in cfg:
            cfg[key] = 0
    c["seq_len"], c["timed_steps"] = 32, 2
    return c


KERNEL_CLASSES = (("attention", ("flash", "fmha", "attention", "sdpa", "cudnn", "efficient")),
                  ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "matmul", "sm90", "sm80", "cublas", "splitk")),
                  ("loss", ("log_softmax", "nll_loss", "softmax", "cross_entropy")),
                  ("optimizer", ("adam", "multi_tensor", "foreach")),
                  ("norm", ("rsqrt", "pow", "mean", "reduce", "norm")))


def kernel_class(name):
    n = name.lower()
    for cls, keys in KERNEL_CLASSES:
        if any(k in n for k in keys):
            return cls
    return "elementwise"


def build(case, dev):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg_d = dict(case["config"])
    mt = cfg_d.pop("model_type")
    cfg = AutoConfig.for_model(mt, **cfg_d)
    cfg.use_cache = False
    full = case["method"] == "full"
    dtype = torch.bfloat16
    with torch.device(dev):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=case["attention"])
    model.config.use_cache = False
    if case["activation_checkpointing"] == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    info = {"model_class": type(model).__name__, "total_params": int(sum(p.numel() for p in model.parameters()))}
    if not full:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0,
                                                 bias="none"))
        if case["activation_checkpointing"] == "full":
            model.enable_input_require_grads()
    params = [p for p in model.parameters() if p.requires_grad]
    info["trainable_params"] = int(sum(p.numel() for p in params))
    info["trainable_tensors"] = len(params)
    opt = torch.optim.AdamW(params, lr=1e-5, eps=1e-8, weight_decay=0.01, fused=dev == "cuda")
    info["optimizer"] = "torch.optim.AdamW(fused=True)" if dev == "cuda" else "AdamW default (CPU)"
    return model, opt, info


def run_step_case(case, res, dev):
    model, opt, info = build(case, dev)
    res.update(info)
    model.train()
    autocast = case["method"] != "full"
    res["autocast_bf16"] = autocast
    g = torch.Generator(device="cpu")
    g.manual_seed(0)
    x = torch.randint(0, case["config"]["vocab_size"], (case["micro_batch_size"], case["seq_len"]), generator=g).to(dev)

    def fwd():
        if autocast:
            with torch.autocast(dev, dtype=torch.bfloat16):
                return model(input_ids=x, labels=x).loss
        return model(input_ids=x, labels=x).loss

    def step():
        loss = fwd()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for _ in range(3):
        step()
    sync()
    times = []
    for _ in range(case["timed_steps"]):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    m = res["measured"]
    m["step_times_s"] = times
    m["step_time_s"] = statistics.median(times)
    if dev == "cuda":
        m["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        phases = []
        for _ in range(3):
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            sync()
            c0 = time.perf_counter()
            ev[0].record()
            loss = fwd()
            c1 = time.perf_counter()
            ev[1].record()
            loss.backward()
            c2 = time.perf_counter()
            ev[2].record()
            opt.step()
            opt.zero_grad(set_to_none=True)
            c3 = time.perf_counter()
            ev[3].record()
            sync()
            c4 = time.perf_counter()
            del loss
            phases.append({"cpu_fwd_s": c1 - c0, "cpu_bwd_s": c2 - c1, "cpu_opt_s": c3 - c2, "wall_s": c4 - c0,
                           "gpu_fwd_s": ev[0].elapsed_time(ev[1]) / 1e3, "gpu_bwd_s": ev[1].elapsed_time(ev[2]) / 1e3,
                           "gpu_opt_s": ev[2].elapsed_time(ev[3]) / 1e3})
        m["phases_median"] = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
        m["kernels"] = profile(step, sync)


def profile(fn, sync):
    from torch.profiler import ProfilerActivity, profile as prof

    sync()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        sync()
    by_cls, count, top = {}, 0, {}
    for e in p.events():
        if e.device_type.name != "CUDA":
            continue
        us = e.device_time if hasattr(e, "device_time") else e.cuda_time
        if not us:
            continue
        count += 1
        cls = kernel_class(e.name)
        by_cls[cls] = by_cls.get(cls, 0.0) + us / 1e6
        top[e.name[:120]] = top.get(e.name[:120], 0.0) + us / 1e6
    return {"count": count, "by_class_s": by_cls, "busy_s": sum(by_cls.values()),
            "top": sorted(top.items(), key=lambda kv: -kv[1])[:25]}


def _time_cuda(fn, reps=5):
    torch.cuda.synchronize()
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def run_micro(res, dev):
    import torch.nn.functional as F

    m = res["measured"]
    if dev != "cuda":
        m["skipped"] = "cpu"
        return
    T = 8192
    head = {}
    for h, v in ((4096, 128256), (3584, 152064), (4096, 151936), (5120, 152064), (3584, 256000), (3072, 32064),
                 (4096, 32768), (2048, 128256)):
        x = torch.randn(T, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(v, h, device=dev, dtype=torch.bfloat16, requires_grad=False) * 0.02
        wt = w.clone().requires_grad_(True)
        y = torch.randint(0, v, (T,), device=dev)

        def fwd_only(x=x, w=w):
            with torch.no_grad():
                return F.linear(x, w)

        def loss_fb(x=x, w=w, y=y, cap=None):
            logits = F.linear(x, w)
            if cap:
                logits = torch.tanh(logits / cap) * cap
            loss = F.cross_entropy(logits.float(), y)
            loss.backward()

        def loss_fb_trainable(x=x, w=wt, y=y):
            loss = F.cross_entropy(F.linear(x, w).float(), y)
            loss.backward()

        head[f"{h}x{v}"] = {"gemm_fwd_s": _time_cuda(fwd_only), "head_loss_fwd_bwd_s": _time_cuda(loss_fb),
                            "head_loss_fwd_bwd_trainable_s": _time_cuda(loss_fb_trainable)}
        if v == 256000:
            head[f"{h}x{v}"]["head_softcap_loss_fwd_bwd_s"] = _time_cuda(lambda: loss_fb(cap=30.0))
        del x, w, wt
        torch.cuda.empty_cache()
    m["lm_head_loss_T8192"] = head
    attn = {}
    for heads, kv, d in ((32, 8, 128), (16, 8, 256), (32, 32, 96), (40, 8, 128), (32, 8, 64)):
        for s in (1024, 4096, 8192):
            q = torch.randn(1, heads, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(1, kv, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            vv = torch.randn(1, kv, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            go = torch.randn(1, heads, s, d, device=dev, dtype=torch.bfloat16)

            def f(q=q, k=k, vv=vv):
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, vv, is_causal=True, enable_gqa=True)

            def fb(q=q, k=k, vv=vv, go=go):
                o = F.scaled_dot_product_attention(q, k, vv, is_causal=True, enable_gqa=True)
                o.backward(go)

            flops = 4.0 * heads * s * s * d / 2.0
            tf, tfb = _time_cuda(f), _time_cuda(fb)
            attn[f"h{heads}kv{kv}d{d}s{s}"] = {"fwd_s": tf, "fwd_bwd_s": tfb, "fwd_tflops": flops / tf / 1e12,
                                               "bwd_tflops": 2.5 * flops / max(tfb - tf, 1e-9) / 1e12}
            del q, k, vv, go
    m["sdpa"] = attn
    torch.cuda.empty_cache()
    norms = {}
    for h in (2048, 3072, 3584, 4096, 5120):
        x = torch.randn(T, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
        wgt = torch.ones(h, device=dev, dtype=torch.bfloat16, requires_grad=True)
        go = torch.randn(T, h, device=dev, dtype=torch.bfloat16)

        def llama_norm(x=x, wgt=wgt):
            xf = x.float()
            var = xf.pow(2).mean(-1, keepdim=True)
            return wgt * (xf * torch.rsqrt(var + 1e-6)).to(x.dtype)

        def gemma_norm(x=x, wgt=wgt):
            xf = x.float()
            out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (out * (1.0 + wgt.float())).type_as(x)

        for name, fn in (("llama", llama_norm), ("gemma", gemma_norm)):
            def fb(fn=fn, go=go):
                fn().backward(go)

            def fo(fn=fn):
                with torch.no_grad():
                    fn()

            norms[f"{name}-h{h}"] = {"fwd_s": _time_cuda(fo), "fwd_bwd_s": _time_cuda(fb), "elements": T * h}
        del x, wgt, go
    m["rmsnorm_T8192"] = norms
    # eager attention with Gemma 2's soft-capping (transformers gemma2 eager_attention_forward), 16 heads, d 256
    eager = {}
    for s in (2048, 4096):
        heads, kv, d = 16, 8, 256
        q = torch.randn(1, heads, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, kv, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        vv = torch.randn(1, kv, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        mask = torch.triu(torch.full((s, s), float("-inf"), device=dev), 1)[None, None].to(torch.bfloat16)
        go = torch.randn(1, heads, s, d, device=dev, dtype=torch.bfloat16)

        def eager_fb(q=q, k=k, vv=vv, mask=mask, go=go, cap=50.0):
            kk = k.repeat_interleave(heads // kv, 1)
            vr = vv.repeat_interleave(heads // kv, 1)
            w = torch.matmul(q, kk.transpose(2, 3)) * (d ** -0.5)
            w = torch.tanh(w / cap) * cap
            w = w + mask
            w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
            torch.matmul(w, vr).backward(go)

        eager[f"softcap-h{heads}kv{kv}d{d}s{s}"] = {"fwd_bwd_s": _time_cuda(eager_fb, 3)}
        del q, k, vv, mask, go
        torch.cuda.empty_cache()
    m["eager_attention"] = eager


def child(case, out_path, dev):
    res = {"id": case["id"], "measured": {}, "status": "ok"}
    t0 = time.perf_counter()
    try:
        if dev == "cuda":
            torch.cuda.init()
        if case["id"] == "micro":
            run_micro(res, dev)
        else:
            res["case"] = case
            run_step_case(case, res, dev)
    except torch.cuda.OutOfMemoryError as e:
        res["status"] = "oom"
        res["error"] = str(e)[:300]
    except Exception as e:  # noqa: BLE001
        res["status"] = "error"
        res["error"] = traceback.format_exc()[-2000:]
    res["wall_s"] = time.perf_counter() - t0
    Path(out_path).write_text(json.dumps(res))


def provenance():
    import importlib.metadata as md

    def v(n):
        try:
            return md.version(n)
        except Exception:
            return None

    p = {"script": "benchmarks/calibration/time/families.py", "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(),
         "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
         "peft": v("peft"), "python": platform.python_version(), "host": platform.node(),
         "script_sha256": __import__("hashlib").sha256(Path(__file__).read_bytes()).hexdigest()}
    try:
        import subprocess

        p["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit,"
                                          "clocks.max.sm", "--format=csv,noheader"], capture_output=True, text=True,
                                         timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001
        p["nvidia_smi"] = str(e)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=520.0)
    ap.add_argument("--case-timeout", type=float, default=90.0)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = "cpu" if args.dry_run else "cuda"
    (out / "provenance.json").write_text(json.dumps(provenance(), indent=1))
    start = time.perf_counter()
    ctx = mp.get_context("fork")
    for case in all_cases():
        if args.only and case["id"] not in args.only:
            continue
        if args.dry_run:
            case = dry(case)
        left = args.deadline - (time.perf_counter() - start)
        if left < 20:
            print("deadline: stop before", case["id"], flush=True)
            break
        tmp = out / f"_{case['id']}.json"
        p = ctx.Process(target=child, args=(case, str(tmp), dev))
        p.start()
        p.join(min(args.case_timeout, left))
        if p.is_alive():
            p.kill()
            p.join()
            res = {"id": case["id"], "status": "timeout"}
        elif tmp.exists():
            res = json.loads(tmp.read_text())
            tmp.unlink()
        else:
            res = {"id": case["id"], "status": f"exit {p.exitcode}"}
        with open(out / "families.jsonl", "a") as f:
            f.write(json.dumps(res) + "\n")
        m = res.get("measured", {})
        print(case["id"], res["status"], round(m.get("step_time_s", 0.0), 4), round(res.get("wall_s", 0.0), 1),
              flush=True)


if __name__ == "__main__":
    main()
