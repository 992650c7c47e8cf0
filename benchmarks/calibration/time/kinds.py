# ruff: noqa
"""Device call 5: where the step time of the call-4 kinds goes (QLoRA, eager attention, bitsandbytes 8-bit AdamW,
Adafactor, DDP's bucket copies), on one H200.

    python3 benchmarks/calibration/time/kinds.py --out DIR [--only ID ...]

For each case (the call-4 cases of ``cases.py`` plus a few plain references built from them) in its own process:
the model and optimizer are built exactly as ``measure.py`` builds them (its functions), then

- 3 warm-up steps; 8 timed steps (``torch.cuda.synchronize()`` before and after each): median and min;
- 4 steps with CUDA events at the phase boundaries and the CPU time each phase call took to return (no sync
  inside the step): how long the GPU spent per phase (idle included) and how long the CPU took to issue it;
- the optimizer step alone, synchronised, 4 times (median);
- one step under ``torch.profiler`` (CUDA activity): the summed kernel time by kernel name (top 40) and total,
  i.e. the GPU's busy time without the idle gaps.

Writes ``DIR/kinds.jsonl`` (one line per case) and ``DIR/provenance.json``.

NOT RUN YET: no device machine could be started in the session that wrote it (2026-12-03, four attempts), so
the constants fitted on device call 4 (``estimator/training/efficiency.py``: ``eager_bytes_scale``, ``adam8bit_*``,
``cpu_qlora_linear_s``) rest on whole-step times only. What to look at when it runs: whether the small QLoRA
steps are CPU-bound in forward and recompute (``cpu_fwd_s`` vs ``gpu_fwd_s``, kernel busy time vs wall), the
bitsandbytes 8-bit step's per-tensor vs per-parameter cost (``micro-adamw8bit``), the eager attention kernels'
share (``top_kernels``), and the 1B checkpointed step without DDP (``ref-l1b-...``) beside the DDP cases. Needs
bitsandbytes 0.50.2 carried as a wheel, like device call 4.
"""
import argparse
import copy
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import cases as cases_mod  # noqa: E402


def _plain(base_id, new_id, **training):
    c = copy.deepcopy(cases_mod.by_id(base_id))
    c["id"] = new_id
    c["request"]["training"].update(training)
    for k in ("wrap", "ddp_gradient_as_bucket_view", "world_size_fake"):
        c.pop(k, None)
    c["request"]["hardware"] = {"gpu": "h200-sxm-141gb", "num_nodes": 1, "gpus_per_node": 1}
    return c


def all_cases():
    first = ["l8b-qlora16al-fused-b1-s4096-ck", "l8b-qlora16al-fused-b1-s4096-nock", "l8b-qlora16al-fused-b1-s2048-ck",
             "l8b-qlora16al-fused-b1-s2048-nock"]
    then = ["l1b-full-mixed-eager-fused-b1-s4096-nock", "l1b-full-mixed-eager-fused-b1-s4096-ck"]
    last = ["l1b-full-mixed-adamw8bit-fused-b1-s4096-nock", "l1b-full-mixed-adafactor-for-loop-b1-s4096-nock",
            "l1b-full-true-adafactor-for-loop-b1-s4096-nock", "m7b-qlora16al-fused-b1-s4096-nock",
            "l3b-full-true-adamw8bit-fused-b1-s4096-nock"]
    out = [copy.deepcopy(cases_mod.by_id(i)) for i in first]
    out.append({"id": "micro-adamw8bit"})
    out += [copy.deepcopy(cases_mod.by_id(i)) for i in then]
    # references: the DDP 1B without DDP, the 8B shape with bf16 LoRA
    out.append(_plain("l1b-full-mixed-fused-b1-s4096-ck-ddp8", "ref-l1b-full-mixed-fused-b1-s4096-ck"))
    out.append(_plain("l8b-qlora16al-fused-b1-s4096-ck", "ref-l8b-lora16al-fused-b1-s2048-nock", method="lora",
                      seq_len=2048, activation_checkpointing="none"))
    out += [copy.deepcopy(cases_mod.by_id(i)) for i in last]
    for c in out:
        c.setdefault("steps", 3)
    return out


