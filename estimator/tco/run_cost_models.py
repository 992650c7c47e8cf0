"""The cost basis's pydantic models (the request's ``cost`` choice, a basis, a run's cost): plain Python, as
pydantic's models are; :mod:`estimator.tco.run_cost`, which prices with them, is compiled (issue 19). Import them from
:mod:`estimator.tco.run_cost`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from estimator.messages import Message
from estimator.tco import TcoAssumptions
from estimator.tco.offers import Confidence, Pricing, ProviderClass

__all__ = ["Basis", "CostBasis", "CostChoice", "CostResult"]

Basis = Literal["own", "rent"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CostChoice(_Frozen):
    """How to price the run (``cost`` in an estimate request); every field is optional.

    ``basis``: ``auto`` follows the request (a server means own, else rent). ``offer_id`` names one cloud offer
    (rent). ``provider_class`` and ``pricing`` choose the offer when none is named: the cheapest of that class
    with that price. ``utilisation`` is the owned fleet's share of useful hours, ``electricity_usd_per_kwh`` and
    ``pue`` the power price and the data centre's PUE (own; each defaults to the TCO default, the same field of
    :class:`estimator.tco.TcoAssumptions`, so the TCO page with the same three values prices the run the same).
    ``networking_usd_per_node_*``: your own network figure per node, which wins over the designed fabric (the same
    field of the TCO assumptions, given: :meth:`estimator.tco.TcoAssumptions.networking_override`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    basis: Literal["auto", "own", "rent"] = "auto"
    offer_id: str | None = Field(default=None, min_length=1, max_length=200)
    provider_class: ProviderClass = "hyperscaler"
    pricing: Pricing = "on-demand"
    utilisation: float | None = Field(default=None, ge=0.01, le=1)
    electricity_usd_per_kwh: float | None = Field(default=None, ge=0, le=10, description="own: $/kWh of power")
    pue: float | None = Field(default=None, ge=1.0, le=3.0, description="own: the data centre's power usage "
                              "effectiveness")
    networking_usd_per_node_ib_ndr: float | None = Field(
        default=None, ge=0, le=1e8, description="own, several nodes: your own InfiniBand network cost per node, "
        "in place of the fabric designed for the server (estimator.tco.network); null: the designed fabric")
    networking_usd_per_node_roce: float | None = Field(
        default=None, ge=0, le=1e8, description="own, several nodes: your own RoCE network cost per node (used "
        "with a RoCE `cluster.fabric`); null: the designed fabric")

    def tco_assumptions(self) -> TcoAssumptions:
        """The TCO assumptions of an owned basis: the defaults, with the fields this choice sets."""
        given = {k: getattr(self, k) for k in ("utilisation", "electricity_usd_per_kwh", "pue",
                                               "networking_usd_per_node_ib_ndr", "networking_usd_per_node_roce")
                 if getattr(self, k) is not None}
        return TcoAssumptions(**given)


class CostBasis(_Frozen):
    """The price of one GPU-hour on this hardware, with where it comes from."""

    basis: Basis
    usd_per_gpu_hour: float
    label: str = Field(description="what is priced, in words: the owned server or the cloud offer")
    source: str = Field(description="where the price comes from, in words")
    date: str | None = Field(description="the date of the price (catalog price date or offer date)")
    confidence: Confidence
    pricing: Literal["owned", "on-demand", "reserved", "spot"]
    provider: str | None = None
    provider_class: ProviderClass | None = None
    region: str | None = None
    offer_id: str | None = None
    server_id: str | None = None
    utilisation: float | None = Field(default=None, description="own: the share of hours that do useful work")
    networking_usd_per_node: float | None = Field(
        default=None, description="own, several nodes: the cluster network's capex per node in this price "
        "(estimator.tco.network.owned_network: the designed fabric, the user's figure or the flat assumption)")
    assumptions: list[str] = Field(default_factory=list)
    flags: list[Message] = Field(default_factory=list, description="why this option is priced differently, if it is")
    priced_another_way: bool = Field(
        default=False,
        description="true when the chosen basis had no price and the "
        "other way (or another provider class) was used: not like for like",
    )


class CostResult(CostBasis):
    """The cost basis and the run's total: rate x GPU-hours (``None`` for a setup that does not fit or has no
    training length)."""

    gpu_hours: float | None = None
    total_usd: float | None = None
