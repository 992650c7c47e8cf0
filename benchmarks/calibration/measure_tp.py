"""Measure per-rank training memory of tensor parallelism (DTensor), 2-D FSDP2 x TP and ZeRO-1 on one GPU.

Driver:  python3 benchmarks/calibration/measure_tp.py --out DIR [--deadline 540] [--git-sha SHA]
Dry run: python3 benchmarks/calibration/measure_tp.py --dry-run --out /tmp/dry   (CPU, tiny shapes, same code)

One rank of W runs under PyTorch's fake process group (``torch.testing._internal.distributed.fake_pg``,
backend "fake"): collectives move no data but their output buffers are allocated as on a real rank, so the
rank's ``torch.cuda.max_memory_allocated()`` is what one GPU of W would hold. Each case runs in its own
forked process (a fresh CUDA context and caching allocator); results are appended to DIR/results.jsonl as
each case ends, so a timeout still leaves the finished ones. Helpers (config, init, optimizers, DDP wrapper,
peak readings) are measure.py's, so the method is docs/calibration-method.md's. The TP plans, their 2-D FSDP2 wrap,
the batch and the loss are ``app/check/tensor_parallel.py``'s, which ``capplan check --run`` runs too (one
implementation: the plan --run measures is the plan calibrated here).

Kinds:

* ``tp``: ``parallelize_module`` with a torchtitan-style plan on an HF Llama (torchtitan
  ``models/llama3/infra/parallelize.py`` ``apply_tp``): ColwiseParallel q/k/v/gate/up, RowwiseParallel o/down;
  vocabulary-parallel embedding (RowwiseParallel) and LM head (ColwiseParallel, logits kept sharded on the
  vocabulary: the loss runs under ``loss_parallel()``, as torchtitan's default) -- what capplan's "pytorch"
  framework with tp > 1 assumes (embedding and head divided by tp, logits vocab/tp). With ``sp``, torchtitan's
  sequence-parallel plan: SequenceParallel norms, PrepareModuleInput all-gathers before attention and MLP,
  RowwiseParallel outputs reduce-scattered to Shard(1). The residual stream stays a DTensor (global shapes), so
  HF's rotary and mask code sees the full sequence.
* ``tp+fsdp2``: the same TP plan on the "tp" mesh dimension, then FSDP2 ``fully_shard`` per decoder layer and
  the root on the "dp" dimension (bf16 parameters, fp32 reduce), as torchtitan's 2-D parallelism.
* ``zero1``: DDP (measure.ddp_wrap, real reducer buckets) + ``torch.distributed.optim.ZeroRedundancyOptimizer``
  (AdamW, fused) at W ranks. ZeRO assigns whole tensors to ranks, largest first (``_partition_parameters``), so
  rank 0, measured here, holds the largest tensor's states.
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import hashlib
import json
import multiprocessing as mp
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases as cases_mod  # noqa: E402
import measure as M  # noqa: E402  (sets the environment before torch is imported)
import torch  # noqa: E402
import transformers  # noqa: E402

#: app/check/tensor_parallel.py, one implementation with ``capplan check --run`` (measure.shared_module: beside this
#: file on the GPU machine, else loaded from the repository by its path)
TP = M.shared_module("tensor_parallel")

GPU = cases_mod.GPU
_SHORT = {"llama-3.2-1b": "l1b", "llama-3.2-3b": "l3b", "llama-3.1-8b": "l8b", "llama-3.1-70b": "l70b",
          "qwen2.5-7b": "q7b", "mistral-7b-v0.3": "m7b"}


def make_tp_case(model: str, *, tp: int = 1, sp: bool = False, dp: int = 1, wrap: str = "tp",
                 precision: str = "bf16-mixed", ckpt: str = "none", mbs: int = 1, seq: int = 4096,
                 steps: int = 3, expect: str = "fit", note: str = "", call: int = 5,
                 plan: str = "vocab-parallel") -> dict[str, Any]:
    spec = cases_mod.MODELS[model]
    world = tp * dp
    training = {"method": "full", "precision": precision, "optimizer": "adamw", "optimizer_impl": "fused",
                "micro_batch_size": mbs, "seq_len": seq, "gradient_accumulation_steps": 1,
                "activation_checkpointing": ckpt, "attention": "sdpa"}
    sharding = {"tp": "none", "tp+fsdp2": "fsdp", "zero1": "zero1"}[wrap]
    parallelism: dict[str, Any] = {"sharding": sharding, "framework": "pytorch", "tp": tp,
                                   "sequence_parallel": sp}
    if plan != "vocab-parallel":
        parallelism["tp_plan"] = plan
    hardware = {"gpu": GPU, "num_nodes": max(1, world // 8), "gpus_per_node": min(8, world)}
    prec = {"bf16-mixed": "mixed", "bf16-true": "true"}[precision]
    par = {"tp": f"tp{tp}", "tp+fsdp2": f"fsdp{dp}xtp{tp}", "zero1": f"zero1ddp{world}"}[wrap]
    cid = "-".join([_SHORT[model], "full", prec, "fused", f"b{mbs}", f"s{seq}",
                    "ck" if ckpt == "full" else "nock", par + ("sp" if sp else "")]
                   + (["hfplan"] if plan == "replicated-embeddings" else []))
    return {"id": cid, "request": {"model": copy.deepcopy(spec["arch"]), "training": training,
                                   "parallelism": parallelism, "hardware": hardware},
            "hf_arch": spec["hf_arch"], "hf_extra": copy.deepcopy(spec["hf_extra"]), "model_key": model,
            "steps": steps, "timed_steps": 0, "world_size_fake": world, "tp": tp, "dp": dp, "sp": sp,
            "wrap": wrap, "call": call, "expect": expect, "note": note, "plan": plan}


def _cases() -> list[dict[str, Any]]:
    c = make_tp_case
    out = [
        # Llama 3.1 8B, TP 2/4/8, without and with sequence parallelism (bf16-mixed: fp32 params, autocast).
        c("llama-3.1-8b", tp=2), c("llama-3.1-8b", tp=2, sp=True),
        c("llama-3.1-8b", tp=4), c("llama-3.1-8b", tp=4, sp=True),
        c("llama-3.1-8b", tp=8), c("llama-3.1-8b", tp=8, sp=True),
        # ZeRO-1 (DDP + ZeroRedundancyOptimizer) at W = 8.
        c("llama-3.2-3b", wrap="zero1", dp=8, ckpt="full"),
        c("llama-3.2-1b", wrap="zero1", dp=8, ckpt="full",
          note="rank 0 holds the 263M-parameter tied embedding's states (> 1/8 of 1.24B)"),
        # Checkpointing, bf16-true, longer sequence, tied embeddings (1B, 3B).
        c("llama-3.1-8b", tp=4, sp=True, ckpt="full", seq=8192),
        c("llama-3.1-8b", tp=2, precision="bf16-true", seq=8192),
        c("llama-3.1-8b", tp=2, sp=True, precision="bf16-true", seq=8192),
        c("llama-3.2-3b", tp=2), c("llama-3.2-3b", tp=4, sp=True),
        c("llama-3.2-1b", tp=2, mbs=2), c("llama-3.2-1b", tp=2, sp=True, mbs=2),
        c("llama-3.1-8b", wrap="zero1", dp=8, precision="bf16-true", ckpt="full"),
        # 2-D: FSDP2 over dp x TP.
        c("llama-3.1-8b", wrap="tp+fsdp2", tp=2, dp=8, ckpt="full"),
        c("llama-3.1-8b", wrap="tp+fsdp2", tp=4, dp=8, sp=True),
        c("llama-3.1-70b", wrap="tp+fsdp2", tp=8, dp=8, sp=True, ckpt="full"),
    ]
    # Call 6: held out -- measured after the two TP rules (PyTorch SP saves the gathered projection inputs;
    # the vocab-parallel loss holds 4 B/logit more) were fitted to call 5.
    def h(model: str, **kw: Any) -> dict[str, Any]:
        return c(model, call=6, **kw)

    out += [
        h("llama-3.1-8b", tp=8, sp=True, seq=16384),
        h("llama-3.2-1b", tp=4, sp=True, mbs=4),
        h("llama-3.2-1b", tp=8, mbs=8),
        h("llama-3.2-3b", tp=2, sp=True, seq=8192),
        h("llama-3.1-8b", tp=4, sp=True, precision="bf16-true", seq=8192),
        h("qwen2.5-7b", tp=4, sp=True),
        h("llama-3.1-8b", tp=8, sp=True, ckpt="full", seq=32768),
        h("llama-3.1-8b", tp=4, ckpt="full", mbs=4),
        h("llama-3.2-3b", wrap="zero1", dp=16, ckpt="full", mbs=2),
        h("llama-3.1-8b", wrap="tp+fsdp2", tp=2, dp=8, sp=True),
        h("llama-3.1-70b", wrap="tp+fsdp2", tp=8, dp=8, ckpt="full"),
        h("llama-3.1-70b", wrap="tp+fsdp2", tp=4, dp=16, sp=True, ckpt="full"),
        h("llama-3.1-8b", tp=2, seq=16384, expect="oom", note="deliberate OOM: estimate 155 GiB allocated"),
    ]
    # Calls 7 (checked) and 8 (held out, estimates committed first): Hugging Face transformers' own plan
    # (issue 14, item 2), ``tp_plan="replicated-embeddings"``: see hf_tp_plan.
    def f(model: str, call: int, **kw: Any) -> dict[str, Any]:
        return c(model, call=call, plan="replicated-embeddings", **kw)

    out += [
        f("llama-3.1-8b", 7, tp=2), f("llama-3.1-8b", 7, tp=4), f("llama-3.1-8b", 7, tp=8),
        f("llama-3.1-8b", 7, tp=2, precision="bf16-true", seq=8192),
        f("qwen2.5-7b", 8, tp=4), f("llama-3.1-8b", 8, tp=4, ckpt="full", mbs=4),
        f("llama-3.1-8b", 8, tp=4, precision="bf16-true", seq=8192), f("mistral-7b-v0.3", 8, tp=2),
        f("llama-3.1-8b", 8, tp=8, ckpt="full", seq=32768),
    ]
    ids = [x["id"] for x in out]
    assert len(ids) == len(set(ids)), ids
    return out


CASES = _cases()


def by_id(case_id: str) -> dict[str, Any]:
    return next(x for x in CASES if x["id"] == case_id)


# --------------------------------------------------------------------------------------------- the plan
# One implementation with ``capplan check --run`` (app/check/tensor_parallel.py): the torchtitan-style plan
# (``tp_plan``), Hugging Face's (``hf_tp_plan``), their application, the 2-D FSDP2 wrap, the loss and its backward.
tp_plan = TP.torchtitan_plan
hf_tp_plan = TP.hf_tp_plan
apply_tp = TP.apply_tp


# ------------------------------------------------------------------------------------------------ worker
def run_case(case: dict[str, Any], res: dict[str, Any], dry: bool) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import AutoModelForCausalLM

    dev = "cpu" if dry else "cuda"
    req = case["request"]
    tr = req["training"]
    tp, dp, sp, wrap = case["tp"], case["dp"], case["sp"], case["wrap"]
    world = tp * dp
    prec, mbs, seq, ckpt = tr["precision"], tr["micro_batch_size"], tr["seq_len"], tr["activation_checkpointing"]
    m = res["measured"]
    M._STATE["phase"] = "init"
    if dev == "cuda":
        torch.cuda.init()
        torch.empty(1, device=dev)
        torch.cuda.synchronize()
        props = torch.cuda.get_device_properties(0)
        res["device"] = {"name": props.name, "total_memory_bytes": int(props.total_memory),
                         "capability": f"{props.major}.{props.minor}"}
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    mesh = init_device_mesh(dev, (dp, tp), mesh_dim_names=("dp", "tp")) if wrap != "zero1" else None
    cfg = M.hf_config(case)
    M._STATE["phase"] = "build"
    base_dtype = torch.bfloat16 if prec == "bf16-true" else torch.float32
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=base_dtype, attn_implementation="sdpa")
    model.config.use_cache = False
    if ckpt == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    tied = bool(req["model"].get("tied_embeddings"))
    plan = case.get("plan", "vocab-parallel")
    if tp > 1:
        assert mesh is not None
        TP.apply_tp(model, mesh["tp"], sp, plan)
        res["tp_plan"] = TP.plan_record(plan, sp, cfg, model)
    if wrap == "tp+fsdp2":
        res["fsdp"] = {"dp": dp, **TP.apply_fsdp(model, mesh["dp"], tied)}
    TP.materialize(model, dev, tied, fsdp=wrap == "tp+fsdp2")
    M.init_weights(model, dev)
    m["tied_check"] = bool(model.lm_head.weight is model.model.embed_tokens.weight)
    if wrap == "zero1":
        res["ddp"] = {}
        model = M.ddp_wrap(model, dev, False, res["ddp"])
    M._sync(dev)

    local = TP.local
    m["local_param_numel"] = int(sum(local(p).numel() for p in model.parameters()))
    m["local_param_bytes"] = int(sum(local(p).numel() * local(p).element_size() for p in model.parameters()))
    m["param_dtypes"] = sorted({str(p.dtype) for p in model.parameters()})
    if dev == "cuda":
        m["after_build_bytes"] = int(torch.cuda.memory_allocated())

    M._STATE["phase"] = "optimizer_init"
    params = [p for p in model.parameters() if p.requires_grad]
    if wrap == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=1e-5, betas=(0.9, 0.999),
                                      eps=1e-8, weight_decay=0.01, fused=True)
        mine = [p for g in opt.optim.param_groups for p in g["params"]]
        res["optimizer"] = {"class": "torch.distributed.optim.ZeroRedundancyOptimizer(AdamW, fused=True)",
                            "rank0_param_numel": int(sum(p.numel() for p in mine)),
                            "rank0_largest_numel": int(max((p.numel() for p in mine), default=0)),
                            "all_param_numel": int(sum(p.numel() for p in params))}
    else:
        groups, described = TP.optimizer_groups(params)
        opt, res["optimizer"] = M.make_optimizer(tr, groups)
        res["optimizer"]["param_groups"] = described
    model.train()
    use_autocast = wrap != "tp+fsdp2" and prec == "bf16-mixed"
    res["autocast_bf16"] = use_autocast
    x, labels, pos = TP.batch(req["model"]["vocab_size"], mbs, seq, dev)
    M._sync(dev)
    m["after_optimizer_init_bytes"] = M._peak(dev)["now"]
    vocab_parallel = TP.uses_loss_parallel(tp, plan)

    def fwd() -> torch.Tensor:
        return TP.forward_loss(model, x, labels, pos, vocab_parallel=vocab_parallel, device=dev,
                               autocast=use_autocast)

    peaks = m["phase_peaks"] = []
    peak_alloc = peak_res = 0
    times = m["memory_step_times_s"] = []
    for step in range(1, case["steps"] + 1):
        M._STATE["step"] = step
        rec: dict[str, Any] = {"step": step}
        peaks.append(rec)
        M._sync(dev)
        t0 = time.perf_counter()
        for phase in ("forward", "backward", "optimizer"):
            M._STATE["phase"] = phase
            M._reset(dev)
            if phase == "forward":
                loss = fwd()
            elif phase == "backward":
                TP.backward(loss, vocab_parallel=vocab_parallel)
            else:
                opt.step()
                opt.zero_grad(set_to_none=True)
            M._sync(dev)
            pk = M._peak(dev)
            rec[phase] = pk["alloc"]
            rec[phase + "_reserved"] = pk["reserved"]
            rec[phase + "_end"] = pk["now"]
            peak_alloc, peak_res = max(peak_alloc, pk["alloc"]), max(peak_res, pk["reserved"])
            m["peak_allocated_bytes"], m["peak_reserved_bytes"] = peak_alloc, peak_res
        rec["loss"] = float(local(loss.detach()).float().item())
        del loss
        times.append(time.perf_counter() - t0)
    m["oom"] = False


def worker(case: dict[str, Any], out_path: str, dry: bool) -> None:
    # measure.worker's error handling around this module's run_case
    M.run_case = run_case
    M.worker(case, out_path, dry)


def dry_shrink(case: dict[str, Any]) -> dict[str, Any]:
    c = M.dry_shrink(case)
    a = c["request"]["model"]
    a.update(num_attention_heads=8, num_kv_heads=8 if case["tp"] >= 8 else 4, hidden_size=128)
    c["steps"] = 2
    return c


def provenance(args: argparse.Namespace) -> dict[str, Any]:
    p: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__, "platform": platform.platform(), "dry_run": args.dry_run,
        "git_sha": args.git_sha, "process_group": "fake (torch.testing._internal.distributed.fake_pg.FakeStore)",
        "script_sha256": {**{n: hashlib.sha256((HERE / n).read_bytes()).hexdigest()[:16]
                             for n in ("measure_tp.py", "measure.py", "cases.py")},
                          "tensor_parallel.py": hashlib.sha256(Path(TP.__file__).read_bytes()).hexdigest()[:16]},
    }
    if not args.dry_run:
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            p["nvidia_smi"] = q.stdout.strip()
        except Exception as e:  # provenance only
            p["nvidia_smi"] = f"failed: {e}"
    return p


def estimate_seconds(case: dict[str, Any]) -> float:
    a = case["request"]["model"]
    total, _ = M.approx_params(a)
    t = case["request"]["training"]
    flops = 6 * total * t["micro_batch_size"] * t["seq_len"] / case["tp"]
    step = flops / 3.0e14 + 0.3 + total * 16 / 3.0e12 / case["tp"]
    return 8.0 + total * 4 / 20e9 / case["tp"] + (case["steps"] + 1) * step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ids", nargs="*")
    ap.add_argument("--call", type=int, action="append", help="only the cases of this device call (repeatable)")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--deadline", type=float, default=540.0)
    ap.add_argument("--git-sha", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sel = [by_id(i) for i in args.ids] if args.ids else CASES
    if args.call and not args.ids:
        sel = [c for c in sel if c["call"] in args.call]
    prov = provenance(args)
    prov["selected"] = [c["id"] for c in sel]
    (out / "provenance.json").write_text(json.dumps(prov, indent=1))
    print("provenance:", json.dumps({k: prov.get(k) for k in ("date_utc", "torch", "transformers",
                                                              "nvidia_smi")}), flush=True)
    ctx = mp.get_context("fork")
    res_path = out / "results.jsonl"
    for case in sel:
        run = dry_shrink(case) if args.dry_run else case
        est = 5.0 if args.dry_run else estimate_seconds(case)
        elapsed = time.perf_counter() - t0
        if elapsed + est > args.deadline:
            r: dict[str, Any] = {"id": case["id"], "status": "skipped", "reason": f"deadline {elapsed:.0f}+{est:.0f}s",
                                 "measured": {}}
        else:
            tmp = out / f".{case['id']}.tmp.json"
            proc = ctx.Process(target=worker, args=(run, str(tmp), args.dry_run))
            proc.start()
            proc.join(max(60.0, min(args.deadline - elapsed, 4 * est + 60)))
            if proc.is_alive():
                proc.kill()
                proc.join(10)
            if tmp.exists():
                r = json.loads(tmp.read_text())
                tmp.unlink()
            else:
                r = {"id": case["id"], "status": "crashed_or_timeout", "exitcode": proc.exitcode, "measured": {}}
        r.update(request=case["request"],
                 case={k: case[k] for k in ("tp", "dp", "sp", "wrap", "steps", "note", "call", "plan")},
                 est_s=round(est, 1), dry_run=args.dry_run)
        with res_path.open("a") as f:
            f.write(json.dumps(r) + "\n")
        print(M.summary_line(r), flush=True)
        if r.get("status") == "error":
            print("   ", r.get("traceback", "")[-1500:], flush=True)
    print(f"done in {time.perf_counter() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
