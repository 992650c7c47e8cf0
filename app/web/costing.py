"""The cost of a result for the pages: the estimate's own ``cost`` (:mod:`estimator.tco.run_cost`, one basis for every
page, the API and quotes), in the shape the templates read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from estimator import EstimateResponse
from estimator.tco.run_cost import CostResult

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["Cost", "basis_words", "cost_to_train"]


@dataclass(frozen=True)
class Cost:
    total: float
    rate: float  # USD per GPU-hour
    offer: str  # what is priced, in words: "owned NVIDIA DGX H100 ..." or "AWS p5.48xlarge (on-demand, ...)"
    basis: str = "rent"  # own | rent
    basis_words: str = ""
    confidence: str = "medium"
    date: str | None = None
    source: str = ""
    flags: list[str] = field(default_factory=list)
    another_way: bool = False


def basis_words(cost: CostResult) -> str:
    """The basis in words, for a page: "owned (amortised purchase + running costs at 80% utilisation)" or
    "rented (AWS p5en.48xlarge (on-demand, us-east-1))"."""
    if cost.basis == "own":
        util = f" at {cost.utilisation:.0%} utilisation" if cost.utilisation is not None else ""
        return f"owned: purchase amortised + power, colocation and support{util}"
    return f"rented: {cost.label}"


def cost_to_train(catalog: Catalog, result: EstimateResponse) -> Cost | None:
    """``None`` when the run has no cost: no price either way, no training length, or it does not fit. The
    total is the estimate's ``cost.total_usd`` (rate x the result's GPU-hours)."""
    c = result.cost
    if c is None or result.train is None or not result.memory.fits:
        return None
    return Cost(total=c.usd_per_gpu_hour * result.train.gpu_hours, rate=c.usd_per_gpu_hour, offer=c.label,
                basis=c.basis, basis_words=basis_words(c),
                confidence=c.confidence, date=c.date, source=c.source, flags=list(c.flags),
                another_way=c.priced_another_way)
