"""The inputs and results of :mod:`estimator.tco`: a training job to cost, and the frozen results (capex, opex,
ownership TCO, the cost of one run, TCO bars, cumulative spend, own versus cloud)."""

from __future__ import annotations

from pydantic import Field

from estimator.messages import Message
from estimator.tco.assumptions import CloudPricing, OptionKind, _Frozen, _Input

__all__ = [
    "MAX_TIME_TO_TRAIN_S",
    "CapexBreakdown",
    "CumulativeCost",
    "JobCost",
    "OpexBreakdown",
    "OwnVsCloud",
    "OwnershipTco",
    "RunCost",
    "TcoOption",
]

# ------------------------------------------------------------------------------------------------ inputs

#: the longest run the TCO model costs: 1e11 s is about 3,170 years, far past any server's life; a longer
#: estimate (e.g. 1e16 tokens on one node) is refused by the callers as a 422 on ``training.train_tokens``
MAX_TIME_TO_TRAIN_S = 1e11


class JobCost(_Input):
    """One training run on one hardware option, as the step-time model sizes it.

    ``energy_kwh`` is the IT energy of the run (at the servers); when ``None`` it is the nodes' power at load
    times the run time. ``server_price_usd`` overrides the catalog price (sales quotes).
    """

    gpu_id: str
    server_id: str
    num_nodes: int = Field(ge=1, le=100_000)
    gpus_per_node: int = Field(ge=1, le=64)
    time_to_train_s: float = Field(gt=0, le=MAX_TIME_TO_TRAIN_S)
    train_tokens: float = Field(ge=1, le=1e16)
    energy_kwh: float | None = Field(default=None, ge=0, le=1e15)
    server_price_usd: float | None = Field(default=None, gt=0, le=1e10)
    label: Message | None = None

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def hours(self) -> float:
        return self.time_to_train_s / 3600

    @property
    def gpu_hours(self) -> float:
        return self.num_gpus * self.hours


# ----------------------------------------------------------------------------------------------- results


class CapexBreakdown(_Frozen):
    servers_usd: float
    networking_usd: float
    storage_usd: float
    total_usd: float


class OpexBreakdown(_Frozen):
    """Yearly operating cost. ``average_power_kw`` and ``load_power_kw`` are IT power of all nodes."""

    power_usd: float
    colocation_usd: float
    maintenance_usd: float
    staff_usd: float
    total_usd: float
    average_power_kw: float
    load_power_kw: float
    network_power_kw: float = Field(default=0.0, description="the cluster network's switches and switch-side "
                                    "optics, drawing all year (not in average / load power, which are the nodes')")
    network_power_usd: float = Field(default=0.0, description="their power bill a year, part of power_usd")


class OwnershipTco(_Frozen):
    """Owning ``num_nodes`` servers for ``years``: cash TCO, amortised TCO and cost per useful GPU-hour."""

    server_id: str
    server_name: str
    gpu_id: str
    num_nodes: int
    num_gpus: int
    years: float
    server_price_usd: float
    server_price_estimated: bool
    server_price_source: Message
    capex: CapexBreakdown
    opex_per_year: OpexBreakdown
    total_usd: float
    amortised_total_usd: float
    usd_per_gpu_hour: float
    opex_usd_per_gpu_hour: float
    utilisation: float
    networking_usd_per_node: float = Field(default=0.0, description="the cluster network's capex per node "
                                           "(estimator.tco.network.owned_network); 0 on one node")
    networking_fabric: str | None = Field(default=None, description="the fabric choice designed for it (ib-ndr, "
                                          "...); null when the figure is the user's or the flat assumption")
    networking_note: Message | None = Field(default=None, description="which network figure this is, in words")


class RunCost(_Frozen):
    """The cost of one training run on one option (owned servers or a cloud offer)."""

    label: Message
    kind: OptionKind
    gpu_id: str
    server_id: str | None
    offer_id: str | None
    provider: str | None
    num_gpus: int
    time_to_train_s: float
    cost_usd: float
    usd_per_gpu_hour: float
    usd_per_million_tokens: float
    energy_kwh: float
    facility_energy_kwh: float
    price_date: str | None
    confidence: str | None = Field(default=None,
                                   description="high | medium | low: the price's (estimator.tco.run_cost)")

    @property
    def time_to_train_h(self) -> float:
        return self.time_to_train_s / 3600


class TcoOption(_Frozen):
    """One bar of the TCO chart: cost components over ``years``; ``total_usd`` is their sum."""

    label: Message
    kind: OptionKind
    years: float
    capex_usd: float = 0.0
    power_usd: float = 0.0
    colocation_usd: float = 0.0
    maintenance_usd: float = 0.0
    staff_usd: float = 0.0
    cloud_usd: float = 0.0
    total_usd: float


class CumulativeCost(_Frozen):
    """Cumulative spend by month (month 0 = purchase); the break-even month is the first with cloud >= own."""

    months: tuple[int, ...]
    own_usd: tuple[float, ...]
    cloud_usd: tuple[float, ...]
    break_even_month: int | None
    break_even_month_exact: float | None


class OwnVsCloud(_Frozen):
    ownership: OwnershipTco
    offer_id: str
    cloud_pricing: CloudPricing
    cloud_usd_per_gpu_hour: float
    cloud_monthly_usd: float
    own_monthly_opex_usd: float
    cumulative: CumulativeCost
