"""The step-time constants of bitsandbytes' 8-bit AdamW and of Muon under FSDP2, derived from the H100 kernel
micro-benchmarks (``measure_optimizer_kernels.py``; raw rows and provenance in ``tests/data/optimizer_kernels_h100``).

* ``adam8bit_elem_s``: CUDA time of the block-wise update kernel (``kOptimizerStatic8bit2StateBlockwise``) per
  element, the median over the device-bound parameter sets (real Llama 3.2 1B shapes in fp32 and bf16, 100 x 8.4M,
  4 x 268M elements; AdamW8bit and PagedAdamW8bit run the same kernel).
* ``adam8bit_tensor_s``: what each parameter tensor adds beyond its kernel (the Python loop, its launch and the
  ``torch.cuda.synchronize()`` after it), (step - kernels) / tensors, AdamW8bit on the real shapes (fp32, bf16);
  ``paged_tensor_s``: what PagedAdamW8bit adds per tensor on the same sets (its ``prefetch_state``: a
  ``cudaMemPrefetchAsync`` per state before each update).
* ``dtensor_op_s``: host time of one DTensor-level operator of ``torch.optim.Muon``'s step on FSDP2 shards (fake
  process group, W = 4 and 8): the step of one decoder layer's seven matrices is host-bound (its kernels take a
  fraction of it), step / operators, median over 3 models x 2 world sizes.

* ``bnb32_fp32_bytes`` / ``bnb32_bf16_bytes``, ``bnb32_tensor_s``: PagedAdamW32bit's kernel (``kOptimizer32bit2State``,
  bound by HBM: 65 % of the H100's peak) as copy-equivalent bytes per element at the estimator's H100 HBM rate
  (catalog 3,350 GB/s x ``hbm_eff``), and what each tensor adds, from the third session (the first to run it).

* ``muon_eager_op_s`` (reported, not an estimator constant: ``timing.muon_parts`` says why): the same Muon step on
  plain tensors (one GPU) where the host binds, a Llama 3.1 8B layer's LoRA r16 adapters: step / operators (fourth
  session, the first to run them).

The first session (``kernels.jsonl``) sets the 8-bit and DTensor constants; the others (``kernels_session2-4``, other
machines) are held out for them: :func:`spread` reports them.
``python -m benchmarks.calibration.optimizer_kernels`` prints them; ``tests/test_optimizer_kernels.py`` keeps the
constants in ``estimator.training.efficiency`` equal to them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "tests" / "data" / "optimizer_kernels_h100"
DATA = DIR / "kernels.jsonl"
SESSIONS = (DATA, DIR / "kernels_session2.jsonl", DIR / "kernels_session3.jsonl", DIR / "kernels_session4.jsonl")
BNB_KERNEL = "kOptimizerStatic8bit2StateBlockwise"
BNB32_KERNEL = "kOptimizer32bit2State"
H100_HBM_BYTES_S = 3350e9  # hardware_catalog h100-sxm5-80gb hbm_bandwidth_gbps
BNB_OPTIMIZERS = ("adamw-8bit", "paged-adamw-8bit")


def rows(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def bnb_kernel_s(r: dict[str, Any]) -> float:
    """CUDA seconds of the block-wise update kernel in one step (the profiler's per-kernel totals)."""
    return sum(s for name, s in r["top_kernels_s"].items() if BNB_KERNEL in name)


def _bnb(data: list[dict[str, Any]], device_bound: bool) -> list[dict[str, Any]]:
    sets = ("llama-3.2-1b", "mid-100", "large-4") if device_bound else ("llama-3.2-1b",)
    return [r for r in data if r["part"] == "bnb" and r["optimizer"] in BNB_OPTIMIZERS and r["set"] in sets]


def adam8bit_elem_s(data: list[dict[str, Any]]) -> float:
    return statistics.median(bnb_kernel_s(r) / r["numel"] for r in _bnb(data, True))


def _rest_per_tensor(r: dict[str, Any], kernel_s: Any = None) -> float:
    """What each tensor adds beyond the optimizer's update kernel (``kernel_s(r)``; the 8-bit one by default)."""
    return (r["step_s"] - (kernel_s or bnb_kernel_s)(r)) / r["tensors"]


def adam8bit_tensor_s(data: list[dict[str, Any]]) -> float:
    return statistics.median(_rest_per_tensor(r) for r in _bnb(data, False) if r["optimizer"] == "adamw-8bit")


def paged_tensor_s(data: list[dict[str, Any]]) -> float:
    plain = {r["dtype"]: _rest_per_tensor(r) for r in _bnb(data, False) if r["optimizer"] == "adamw-8bit"}
    return statistics.median(_rest_per_tensor(r) - plain[r["dtype"]] for r in _bnb(data, False)
                             if r["optimizer"] == "paged-adamw-8bit")


def dtensor_ops(r: dict[str, Any]) -> int:
    """DTensor-level operators of a row, without the profiler's own record-function markers."""
    return sum(n for op, n in r["dtensor_op_counts"].items() if not op.startswith("profiler."))


def dtensor_op_s(data: list[dict[str, Any]]) -> float:
    steps = [r for r in data if r["part"] == "muon-step" and r["world"] > 1 and "lora" not in r["model"]]
    return statistics.median(r["step_s"] / dtensor_ops(r) for r in steps)


def muon_eager_op_s(data: list[dict[str, Any]]) -> float:
    steps = [r for r in data if r["part"] == "muon-step" and r["world"] == 1 and "lora" in r["model"]]
    return statistics.median(r["step_s"] / dtensor_ops(r) for r in steps)


def _paged32(data: list[dict[str, Any]], dtype: str, real: bool) -> list[dict[str, Any]]:
    sets = ("llama-3.2-1b", "qwen2.5-1.5b") if real else ("llama-3.2-1b", "qwen2.5-1.5b", "mid-100", "large-4")
    return [r for r in data if r["part"] == "bnb" and r["optimizer"] == "paged-adamw-32bit" and r["dtype"] == dtype
            and r["set"] in sets]


def bnb32_kernel_s(r: dict[str, Any]) -> float:
    return sum(s for name, s in r["top_kernels_s"].items() if BNB32_KERNEL in name)


def bnb32_bytes(data: list[dict[str, Any]], dtype: str) -> float:
    from estimator.training.efficiency import H200_FIT

    per_el = statistics.median(bnb32_kernel_s(r) / r["numel"] for r in _paged32(data, dtype, real=False))
    return per_el * H100_HBM_BYTES_S * H200_FIT.hbm_eff


def bnb32_tensor_s(data: list[dict[str, Any]]) -> float:
    return statistics.median(_rest_per_tensor(r, bnb32_kernel_s) for dtype in ("float32", "bfloat16")
                             for r in _paged32(data, dtype, real=True))


def spread() -> list[dict[str, float]]:
    """Each session's figures (the first fits, the others are held out)."""
    out = []
    for path in SESSIONS:
        d = rows(path)
        fig: dict[str, float] = {"dtensor_op_us": dtensor_op_s(d) * 1e6}
        if _bnb(d, True):
            fig |= {"adam8bit_elem_ps": adam8bit_elem_s(d) * 1e12, "adam8bit_tensor_us": adam8bit_tensor_s(d) * 1e6,
                    "paged_tensor_us": paged_tensor_s(d) * 1e6}
        if any(r["part"] == "muon-step" and "lora" in r["model"] for r in d):
            fig["muon_eager_op_us"] = muon_eager_op_s(d) * 1e6
        if _paged32(d, "float32", real=True):
            fig |= {"bnb32_fp32_bytes": bnb32_bytes(d, "float32"), "bnb32_tensor_us": bnb32_tensor_s(d) * 1e6}
        out.append(fig)
    return out


def main() -> None:
    for path, fig in zip(SESSIONS, spread(), strict=True):
        print(path.name, {k: round(v, 1) for k, v in fig.items()})
    data = rows()
    print(f"adam8bit_elem_s   {adam8bit_elem_s(data) * 1e12:.1f} ps per element")
    print(f"adam8bit_tensor_s {adam8bit_tensor_s(data) * 1e6:.0f} us per tensor")
    print(f"paged_tensor_s    {paged_tensor_s(data) * 1e6:.0f} us per tensor more")
    print(f"dtensor_op_s      {dtensor_op_s(data) * 1e6:.0f} us per DTensor operator")
    for r in data:
        if r["part"] == "bnb" and r["optimizer"] in BNB_OPTIMIZERS:
            k = bnb_kernel_s(r)
            print(f"  bnb {r['set']:13s} {r['dtype']:8s} {r['optimizer']:16s} step {r['step_s'] * 1e3:6.1f} ms"
                  f" kernel {k * 1e3:6.1f} ms = {k / r['numel'] * 1e12:5.1f} ps/el,"
                  f" rest {(r['step_s'] - k) / r['tensors'] * 1e6:5.0f} us/tensor")
        if r["part"] == "muon-step":
            print(f"  muon W={r['world']} {r['model']:13s} step {r['step_s'] * 1e3:6.1f} ms"
                  f" ops {dtensor_ops(r)} = {r['step_s'] / dtensor_ops(r) * 1e6:5.0f} us/op")


if __name__ == "__main__":
    main()
