"""Memory that ``torch.cuda.max_memory_allocated()`` does not see but ``nvidia-smi`` does.

- CUDA context with lazy module loading (``CUDA_MODULE_LOADING=LAZY``, default since CUDA 11.7 / PyTorch 2):
  measured as NVML used minus PyTorch reserved right after initialisation (tests/data/calibration_h200.json).
- Caching-allocator reserve and fragmentation: reserved minus allocated at the peak, measured on the same runs
  (PyTorch "CUDA memory management" notes: blocks are cached and split, not returned to the driver).
- NCCL communicator buffers: ``NCCL_BUFFSIZE`` (4 MiB default) per channel and peer for the ring/tree
  protocols, plus proxy and P2P buffers (NCCL environment-variable docs); 0 on a single GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ALLOCATOR_RESERVE_FRACTION",
    "CUDA_CONTEXT_BYTES",
    "NCCL_INTER_NODE_BYTES",
    "NCCL_INTRA_NODE_BYTES",
    "OverheadInput",
    "overhead_bytes",
]

MIB = 1 << 20
CUDA_CONTEXT_BYTES = 520 * MIB
ALLOCATOR_RESERVE_FRACTION = 0.04
ALLOCATOR_RESERVE_MIN_BYTES = 256 * MIB
NCCL_INTRA_NODE_BYTES = 640 * MIB
NCCL_INTER_NODE_BYTES = 256 * MIB
SHARDED_EXTRA_FRACTION = 0.03  # FSDP's per-layer buffers are freed and re-made: more fragmentation


@dataclass(frozen=True)
class OverheadInput:
    peak_allocated: int
    world_size: int
    num_nodes: int
    gpu_memory_bytes: int
    sharded: bool


def overhead_bytes(inp: OverheadInput) -> int:
    fraction = ALLOCATOR_RESERVE_FRACTION + (SHARDED_EXTRA_FRACTION if inp.sharded else 0.0)
    reserve = max(ALLOCATOR_RESERVE_MIN_BYTES, int(inp.peak_allocated * fraction))
    nccl = 0
    if inp.world_size > 1:
        nccl = NCCL_INTRA_NODE_BYTES + (NCCL_INTER_NODE_BYTES if inp.num_nodes > 1 else 0)
    return CUDA_CONTEXT_BYTES + reserve + nccl