def micro_adamw8bit(out_path):
    """bitsandbytes AdamW8bit on synthetic fp32 / bf16 parameters: one big tensor vs many small ones (per-tensor
    cost vs per-parameter cost of its step)."""
    import bitsandbytes as bnb
    import torch

    res = {"id": "micro-adamw8bit", "measured": {}}
    for dtype in (torch.float32, torch.bfloat16):
        for n_tensors, numel in ((1, 256 * 2**20), (8, 32 * 2**20), (256, 2**20), (1024, 2**16)):
            ps = [torch.nn.Parameter(torch.randn(numel, device="cuda", dtype=dtype) * 0.02) for _ in range(n_tensors)]
            opt = bnb.optim.AdamW8bit(ps, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
            times = []
            for i in range(6):
                for p in ps:
                    p.grad = torch.randn_like(p) * 1e-3
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                opt.step()
                torch.cuda.synchronize()
                if i >= 2:
                    times.append(time.perf_counter() - t0)
            res["measured"][f"{str(dtype)[6:]}-{n_tensors}x{numel}"] = statistics.median(times)
            del ps, opt
            torch.cuda.empty_cache()
    Path(out_path).write_text(json.dumps(res))


def run(case, out_path):
    import torch
    import measure as M

    if case["id"] == "micro-adamw8bit":
        return micro_adamw8bit(out_path)

    dev = "cuda"
    req, tr = case["request"], case["request"]["training"]
    method, prec, ckpt = tr["method"], tr["precision"], tr["activation_checkpointing"]
    attn = tr.get("attention", "sdpa")
    res = {"id": case["id"], "measured": {}}
    torch.cuda.init()
    cfg = M.hf_config(case)
    from transformers import AutoModelForCausalLM

    if method == "qlora":
        model = M.build_qlora(cfg, case, dev, attn, res)
        res.pop("qlora", None)
    else:
        base_dtype = torch.bfloat16 if (method == "lora" or prec == "bf16-true") else torch.float32
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=base_dtype, attn_implementation=attn)
            model.config.use_cache = False
            if ckpt == "full":
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if method == "lora":
                from peft import LoraConfig, get_peft_model

                r = tr["lora_rank"]
                model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear",
                                                         lora_dropout=0.0, bias="none"))
        M.materialize(model, dev)
        M.init_weights(model, dev)
    params = [p for p in model.parameters() if p.requires_grad]
    opt, res["optimizer"] = M.make_optimizer(tr, params)
    res["trainable_tensors"] = len(params)
    res["trainable_params"] = int(sum(p.numel() for p in params))
    model.train()
    use_autocast = prec == "bf16-mixed" or method in ("lora", "qlora")
    g = torch.Generator(device="cpu")
    g.manual_seed(0)
    x = torch.randint(0, req["model"]["vocab_size"], (tr["micro_batch_size"], tr["seq_len"]), generator=g).to(dev)

    def fwd():
        if use_autocast:
            with torch.autocast(dev, dtype=torch.bfloat16):
                return model(input_ids=x, labels=x).loss
        return model(input_ids=x, labels=x).loss

    def step():
        loss = fwd()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    m = res["measured"]
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(8):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    m["step_times_s"] = times
    m["step_time_median_s"] = statistics.median(times)
    m["step_time_min_s"] = min(times)

    phases = []
    for _ in range(4):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        torch.cuda.synchronize()
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
        torch.cuda.synchronize()
        c4 = time.perf_counter()
        del loss
        phases.append({"cpu_fwd_s": c1 - c0, "cpu_bwd_s": c2 - c1, "cpu_opt_s": c3 - c2, "wall_s": c4 - c0,
                       "gpu_fwd_s": ev[0].elapsed_time(ev[1]) / 1e3, "gpu_bwd_s": ev[1].elapsed_time(ev[2]) / 1e3,
                       "gpu_opt_s": ev[2].elapsed_time(ev[3]) / 1e3})
    m["phases"] = phases
    m["phases_median"] = {k: statistics.median(p[k] for p in phases) for k in phases[0]}

    # the optimizer step alone (fresh gradients each time)
    opt_times = []
    for _ in range(4):
        loss = fwd()
        loss.backward()
        del loss
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.step()
        torch.cuda.synchronize()
        opt_times.append(time.perf_counter() - t0)
        opt.zero_grad(set_to_none=True)
    m["optimizer_step_s"] = opt_times
    m["optimizer_step_median_s"] = statistics.median(opt_times)

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = {}
    total = 0.0
    count = 0
    for e in prof.events():
        dt = str(getattr(e, "device_type", ""))
        if "CUDA" not in dt:
            continue
        us = float(e.time_range.elapsed_us())
        name = e.name[:120]
        k = kernels.setdefault(name, [0, 0.0])
        k[0] += 1
        k[1] += us
        total += us
        count += 1
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:40]
    m["profile"] = {"kernel_time_total_s": total / 1e6, "kernel_count": count,
                    "top_kernels": [{"name": n, "calls": c, "time_s": t / 1e6} for n, (c, t) in top]}
    m["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
    Path(out_path).write_text(json.dumps(res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--case")
    ap.add_argument("--deadline", type=float, default=500)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = {c["id"]: c for c in all_cases()}
    if args.case:  # child
        run(cases[args.case], str(out / f"{args.case}.json"))
        return
    import torch, transformers, peft

    t_start = time.time()
    prov = {"date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv), "torch": torch.__version__, "transformers": transformers.__version__,
            "peft": peft.__version__, "python": sys.version.split()[0]}
    try:
        import bitsandbytes

        prov["bitsandbytes"] = bitsandbytes.__version__
    except Exception as e:
        prov["bitsandbytes"] = repr(e)
    try:
        prov["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                                             "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except Exception:
        pass
    (out / "provenance.json").write_text(json.dumps(prov, indent=1))
    with open(out / "kinds.jsonl", "a") as fh:
        for cid in (args.only or list(cases)):
            left = args.deadline - (time.time() - t_start)
            if left < 30:
                print("deadline: skipping", cid, flush=True)
                continue
            t0 = time.time()
            try:
                subprocess.run([sys.executable, __file__, "--out", str(out), "--case", cid], timeout=min(150, left),
                               check=True)
                res = json.loads((out / f"{cid}.json").read_text())
                (out / f"{cid}.json").unlink()
            except Exception as e:
                res = {"id": cid, "error": repr(e)[:300]}
            res["wall_s"] = time.time() - t0
            fh.write(json.dumps(res) + "\n")
            fh.flush()
            mm = res.get("measured", {})
            brief = {k: round(v, 4) for k, v in {**mm.get("phases_median", {}), "step": mm.get("step_time_median_s", 0),
                                                 "busy": mm.get("profile", {}).get("kernel_time_total_s", 0),
                                                 "opt": mm.get("optimizer_step_median_s", 0)}.items()}
            print(cid, round(res["wall_s"], 1), res.get("error") or (mm if cid.startswith("micro") else brief),
                  flush=True)


if __name__ == "__main__":
    main()
