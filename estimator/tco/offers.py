"""How far a cloud offer's price may be trusted (``high`` / ``medium`` / ``low``), from what the catalog records
of it: the price's sources, its date against the catalog's newest price, the figures it marks uncertain.

One rule for every price that reaches a total: the run's cost basis (:mod:`estimator.tco.run_cost`), the TCO's cloud
options (:mod:`estimator.tco.costs`) and the TCO page. Pure: catalog objects are read by attribute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = [
    "HYPERSCALERS",
    "Confidence",
    "Pricing",
    "ProviderClass",
    "age_confidence",
    "offer_confidence",
    "price_field",
    "provider_class",
]

Pricing = Literal["on-demand", "reserved", "spot"]
Confidence = Literal["high", "medium", "low"]
ProviderClass = Literal["hyperscaler", "neocloud"]

#: The public clouds counted as hyperscalers (their own regions, list prices on their pricing pages); every
#: other provider (Lambda, CoreWeave, Spheron, MosaicML, ...) is a "neocloud" (GPU cloud specialist).
HYPERSCALERS: Final = frozenset({"AWS", "Azure", "GCP", "Oracle"})


def provider_class(provider: str) -> ProviderClass:
    """``hyperscaler`` or ``neocloud``: prices of one class are compared with each other, like for like."""
    return "hyperscaler" if provider in HYPERSCALERS else "neocloud"

#: a price older than this (years before the newest price in the catalog) is "medium" confidence at best
_STALE_YEARS: Final = 2


def price_field(pricing: Pricing) -> str:
    """The catalog field of an offer that holds its price of this kind."""
    return {"reserved": "reserved_usd_per_gpu_hour", "spot": "spot_usd_per_gpu_hour"}.get(
        pricing, "on_demand_usd_per_gpu_hour"
    )


def _year(date: str | None) -> int | None:
    return int(date[:4]) if date and date[:4].isdigit() else None


def _newest_year(catalog: Catalog) -> int | None:
    years = [y for o in catalog.cloud_offers if (y := _year(getattr(o, "date", None))) is not None]
    return max(years) if years else None


def age_confidence(date: str | None, uncertain_date: bool, catalog: Catalog) -> Confidence:
    """``medium`` for a price of uncertain or unknown date, or one more than two years older than the catalog's
    newest price; else ``high``."""
    newest, year = _newest_year(catalog), _year(date)
    if uncertain_date or year is None or (newest is not None and newest - year > _STALE_YEARS):
        return "medium"
    return "high"


def offer_confidence(offer: Any, pricing: Pricing, catalog: Catalog) -> Confidence:
    """``low``: the price is marked uncertain or rests on secondary sources only; ``medium``: its date is
    uncertain or more than two years older than the catalog's newest price; else ``high``."""
    uncertain = tuple(getattr(offer, "uncertain", ()) or ())
    sources = tuple(getattr(offer, "sources_for", lambda _f: offer.sources)(price_field(pricing)))
    secondary_only = bool(sources) and all(getattr(s, "kind", "") == "secondary" for s in sources)
    if price_field(pricing) in uncertain or "gpu_id" in uncertain or secondary_only:
        return "low"
    return age_confidence(offer.date, "date" in uncertain, catalog)
