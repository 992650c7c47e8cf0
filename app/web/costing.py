"""Cost to train on rented GPUs: GPU-hours times the cheapest on-demand catalog price of that GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.catalog_kinds import source_items
from estimator import EstimateResponse

__all__ = ["Cost", "cost_to_train", "gpu_hour_rate"]


@dataclass(frozen=True)
class Cost:
    total: float
    rate: float  # USD per GPU-hour
    offer: str  # "provider instance"


def _per_gpu_hour(offer: Any) -> float | None:
    if getattr(offer, "on_demand_usd_per_gpu_hour", None):
        return float(offer.on_demand_usd_per_gpu_hour)
    per_instance = getattr(offer, "on_demand_usd_per_instance_hour", None)
    if per_instance:
        return float(per_instance) / int(offer.gpus_per_instance)
    return None


def gpu_hour_rate(catalog: Any, gpu_id: str) -> tuple[float, str] | None:
    """The cheapest on-demand USD per GPU-hour for ``gpu_id`` in the catalog's cloud offers, and whose."""
    best: tuple[float, str] | None = None
    for offer in source_items(catalog, "cloud_offer").values():
        on_demand = getattr(offer, "offer_kind", "on-demand") == "on-demand"
        rate = _per_gpu_hour(offer) if offer.gpu_id == gpu_id and on_demand else None
        if rate is not None and (best is None or rate < best[0]):
            best = (rate, f"{offer.provider} {offer.instance}")
    return best


def cost_to_train(catalog: Any, result: EstimateResponse) -> Cost | None:
    """``None`` when the estimate has no training time or the GPU has no cloud price."""
    if result.train is None:
        return None
    rate = gpu_hour_rate(catalog, result.layout.gpu)
    if rate is None:
        return None
    return Cost(total=result.train.gpu_hours * rate[0], rate=rate[0], offer=rate[1])
