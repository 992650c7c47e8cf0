"""Issue 29's plain-PyTorch mechanisms under FSDP2 on 8 ranks, traced on the CPU (no GPU measured them).

Run: ``PYTHONPATH=. python benchmarks/check/trace_fsdp_mechanisms.py`` (a few minutes on two cores) writes
``tests/data/cpu_trace_fsdp_mechanisms.json``, read by ``tests/test_fsdp_mechanisms_trace.py``.

Each case is traced by ``capplan check --trace`` (:func:`app.check.trace.trace`: the model built from its config on
the meta device, FSDP2 ``fully_shard`` on every decoder layer and the root over a fake process group,
``FakeTensorMode``, every live storage counted in a ``TorchDispatchMode``, rank 0's peak), which applies the
request's two mechanisms with the functions ``benchmarks/calibration/measure_stacks.py`` runs on the GPU
(:mod:`app.check.stacks`):

- the torchtune loss (``loss_kernel: "chunked"``; ``CEWithChunkedOutputLoss``'s algorithm in plain torch,
  ``stacks.chunked_output_loss``): the LM head on 8 sequence chunks (the bf16 logits of every chunk kept), each chunk
  upcast to fp32 inside the loss. ``stacks.install_loss`` replaces the causal-LM module's ``forward`` on the
  instance, so FSDP2's root hooks (the tied embedding / LM head all-gather) still run around it;
- Muon (``optimizer: "muon"``; ``torch.optim.Muon`` on the 2-D decoder matrices, ``torch.optim.AdamW`` on the
  embedding / LM head and the norms, ``stacks.make_optimizer("muon")``). Under FSDP2 its parameters are DTensors
  sharded on dim 0; Newton-Schulz's products on them make DTensor redistribute operands (the trace counts what it
  allocates; its dispatch mode runs above DTensor, so it sees the operators with the global shapes:
  ``benchmarks/check/muon_dtensor.py`` records the GEMMs each rank runs below them).

First three single-GPU cases the H100 measured (``tests/data/stacks_h100_raw``: Llama 3.2 1B full with the torchtune
loss and with Muon, Qwen2.5 1.5B LoRA with the torchtune loss, all their layers) are traced on one rank, to show the
trace reproduces the GPU for these mechanisms; then the same requests (and a few more) on 8 ranks.
Each case's estimate (``estimator.estimate`` on the request, ``hardware.gpus_per_node`` 8 and
``parallelism.sharding`` ``"fsdp"`` for the FSDP2 cases) is stored beside it.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "cpu_trace_fsdp_mechanisms.json"
RAW = ROOT / "tests" / "data" / "stacks_h100_raw"

LLAMA32_1B = {"name": "Llama 3.2 1B", "source": "meta-llama/Llama-3.2-1B config.json", "num_layers": 16,
              "hidden_size": 2048, "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 8192,
              "vocab_size": 128256, "tied_embeddings": True}
QWEN25_1B5 = {"name": "Qwen2.5 1.5B", "source": "Qwen/Qwen2.5-1.5B config.json", "num_layers": 28, "hidden_size": 1536,
              "num_attention_heads": 12, "num_kv_heads": 2, "ffn_hidden_size": 8960, "vocab_size": 151936,
              "tied_embeddings": True, "qkv_bias": True}
MODELS = {"l1b": LLAMA32_1B, "q1b5": QWEN25_1B5}

#: (id, H100 case it reproduces or None, model, method, loss, optimizer, seq_len, ranks)
CASES: list[tuple[str, str | None, str, str, str, str, int, int]] = [
    ("l1b-full-mixed-s4096-ck-losstorchtune-w1", "h100-l1b-full-mixed-fused-b1-s4096-ck-losstorchtune",
     "l1b", "full", "torchtune", "adamw", 4096, 1),
    ("l1b-full-mixed-s2048-ck-muon-w1", "h100-l1b-full-mixed-fused-b1-s2048-ck-muon",
     "l1b", "full", "hf", "muon", 2048, 1),
    ("q1b5-lora16al-s8192-ck-losstorchtune-w1", "h100-q1b5-lora16al-fused-b1-s8192-ck-losstorchtune",
     "q1b5", "lora", "torchtune", "adamw", 8192, 1),
    ("l1b-full-mixed-s4096-ck-losstorchtune-fsdp8", None, "l1b", "full", "torchtune", "adamw", 4096, 8),
    ("l1b-full-mixed-s4096-ck-materialized-fsdp8", None, "l1b", "full", "hf", "adamw", 4096, 8),
    ("l1b-full-mixed-s2048-ck-muon-fsdp8", None, "l1b", "full", "hf", "muon", 2048, 8),
    ("l1b-full-mixed-s8192-ck-losstorchtune-muon-fsdp8", None, "l1b", "full", "torchtune", "muon", 8192, 8),
    ("q1b5-lora16al-s8192-ck-losstorchtune-fsdp8", None, "q1b5", "lora", "torchtune", "adamw", 8192, 8),
    ("q1b5-full-mixed-s4096-ck-losstorchtune-fsdp8", None, "q1b5", "full", "torchtune", "adamw", 4096, 8),
]


def request_body(model: str, method: str, loss: str, optimizer: str, seq: int, ranks: int) -> dict[str, Any]:
    tr: dict[str, Any] = {"method": method, "precision": "bf16-mixed", "optimizer": optimizer,
                          "optimizer_impl": "for-loop" if optimizer == "muon" else "fused", "micro_batch_size": 1,
                          "seq_len": seq, "gradient_accumulation_steps": 1, "activation_checkpointing": "full",
                          "attention": "sdpa", "loss_kernel": "chunked" if loss == "torchtune" else "materialized"}
    if method == "lora":
        tr |= {"lora_rank": 16, "lora_targets": "all-linear"}
    return {"model": dict(MODELS[model]), "training": tr,
            "parallelism": {"sharding": "fsdp" if ranks > 1 else "none", "framework": "pytorch"},
            "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": ranks}}


def h100_peak(case_id: str) -> int | None:
    for path in sorted(RAW.glob("call*_results.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r.get("id") == case_id and r.get("status") == "ok":
                return int(r["measured"]["peak_allocated_bytes"])
    return None


def stage_counter(T: Any, seen: dict[str, int], gemms: dict[str, int]) -> type:
    """``capplan check --trace``'s counter, also keeping the highest live bytes of each stage (forward, backward,
    optimizer): the optimizer step's own peak is where Muon's gathered matrices would show; and the shapes of the
    optimizer step's matrix products (``aten.mm`` / ``aten.addmm``, "rows x inner x cols", as DTensor-level operators:
    the global shapes; what each rank runs locally is ``mechanisms.muon_newton_schulz_local_flops``)."""

    class StageCounter(T.LiveCounter):  # type: ignore[misc,name-defined]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if self.stage == "optimizer" and func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
                a, b = (args[0], args[1]) if func == torch.ops.aten.mm.default else (args[1], args[2])
                key = f"{a.shape[0]}x{a.shape[1]}x{b.shape[1]}"
                gemms[key] = gemms.get(key, 0) + 1
            return out

        def _mark(self) -> None:
            if self.current > seen.get(self.stage, 0):
                seen[self.stage] = self.current

        def add(self, t: Any, phase: str | None = None) -> None:
            super().add(t, phase)
            self._mark()

        def resized(self, st: Any) -> None:
            super().resized(st)
            self._mark()

    return StageCounter


def run_case(model: str, method: str, loss: str, optimizer: str, seq: int, ranks: int) -> dict[str, Any]:
    import app.check.trace as T
    from estimator import EstimateRequest, estimate

    body = request_body(model, method, loss, optimizer, seq, ranks)
    req = EstimateRequest.model_validate(body)
    est = estimate(req)
    counter = T.LiveCounter
    stages: dict[str, int] = {}
    gemms: dict[str, int] = {}
    T.LiveCounter = stage_counter(T, stages, gemms)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = T.trace(req, est)
    finally:
        T.LiveCounter = counter
    mem = est.memory
    return {"request": body, "traced_peak_bytes": res.peak_allocated_bytes, "traced_peak_phase": res.peak_phase,
            "traced_parts_bytes": res.parts_bytes,
            "traced_stage_peak_bytes": {k: v for k, v in stages.items() if k != "setup"},
            "traced_optimizer_gemms": dict(sorted(gemms.items())),
            "trace_seconds": round(res.seconds, 1), "notes": res.notes, "mechanisms": res.mechanisms,
            "estimated_peak_bytes": int(mem.peak_allocated_bytes - mem.managed_bytes),
            "estimated_memory_error_bar_pct": mem.error_bar_pct}


def main() -> None:
    import peft
    import transformers

    from estimator.response import ESTIMATOR_VERSION

    only = set(sys.argv[1:])
    out: dict[str, Any] = json.loads(OUT.read_text()) if OUT.exists() and only else {}
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    paras = (__doc__ or "").split("\n\n")
    out.update({"what": " ".join(" ".join(paras[i].split()) for i in (0, 2, 3, 4)),
                "made_by": "benchmarks/check/trace_fsdp_mechanisms.py", "git_sha": sha,
                "estimator_version": ESTIMATOR_VERSION,
                "when_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                "host": f"{platform.machine()} CPU, {platform.system()}, shared 2 cores",
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "peft": peft.__version__, "python": platform.python_version()}})
    cases = out.setdefault("cases", {})
    for cid, h100, model, method, loss, optimizer, seq, ranks in CASES:
        if only and cid not in only:
            continue
        print(cid, file=sys.stderr, flush=True)
        row = {"model": model, "method": method, "loss": loss, "optimizer": optimizer, "seq_len": seq, "ranks": ranks,
               **run_case(model, method, loss, optimizer, seq, ranks)}
        if h100:
            row["h100_case"] = h100
            row["h100_peak_allocated_bytes"] = h100_peak(h100)
        print(json.dumps({k: v for k, v in row.items() if k not in ("request",)}), file=sys.stderr, flush=True)
        cases[cid] = row
        OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(OUT)


if __name__ == "__main__":
    main()
