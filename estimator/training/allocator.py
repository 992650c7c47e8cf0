"""What PyTorch's CUDA caching allocator reserves, not only what is allocated, and the fit verdict at the edge.

Mechanism (pytorch/pytorch ``c10/cuda/CUDACachingAllocator.cpp`` at 001074d25084fdb87a799823e395a50f5ec044d3):
requests of at most ``kSmallSize`` (1 MiB) come from a small pool packed in ``kSmallBuffer`` (2 MiB) segments;
larger ones from the large pool, where a request below ``kMinLargeAlloc`` (10 MiB) gets a ``kLargeBuffer``
(20 MiB) segment and a larger one a ``cudaMalloc`` of its own size rounded up to ``kRoundLarge`` (2 MiB). A freed
block stays cached; the smallest cached block that fits the next request is split (``should_split``: in the large
pool when the rest is over 1 MiB and the request under ``max_split_size``, unlimited by default). When
``cudaMalloc`` fails the allocator frees the cached blocks *that are not split* and retries: a segment one live
tensor still sits in cannot be given back. So a large transient allocation (the fp32 logits and their gradient
at long sequences: 4 x tokens x vocabulary bytes, 15.7 GiB for Llama 3.1 8B at 32k tokens) that is freed, whose
segment is then carved up by smaller tensors (with checkpointing, the recomputed layers' activations), and that is
requested again needs a fresh segment of its full size while the old one is held in fragments. That is the
issue-33 run: allocated within 1 % of the estimate, it died in its second step with 16 GiB reserved but not
allocated on an H100 80GB.

``expandable_segments:True`` (the same file, Note [Expandable Segments]) maps physical memory into one reserved
virtual range per stream in 20 MiB pages (large pool); freed ranges coalesce in it, and on an out-of-memory the
pages of free ranges are unmapped and mapped again where the request needs them: the large transients leave no
stranded segment. What stays are slivers around the blocks in use.

The estimate (:func:`estimator.training.overhead.reserved_minus_allocated_bytes`): the reserved peak is the
allocated peak plus, with the default allocator, ``0.054 x peak + 0.77 x the fp32 logits (with checkpointing)
+ 0.32 x the foreach optimizer's intermediates + 0.57 x FSDP's buffers`` (the large transients; without
checkpointing at least ``0.65 x`` the largest block): fitted on H200 device calls 1-2 (2026-12-02, commit
61c8f5c) and held out against calls 4-8, measured afterwards (docs/allocator.md: median 3.7 %, p90 6.1 % over 44
single-process runs; p90 8.9 % over 40 tensor-parallel ones); with expandable segments only the ``0.054 x peak``
slivers (no GPU measurement yet: the bar is the unmeasured floor).

The verdict: ``does_not_fit`` when even the part that cannot be given back does not fit (``fits`` false, as
before); ``at_risk`` when it fits but the headroom left by the estimated reserved peak, or by the allocated peak
with its hard overhead, is inside that estimate's error bar; ``fits`` otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

from estimator.construct import trusted
from estimator.errors import EstimatorError
from estimator.job import Job
from estimator.messages import N_, Num, Text
from estimator.request import EstimateRequest
from estimator.response import Suggestion

__all__ = ["RESERVED_ERROR_BAR_PCT", "RESERVED_ERROR_BAR_TP_PCT", "UNMEASURED_RESERVED_ERROR_BAR_PCT", "FitVerdict",
           "allocator_assumptions", "fit_verdict", "reserved_error_bar_pct", "verdict_suggestions"]

FitVerdict = Literal["fits", "at_risk", "does_not_fit"]

#: p90 |error| of the reserved-peak estimate over the 44 single-process runs measured after its constants were fitted
#: (H200 device calls 4, 7 and 8; docs/allocator.md), rounded up to 0.5 %.
RESERVED_ERROR_BAR_PCT: Final = 6.5
#: the same over the 40 tensor-parallel runs (DTensor TP alone or under FSDP2, calls 5-8, also measured after the
#: fit): p90 8.9 %.
RESERVED_ERROR_BAR_TP_PCT: Final = 9.0
#: expandable segments: no GPU measurement yet (the memory model's floor for kinds never measured).
UNMEASURED_RESERVED_ERROR_BAR_PCT: Final = 10.0

GIB: Final = 1 << 30


def reserved_error_bar_pct(allocator: str, allocated_bar_pct: float, tensor_parallel: bool = False) -> float:
    """The error bar of the reserved peak (its class's: with or without tensor parallelism): never below the
    allocated peak's."""
    if allocator != "default":
        own = UNMEASURED_RESERVED_ERROR_BAR_PCT
    else:
        own = RESERVED_ERROR_BAR_TP_PCT if tensor_parallel else RESERVED_ERROR_BAR_PCT
    return max(own, allocated_bar_pct)


def allocator_assumptions(job: Job) -> list[str]:
    """The assumption line of an allocator setting no GPU has measured (none for the default allocator)."""
    if job.training.allocator != "expandable_segments":
        return []
    return [Text("Allocator: expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); the large "
                 "transient allocations leave no stranded segment, so the reserve is the slivers around the blocks in "
                 "use only. Not measured on a GPU: the reserved peak's error bar is the %(bar)s %% floor.",
                 bar=Num(UNMEASURED_RESERVED_ERROR_BAR_PCT, ".0f"))]


def _inside_bar(capacity: int, need: int, bar_pct: float) -> bool:
    return capacity - need < need * bar_pct / 100


def fit_verdict(fits: bool, capacity: int, hard_total: int, allocated_bar_pct: float, reserved_total: int,
                reserved_bar_pct: float) -> FitVerdict:
    """``does_not_fit`` / ``at_risk`` / ``fits`` (module docstring). ``hard_total``: the allocated peak plus what
    cannot be given back (what ``fits`` compares); ``reserved_total``: the reserved peak plus the memory outside
    the allocator (CUDA context, NCCL)."""
    if not fits:
        return "does_not_fit"
    if _inside_bar(capacity, hard_total, allocated_bar_pct) or _inside_bar(capacity, reserved_total,
                                                                           reserved_bar_pct):
        return "at_risk"
    return "fits"


#: (change, what it is) tried when the verdict is not "fits", in this order.
_CANDIDATES: Final[tuple[tuple[dict[str, Any], str], ...]] = (
    ({"training.allocator": "expandable_segments"}, N_("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")),
    ({"training.loss_kernel": "chunked"}, N_("a chunked loss (the logits one chunk at a time)")),
    ({"training.loss_kernel": "fused"}, N_("a fused loss (Liger fused linear cross-entropy or Cut Cross-Entropy)")),
)


def _applies(job: Job, changes: dict[str, Any]) -> bool:
    t = job.training
    if "training.allocator" in changes:
        return bool(t.allocator != changes["training.allocator"])
    return t.loss_kernel == "materialized" and job.parallelism.framework != "megatron"


_RANK: Final = {"does_not_fit": 0, "at_risk": 1, "fits": 2}
#: a change that leaves the verdict as it is is shown when it frees at least this much reserved memory
MIN_FREED_BYTES: Final = GIB


def verdict_suggestions(job: Job, verdict: str, reserved_total: int,
                        verdict_of: Callable[[EstimateRequest], tuple[int, str]],
                        apply: Callable[[EstimateRequest, dict[str, Any]], EstimateRequest]) -> list[Suggestion]:
    """The allocator setting or a chunked / fused loss for an ``at_risk`` or ``does_not_fit`` setup, each with the
    verdict it gives and the GiB of reserved memory it frees at the peak: those that make it fit first, then those
    that improve the verdict, then those that leave it but free at least ``MIN_FREED_BYTES``. ``verdict_of``:
    (reserved peak plus the memory outside the allocator, verdict) of a request; ``apply``: the request with dotted
    changes."""
    found: list[tuple[int, int, Suggestion]] = []
    for order, (changes, what) in enumerate(_CANDIDATES):
        if not _applies(job, changes):
            continue
        try:
            total, after = verdict_of(apply(job.request, changes))
        except (ValueError, EstimatorError):
            continue
        freed = reserved_total - total
        if _RANK[after] < _RANK[verdict] or (_RANK[after] == _RANK[verdict] and freed < MIN_FREED_BYTES):
            continue
        summary = Text("%(change)s: %(freed)s GiB less reserved at the peak; %(verdict)s", change=Text(what),
                       freed=Num(freed / GIB, ".1f"), verdict=Text(_WORDS[after]))
        found.append((-_RANK[after], order, trusted(Suggestion, summary=summary, changes=changes, total_bytes=total,
                                                     fits=after == "fits")))
    return [s for _, _, s in sorted(found, key=lambda x: (x[0], x[1]))]


_WORDS: Final = {"fits": N_("fits"), "at_risk": N_("still at risk"), "does_not_fit": N_("still does not fit")}
