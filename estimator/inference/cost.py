"""$ per million tokens on the training estimate's cost basis, through one small adapter.

The adapter asks for one number, the cost of one node-hour of useful time, from the existing TCO functions
(:func:`estimator.tco.ownership_tco`: (capex / life + opex a year) / (8760 h x utilisation); or the catalog's
cheapest on-demand cloud offer for the GPU). A cost-basis object that replaces it needs only
``node_usd_per_hour`` and ``utilisation``. GPU-time is split between prefill and decode by their shares of a
serving cycle (:mod:`estimator.inference.speed`), so input and output tokens each carry their own cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from estimator.errors import InvalidRequestError
from estimator.messages import Money, Num, Text
from estimator.tco import HOURS_PER_YEAR, TcoAssumptions, ownership_tco

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["CostBasis", "NodeCost", "node_cost"]


class CostBasis(Protocol):
    @property
    def node_usd_per_hour(self) -> float: ...

    @property
    def utilisation(self) -> float: ...


@dataclass(frozen=True)
class NodeCost:
    basis: str
    node_usd_per_hour: float
    utilisation: float
    source: str
    price_date: str | None


def node_cost(catalog: Catalog, server_id: str, gpu_id: str, gpus: int, basis: str, a: TcoAssumptions,
              cloud_offer: str | None, server_price_usd: float | None) -> NodeCost:
    if basis == "own":
        t = ownership_tco(server_id, 1, a, catalog, gpus_per_node=gpus, server_price_usd=server_price_usd)
        return NodeCost("own", t.usd_per_gpu_hour * gpus, a.utilisation,
                        Text("own %(server)s: (capex / %(years)s y + opex) / useful hours (utilisation %(pct)s); "
                             "price %(source)s", server=t.server_name, years=Num(a.depreciation_years, "g"),
                             pct=Num(a.utilisation, ".0%"), source=t.server_price_source), None)
    offers = [o for o in catalog.offers_for(gpu_id) if o.on_demand_usd_per_gpu_hour is not None]
    if cloud_offer is not None:
        offers = [o for o in catalog.cloud_offers if o.id == cloud_offer]
        if not offers:
            raise InvalidRequestError(f"unknown cloud offer {cloud_offer!r}", "cost.cloud_offer")
        if offers[0].gpu_id != gpu_id:
            raise InvalidRequestError(f"cloud offer {cloud_offer} carries {offers[0].gpu_id}, not {gpu_id}",
                                      "cost.cloud_offer")
    if not offers or offers[0].on_demand_usd_per_gpu_hour is None:
        raise InvalidRequestError(f"no on-demand cloud price for {gpu_id} in the catalog", "cost.basis")
    o = offers[0]
    price = float(o.on_demand_usd_per_gpu_hour or 0.0)
    offer = f"{o.provider} {o.instance}"
    return NodeCost("cloud", price * gpus, 1.0, Text("%(offer)s on demand, %(price)s/GPU-h", offer=offer,
                                                     price=Money(price, ".2f")), o.date)


def yearly_tokens(tokens_per_s: float, utilisation: float) -> float:
    return tokens_per_s * 3600 * HOURS_PER_YEAR * utilisation
