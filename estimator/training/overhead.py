"""Memory that ``torch.cuda.max_memory_allocated()`` does not see but ``nvidia-smi`` does.

Fitted on the H200 measurements in ``tests/data/calibration_h200.json`` (``docs/accuracy.md`` shows the fit):

- Non-PyTorch memory (CUDA context with lazy module loading, cuBLAS/cuDNN handles): NVML used minus PyTorch
  reserved was 0.75 GiB on every single-process run (0.82 GiB with the fake process group).
- Caching-allocator reserve (reserved minus allocated at the peak; PyTorch "CUDA memory management" notes:
  freed blocks stay cached and split): least-squares fit over the measured runs,
  ``0.054 x peak + 0.77 x fp32 logits (with checkpointing: the recomputation interleaves with them)
  + 0.32 x the foreach optimizer's intermediates + 0.57 x FSDP's per-layer and root buffers``.
  That reserve is soft: under pressure the allocator frees cached blocks and retries (l1b at 65,536 tokens
  ran with 11 GiB reserved-but-free where 32,768 tokens showed 17 GiB). What cannot be given back is the
  fragmentation around the blocks still in use: ``0.054 x peak``, plus, without checkpointing, room for the
  largest block (the fp32 logits gradient) among the many activation blocks of other sizes (the
  l1b-full-mixed-fused-b8-s4096-nock run failed to allocate its 15.7 GiB logits gradient with 14.5 GiB cached
  but fragmented: ``0.65 x`` that block). ``fits`` uses this hard part; ``total_bytes`` the soft one, capped
  at the capacity when it fits.
- NCCL communicator buffers: ``NCCL_BUFFSIZE`` (4 MiB default) per channel and peer for the ring/tree
  protocols, plus proxy and P2P buffers (NCCL environment-variable docs); 0 on a single GPU. Not measured here
  (the fake process group allocates none): a documented assumption.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NON_TORCH_BYTES", "OverheadInput", "allocator_reserve_bytes", "fixed_bytes", "hard_overhead_bytes",
           "overhead_bytes", "reserved_minus_allocated_bytes"]

MIB: Final = 1 << 20
NON_TORCH_BYTES: Final = 768 * MIB
RESERVE_MIN_BYTES: Final = 256 * MIB
RESERVE_PEAK_FRACTION: Final = 0.054
RESERVE_CKPT_LOGITS: Final = 0.77
RESERVE_FOREACH: Final = 0.32
RESERVE_FSDP: Final = 0.57
HARD_LARGEST_BLOCK_FRACTION: Final = 0.65
NCCL_INTRA_NODE_BYTES: Final = 640 * MIB
NCCL_INTER_NODE_BYTES: Final = 256 * MIB


class OverheadInput:
    peak_allocated: Final[int]
    world_size: Final[int]
    num_nodes: Final[int]
    logits_fp32_bytes: Final[int]
    checkpointing: Final[bool]
    foreach_temp_bytes: Final[int]
    fsdp_buffer_bytes: Final[int]
    largest_block_bytes: Final[int]
    expandable_segments: Final[bool]  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

    def __init__(self, peak_allocated: int, world_size: int, num_nodes: int, logits_fp32_bytes: int,
                 checkpointing: bool, foreach_temp_bytes: int, fsdp_buffer_bytes: int,
                 largest_block_bytes: int, expandable_segments: bool = False) -> None:
        self.peak_allocated = peak_allocated
        self.world_size = world_size
        self.num_nodes = num_nodes
        self.logits_fp32_bytes = logits_fp32_bytes
        self.checkpointing = checkpointing
        self.foreach_temp_bytes = foreach_temp_bytes
        self.fsdp_buffer_bytes = fsdp_buffer_bytes
        self.largest_block_bytes = largest_block_bytes
        self.expandable_segments = expandable_segments


def _slivers_bytes(inp: OverheadInput) -> int:
    """With expandable segments (:mod:`estimator.training.allocator`): the large transients' freed ranges coalesce in
    the one growing segment (and are unmapped and mapped again where a request needs them), so only the slivers
    around the blocks in use stay: the default allocator's proportional term, kept as an upper bound until measured."""
    return max(RESERVE_MIN_BYTES, int(RESERVE_PEAK_FRACTION * inp.peak_allocated))


def allocator_reserve_bytes(inp: OverheadInput) -> int:
    if inp.expandable_segments:
        return _slivers_bytes(inp)
    fitted = (RESERVE_PEAK_FRACTION * inp.peak_allocated
              + (RESERVE_CKPT_LOGITS * inp.logits_fp32_bytes if inp.checkpointing else 0.0)
              + RESERVE_FOREACH * inp.foreach_temp_bytes + RESERVE_FSDP * inp.fsdp_buffer_bytes)
    return max(RESERVE_MIN_BYTES, int(fitted))


def _hard_reserve_bytes(inp: OverheadInput) -> int:
    if inp.expandable_segments:
        return _slivers_bytes(inp)
    largest = 0 if inp.checkpointing else HARD_LARGEST_BLOCK_FRACTION * inp.largest_block_bytes
    return max(RESERVE_MIN_BYTES, int(RESERVE_PEAK_FRACTION * inp.peak_allocated + largest))


def reserved_minus_allocated_bytes(inp: OverheadInput) -> int:
    """``torch.cuda.max_memory_reserved()`` minus the allocated peak (:mod:`estimator.training.allocator`): the
    larger of the soft and the hard reserve, as :func:`overhead_bytes` counts it."""
    return max(allocator_reserve_bytes(inp), _hard_reserve_bytes(inp))


def fixed_bytes(inp: OverheadInput) -> int:
    """The overhead outside PyTorch's allocator: CUDA context and libraries, NCCL buffers."""
    return _fixed_bytes(inp)


def _fixed_bytes(inp: OverheadInput) -> int:
    nccl = 0
    if inp.world_size > 1:
        nccl = NCCL_INTRA_NODE_BYTES + (NCCL_INTER_NODE_BYTES if inp.num_nodes > 1 else 0)
    return NON_TORCH_BYTES + nccl


def overhead_bytes(inp: OverheadInput) -> int:
    """What nvidia-smi shows beyond the allocated peak when the allocator has room to cache."""
    return _fixed_bytes(inp) + max(allocator_reserve_bytes(inp), _hard_reserve_bytes(inp))


def hard_overhead_bytes(inp: OverheadInput) -> int:
    """The part of the overhead that cannot be given back under memory pressure."""
    return _fixed_bytes(inp) + _hard_reserve_bytes(inp)
