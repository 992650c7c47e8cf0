"""The buffers Inductor allocates in torchao's low-bit AdamW step, read from its generated wrapper (issue 29).

torchao's ``_AdamBase.step`` (``torchao/optim/adam.py``, v0.18.0) runs
``torch.compile(single_param_adam, fullgraph=True, dynamic=False)`` once per parameter. This compiles that
function for one fp32 parameter with ``OptimState4bit`` / ``OptimState8bit`` states on the CPU and lists every
buffer of the wrapper's ``call`` (``empty_strided_cpu``) with its bytes per parameter element: the mechanism
:func:`estimator.training.mechanisms.torchao_adamw_step_bytes` sizes (two fp32 states, two fp32 scale vectors and,
for 4-bit, two int64 code tensors; for 4-bit the CPU backend also unpacks the old codes into two uint8 buffers of
half a byte per element, freed before the main kernel, and an ``aten.cat`` of them, which the GPU's measured
peak does not show). Allocated in total, not all live at once: the 24.0625 / 8.03125 bytes per element of the
mechanism are the fp32 states, the int64 codes and the scales, live together in the main fused kernel.
Needs torch and torchao (e.g. the wheel the device calls carry)::

    PYTHONPATH=/tmp/site .venv/bin/python benchmarks/calibration/torchao_step_buffers.py
"""

from __future__ import annotations

import math
import re

_DTYPE_BYTES = {"torch.float32": 4, "torch.int64": 8, "torch.uint8": 1, "torch.int32": 4, "torch.bfloat16": 2}


def buffers(bits: int, rows: int = 4096, cols: int = 64) -> list[tuple[str, int, str]]:
    """(name, elements, dtype) of every buffer the compiled step of one ``rows x cols`` parameter allocates."""
    import torch
    from torch._inductor.utils import run_and_get_code
    from torchao.optim.adam import single_param_adam
    from torchao.optim.subclass_4bit import OptimState4bit
    from torchao.optim.subclass_8bit import OptimState8bit

    state, block = (OptimState4bit, 128) if bits == 4 else (OptimState8bit, 256)
    p, g = torch.randn(rows, cols), torch.randn(rows, cols)
    m = state.zeros(p.shape, True, block, p.device, dtype=p.dtype)
    v = state.zeros(p.shape, False, block, p.device, dtype=p.dtype)
    step = torch.compile(single_param_adam, fullgraph=True, dynamic=False)
    _, code = run_and_get_code(step, p, g, torch.tensor(1.0), m, v, None, torch.tensor(1e-3), 0.9, 0.999, 0.01,
                               1e-8, True, False)
    found = re.findall(r"(buf\d+) = empty_strided_cpu\(\(([\d, ]+)\), \([\d, ]*\), (torch\.\w+)\)", "\n".join(code))
    return [(name, math.prod(int(x) for x in shape.split(",") if x.strip()), dtype) for name, shape, dtype in found]


def main() -> None:
    for bits in (4, 8):
        n = 4096 * 64
        rows = buffers(bits)
        total = sum(elems * _DTYPE_BYTES[dtype] for _, elems, dtype in rows)
        print(f"AdamW{bits}bit: {len(rows)} buffers allocated, {total / n:.4f} bytes per parameter element in all")
        for name, elems, dtype in rows:
            print(f"  {name:6s} {dtype:14s} {elems / n:8.5f} x numel")


if __name__ == "__main__":
    main()
