"""Total cost of ownership: owning GPU servers versus renting cloud GPUs, per training run and over N years.

Pure functions on frozen inputs (no web, database or plotting imports). Hardware, prices and the defaults of
every assumption come from :mod:`hardware_catalog`; every default is sourced there (``tco_defaults.yaml``) and
shown by :func:`assumption_table`. Formulas (``docs/tco.md`` has the long form)::

    capex          = server price x nodes + networking per node x nodes (multi-node only) + storage TB x $/TB
    load power     = GPUs x TDP + rest of the server                              (W per node, at load)
    average power  = GPUs x TDP x utilisation + rest of the server                (issue 4)
    power $/yr     = average kW x PUE x 8760 h x $/kWh
    colocation $/yr= load kW x $/kW/month x 12                                    (CBRE asking rate per kW)
    maintenance $/yr = maintenance % x capex ; staff $/yr as given
    N-year TCO     = capex + N x opex/yr          (cash; amortised: capex x min(N, life)/life + N x opex/yr)
    owned $/GPU-h  = (capex / life + opex/yr) / (GPUs x 8760 h x utilisation)     (per useful GPU-hour)
    cloud $/run    = $/GPU-h x GPUs x hours                                       (linear in hours)
    break-even     = capex / (cloud $/month - own opex $/month)                   (months)
    upgrade payback= (capex B - capex A) / (opex per run A - opex per run B)      (runs; set against the life)

Node power (GPU TDP, the server's own GPU SKU, peak and average) and rack planning live in :mod:`estimator.rack`,
the one implementation shared with the estimate's host sizing.

A training job (:class:`JobCost`) comes from the step-time model: its time to train, GPU count and, optionally,
its energy. Money is in US dollars, energy in kWh, power in W or kW as named.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from estimator.errors import InvalidRequestError, UnknownHardwareError
from estimator.rack import node_average_power_w, node_power_at_load_w
from hardware_catalog import Catalog, CloudOffer, Gpu, Server, UnknownCatalogIdError, load_catalog

__all__ = [
    "HOURS_PER_MONTH",
    "HOURS_PER_YEAR",
    "AssumptionRow",
    "CapexBreakdown",
    "CumulativeCost",
    "JobCost",
    "OpexBreakdown",
    "OwnVsCloud",
    "OwnershipTco",
    "RunCost",
    "TcoAssumptions",
    "TcoOption",
    "UpgradeAnswer",
    "annual_opex",
    "assumption_table",
    "break_even_month",
    "capex",
    "cloud_cost_usd",
    "cloud_offers_for",
    "cloud_tco",
    "compare_job",
    "compare_upgrade",
    "cumulative_costs",
    "job_cost_cloud",
    "job_cost_owned",
    "node_average_power_w",
    "node_power_at_load_w",
    "own_vs_cloud",
    "own_vs_cloud_or_note",
    "ownership_tco",
    "ownership_tco_option",
    "power_cost_usd",
    "resolve_server",
    "server_price",
    "tco_options",
]

HOURS_PER_YEAR = 8760.0  # 365 days x 24 h
HOURS_PER_MONTH = HOURS_PER_YEAR / 12  # 730 h
MAX_CHART_MONTHS = 120

CloudPricing = Literal["on-demand", "reserved"]
NetworkFabric = Literal["infiniband-ndr", "roce"]
OptionKind = Literal["own", "cloud-on-demand", "cloud-reserved", "cloud-capacity-block"]
Verdict = Literal["upgrade", "upgrade-if-time-matters", "upgrade-if-cost-matters", "stay"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Input(BaseModel):
    """Inputs: frozen, no unknown fields, and no infinities or NaNs (they would come back as nulls)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _default(name: str) -> Any:
    """The default of one assumption, read lazily from the packaged ``tco_defaults.yaml``."""
    return load_catalog().tco_defaults.value(name)


def _num(name: str) -> float:
    return float(_default(name))


# ------------------------------------------------------------------------------------------ assumptions


class TcoAssumptions(_Input):
    """Every TCO assumption, editable; each default comes from ``hardware_catalog/data/tco_defaults.yaml``.

    Bounds are generous but finite (no value can make a total overflow to infinity): at most $10/kWh, PUE 1-3,
    $10,000/kW/month, 20-year life, 15-year horizon, utilisation 1-100%, 100 kW of non-GPU power, $100M of
    networking per node, 1 EB of storage at up to $1M/TB, $1B of staff a year, a server at 0.1-10x its GPUs,
    racks of 0.5-1,000 kW.
    """

    electricity_usd_per_kwh: float = Field(default_factory=lambda: _num("electricity_usd_per_kwh"), ge=0, le=10)
    pue: float = Field(default_factory=lambda: _num("pue"), ge=1.0, le=3.0)
    colocation_usd_per_kw_month: float = Field(
        default_factory=lambda: _num("colocation_usd_per_kw_month"), ge=0, le=10_000
    )
    maintenance_pct_per_year: float = Field(default_factory=lambda: _num("maintenance_pct_per_year"), ge=0, le=100)
    depreciation_years: float = Field(default_factory=lambda: _num("depreciation_years"), ge=0.25, le=20)
    horizon_years: float = Field(default_factory=lambda: _num("horizon_years"), ge=1 / 12, le=15)
    utilisation: float = Field(default_factory=lambda: _num("utilisation"), ge=0.01, le=1)
    server_non_gpu_power_w: float = Field(default_factory=lambda: _num("server_non_gpu_power_w"), ge=0, le=100_000)
    networking_usd_per_node_ib_ndr: float = Field(
        default_factory=lambda: _num("networking_usd_per_node_ib_ndr"), ge=0, le=1e8
    )
    networking_usd_per_node_roce: float = Field(
        default_factory=lambda: _num("networking_usd_per_node_roce"), ge=0, le=1e8
    )
    network_fabric: NetworkFabric = Field(default_factory=lambda: _default("network_fabric"))
    storage_tb: float = Field(default_factory=lambda: _num("storage_tb"), ge=0, le=1e6)
    storage_usd_per_tb: float = Field(default_factory=lambda: _num("storage_usd_per_tb"), ge=0, le=1e6)
    staff_usd_per_year: float = Field(default_factory=lambda: _num("staff_usd_per_year"), ge=0, le=1e9)
    server_cost_vs_gpu_price: float = Field(default_factory=lambda: _num("server_cost_vs_gpu_price"), ge=0.1, le=10)
    cloud_pricing: CloudPricing = Field(default_factory=lambda: _default("cloud_pricing"))
    rack_kw: float = Field(default_factory=lambda: _num("rack_kw"), ge=0.5, le=1000)

    @property
    def networking_usd_per_node(self) -> float:
        """The networking price of the chosen fabric (InfiniBand NDR or RoCE)."""
        if self.network_fabric == "roce":
            return self.networking_usd_per_node_roce
        return self.networking_usd_per_node_ib_ndr


class AssumptionRow(_Frozen):
    name: str
    value: float | str
    default: float | str
    unit: str
    description: str
    source: str
    url: str | None
    date: str
    uncertain: bool
    is_default: bool


def assumption_table(assumptions: TcoAssumptions | None = None, catalog: Catalog | None = None) -> list[AssumptionRow]:
    """One row per assumption: its value in ``assumptions``, the catalog default, unit and source."""
    a = assumptions or TcoAssumptions()
    defaults = (catalog or load_catalog()).tco_defaults.assumptions
    rows = []
    for name in TcoAssumptions.model_fields:
        d = defaults[name]
        value = getattr(a, name)
        rows.append(
            AssumptionRow(
                name=name,
                value=value,
                default=d.value,
                unit=d.unit,
                description=d.description,
                source=d.source,
                url=d.url,
                date=d.date,
                uncertain=d.uncertain,
                is_default=value == d.value,
            )
        )
    return rows


# ------------------------------------------------------------------------------------------------ inputs


class JobCost(_Input):
    """One training run on one hardware option, as the step-time model sizes it.

    ``energy_kwh`` is the IT energy of the run (at the servers); when ``None`` it is the nodes' power at load
    times the run time. ``server_price_usd`` overrides the catalog price (sales quotes).
    """

    gpu_id: str
    server_id: str
    num_nodes: int = Field(ge=1, le=100_000)
    gpus_per_node: int = Field(ge=1, le=64)
    time_to_train_s: float = Field(gt=0, le=1e11)
    train_tokens: float = Field(ge=1, le=1e16)
    energy_kwh: float | None = Field(default=None, ge=0, le=1e15)
    server_price_usd: float | None = Field(default=None, gt=0, le=1e10)
    label: str | None = None

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
    server_price_source: str
    capex: CapexBreakdown
    opex_per_year: OpexBreakdown
    total_usd: float
    amortised_total_usd: float
    usd_per_gpu_hour: float
    opex_usd_per_gpu_hour: float
    utilisation: float


class RunCost(_Frozen):
    """The cost of one training run on one option (owned servers or a cloud offer)."""

    label: str
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

    @property
    def time_to_train_h(self) -> float:
        return self.time_to_train_s / 3600


class TcoOption(_Frozen):
    """One bar of the TCO chart: cost components over ``years``; ``total_usd`` is their sum."""

    label: str
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


class UpgradeAnswer(_Frozen):
    """Answer to "when should I move from A to B?" for one job: numbers plus a plain-words summary."""

    own_a: RunCost
    own_b: RunCost
    cloud_a: RunCost | None
    cloud_b: RunCost | None
    time_saved_s: float
    speedup: float
    cost_difference_usd_per_run: float
    energy_saved_kwh: float
    capex_a_usd: float
    capex_b_usd: float
    opex_per_run_a_usd: float
    opex_per_run_b_usd: float
    break_even_runs: float | None
    break_even_runs_if_a_owned: float | None
    break_even_months: float | None
    break_even_months_if_a_owned: float | None
    runs_per_year: float = Field(description="runs of this job a year on B at the fleet's utilisation")
    life_years: float = Field(description="the depreciation life the payback is set against")
    pays_back_within_life: bool
    pays_back_within_life_if_a_owned: bool
    usd_per_hour_saved: float | None
    verdict: Verdict
    summary: str


# ------------------------------------------------------------------------------------------------- power


def power_cost_usd(it_kw: float, hours: float, pue: float, usd_per_kwh: float) -> float:
    """Electricity bill: IT kW x PUE (facility overhead, Uptime Institute definition) x hours x $/kWh."""
    return it_kw * pue * hours * usd_per_kwh


def cloud_cost_usd(usd_per_gpu_hour: float, num_gpus: int, hours: float) -> float:
    """Cloud bill: $/GPU-hour x GPUs x hours (per-GPU price = instance price / GPUs per instance)."""
    return usd_per_gpu_hour * num_gpus * hours


# --------------------------------------------------------------------------------------------- ownership


def resolve_server(catalog: Catalog, server_id: str) -> tuple[Server, Gpu]:
    """The server and its GPU; an unknown id raises :class:`UnknownHardwareError` naming close matches."""
    try:
        server = catalog.server(server_id)
        return server, catalog.gpu(server.gpu_id)
    except UnknownCatalogIdError as exc:
        raise UnknownHardwareError(str(exc), "server_id") from None


def server_price(server: Server, gpu: Gpu, a: TcoAssumptions, override: float | None = None) -> tuple[float, bool, str]:
    """(price, estimated?, source) of one server: the override, the catalog price, or an estimate.

    Estimate: GPU price midpoint x GPU count x server_cost_vs_gpu_price (Epoch training-cost-trends
    hardware.py: a server costs ~1.64x its GPUs).
    """
    if override is not None:
        return override, False, "price override"
    if server.price_usd is not None:
        return server.price_usd, False, f"catalog ({server.price_date})"
    if gpu.price_usd_mid is None:
        raise InvalidRequestError(
            f"{server.name} has no price and {gpu.name} has none to estimate it from; pass server_price_usd",
            "server_price_usd",
        )
    estimate = gpu.price_usd_mid * server.gpu_count * a.server_cost_vs_gpu_price
    return (
        estimate,
        True,
        f"estimated: {gpu.name} ${gpu.price_usd_mid:,.0f} x {server.gpu_count} x {a.server_cost_vs_gpu_price}",
    )


def capex(server_price_usd: float, num_nodes: int, a: TcoAssumptions) -> CapexBreakdown:
    """Capex = servers x nodes + networking per node x nodes (only when nodes > 1) + storage TB x $/TB."""
    servers = server_price_usd * num_nodes
    networking = a.networking_usd_per_node * num_nodes if num_nodes > 1 else 0.0
    storage = a.storage_tb * a.storage_usd_per_tb
    return CapexBreakdown(
        servers_usd=servers, networking_usd=networking, storage_usd=storage, total_usd=servers + networking + storage
    )


def annual_opex(average_kw: float, load_kw: float, capex_usd: float, a: TcoAssumptions) -> OpexBreakdown:
    """Yearly opex: power (average kW x PUE x 8760 h x $/kWh), colocation (load kW x $/kW/month x 12,
    CBRE), maintenance (% x capex) and staff."""
    power = power_cost_usd(average_kw, HOURS_PER_YEAR, a.pue, a.electricity_usd_per_kwh)
    colocation = load_kw * a.colocation_usd_per_kw_month * 12
    maintenance = a.maintenance_pct_per_year / 100 * capex_usd
    total = power + colocation + maintenance + a.staff_usd_per_year
    return OpexBreakdown(
        power_usd=power,
        colocation_usd=colocation,
        maintenance_usd=maintenance,
        staff_usd=a.staff_usd_per_year,
        total_usd=total,
        average_power_kw=average_kw,
        load_power_kw=load_kw,
    )


def _gpus_per_node(server: Server, gpus_per_node: int | None) -> int:
    n = server.gpu_count if gpus_per_node is None else gpus_per_node
    if not 1 <= n <= server.gpu_count:
        raise InvalidRequestError(f"{server.name} holds {server.gpu_count} GPUs, not {n}", "gpus_per_node")
    return n


def ownership_tco(
    server_id: str,
    num_nodes: int = 1,
    assumptions: TcoAssumptions | None = None,
    catalog: Catalog | None = None,
    gpus_per_node: int | None = None,
    server_price_usd: float | None = None,
) -> OwnershipTco:
    """N-year TCO of owning ``num_nodes`` servers (N = ``horizon_years``) and the cost per useful GPU-hour."""
    a, cat = assumptions or TcoAssumptions(), catalog or load_catalog()
    server, gpu = resolve_server(cat, server_id)
    per_node = _gpus_per_node(server, gpus_per_node)
    price, estimated, price_source = server_price(server, gpu, a, server_price_usd)
    cap = capex(price, num_nodes, a)
    load_kw = node_power_at_load_w(gpu, per_node, a.server_non_gpu_power_w, server) * num_nodes / 1000
    avg_kw = node_average_power_w(gpu, per_node, a.utilisation, a.server_non_gpu_power_w, server) * num_nodes / 1000
    opex = annual_opex(avg_kw, load_kw, cap.total_usd, a)
    return _ownership(server, gpu, num_nodes * per_node, num_nodes, (price, estimated, price_source), cap, opex, a)


def _ownership(
    server: Server,
    gpu: Gpu,
    gpus: int,
    nodes: int,
    price: tuple[float, bool, str],
    cap: CapexBreakdown,
    opex: OpexBreakdown,
    a: TcoAssumptions,
) -> OwnershipTco:
    years, life = a.horizon_years, a.depreciation_years
    useful_gpu_hours = gpus * HOURS_PER_YEAR * a.utilisation
    return OwnershipTco(
        server_id=server.id,
        server_name=server.name,
        gpu_id=gpu.id,
        num_nodes=nodes,
        num_gpus=gpus,
        years=years,
        server_price_usd=price[0],
        server_price_estimated=price[1],
        server_price_source=price[2],
        capex=cap,
        opex_per_year=opex,
        total_usd=cap.total_usd + years * opex.total_usd,
        amortised_total_usd=cap.total_usd * min(years, life) / life + years * opex.total_usd,
        usd_per_gpu_hour=(cap.total_usd / life + opex.total_usd) / useful_gpu_hours,
        opex_usd_per_gpu_hour=opex.total_usd / useful_gpu_hours,
        utilisation=a.utilisation,
    )


def ownership_tco_option(t: OwnershipTco, label: str | None = None) -> TcoOption:
    """The owned option as one TCO bar: capex plus ``years`` of each opex component (cash TCO)."""
    o, y = t.opex_per_year, t.years
    return TcoOption(
        label=label or f"own {t.num_nodes}x {t.server_name}",
        kind="own",
        years=y,
        capex_usd=t.capex.total_usd,
        power_usd=y * o.power_usd,
        colocation_usd=y * o.colocation_usd,
        maintenance_usd=y * o.maintenance_usd,
        staff_usd=y * o.staff_usd,
        total_usd=t.total_usd,
    )


# ------------------------------------------------------------------------------------------------- cloud


def _offer_price(offer: CloudOffer, pricing: CloudPricing) -> float | None:
    if pricing == "reserved":
        return offer.reserved_usd_per_gpu_hour
    return offer.on_demand_usd_per_gpu_hour


def _cloud_kind(offer: CloudOffer, pricing: CloudPricing) -> OptionKind:
    if pricing == "reserved":
        return "cloud-reserved"
    return "cloud-capacity-block" if offer.offer_kind == "capacity-block" else "cloud-on-demand"


def _billed_share(pricing: CloudPricing, utilisation: float) -> float:
    """On-demand is paid for the hours used (the owned fleet's utilisation); reserved for every hour."""
    return utilisation if pricing == "on-demand" else 1.0


def cloud_tco(offer: CloudOffer, num_gpus: int, a: TcoAssumptions, pricing: CloudPricing | None = None) -> TcoOption:
    """Renting ``num_gpus`` for ``horizon_years`` to do the owned fleet's work: $/GPU-h x GPUs x 8760 x years
    x billed share (utilisation on demand, 1 when reserved)."""
    p = pricing or a.cloud_pricing
    price = _offer_price(offer, p)
    if price is None:
        raise InvalidRequestError(f"offer {offer.id} has no {p} price", "cloud_pricing")
    hours = HOURS_PER_YEAR * a.horizon_years * _billed_share(p, a.utilisation)
    cost = cloud_cost_usd(price, num_gpus, hours)
    return TcoOption(
        label=f"{offer.provider} {offer.instance} ({p})",
        kind=_cloud_kind(offer, p),
        years=a.horizon_years,
        cloud_usd=cost,
        total_usd=cost,
    )


def _priced_offers(catalog: Catalog, gpu_id: str, pricing: CloudPricing) -> list[CloudOffer]:
    return [o for o in catalog.offers_for(gpu_id) if _offer_price(o, pricing) is not None]


def tco_options(
    server_id: str,
    num_nodes: int = 1,
    assumptions: TcoAssumptions | None = None,
    catalog: Catalog | None = None,
    server_price_usd: float | None = None,
) -> list[TcoOption]:
    """The owned option and every cloud offer for the same GPU and GPU count, over ``horizon_years``."""
    a, cat = assumptions or TcoAssumptions(), catalog or load_catalog()
    own = ownership_tco(server_id, num_nodes, a, cat, server_price_usd=server_price_usd)
    clouds = [cloud_tco(o, own.num_gpus, a) for o in _priced_offers(cat, own.gpu_id, a.cloud_pricing)]
    return [ownership_tco_option(own), *clouds]


# -------------------------------------------------------------------------------------------- break-even


def break_even_month(capex_usd: float, own_monthly_usd: float, cloud_monthly_usd: float) -> float | None:
    """Months until renting has cost as much as owning: capex / (cloud $/month - own opex $/month);
    ``None`` when the cloud is not dearer per month than running the owned servers."""
    saving = cloud_monthly_usd - own_monthly_usd
    if saving <= 0:
        return None
    return capex_usd / saving


def cumulative_costs(capex_usd: float, own_monthly_usd: float, cloud_monthly_usd: float, months: int) -> CumulativeCost:
    """Cumulative own (capex at month 0 + opex) and cloud spend for months 0..N (N extended to show the
    break-even, at most 120 months)."""
    exact = break_even_month(capex_usd, own_monthly_usd, cloud_monthly_usd)
    first = math.ceil(exact - 1e-9) if exact is not None else None
    horizon = min(max(months, (first or 0) + 3), MAX_CHART_MONTHS)
    span = tuple(range(horizon + 1))
    return CumulativeCost(
        months=span,
        own_usd=tuple(capex_usd + m * own_monthly_usd for m in span),
        cloud_usd=tuple(m * cloud_monthly_usd for m in span),
        break_even_month=first,
        break_even_month_exact=exact,
    )


def cloud_offers_for(catalog: Catalog, gpu_id: str, pricing: CloudPricing) -> list[CloudOffer]:
    """The offers of ``gpu_id`` with a ``pricing`` price, cheapest first."""
    return sorted(_priced_offers(catalog, gpu_id, pricing), key=lambda o: _offer_price(o, pricing) or 0.0)


def _chosen_offer(catalog: Catalog, gpu_id: str, pricing: CloudPricing, offer_id: str) -> CloudOffer:
    """``offer_id``, checked: it must rent the owned GPU (else owning an H100 would be set against an A100
    price) and have a ``pricing`` price."""
    try:
        offer = catalog.cloud_offer(offer_id)
    except UnknownCatalogIdError as exc:
        raise UnknownHardwareError(str(exc), "offer_id") from None
    if offer.gpu_id != gpu_id:
        raise InvalidRequestError(
            f"offer {offer_id} rents {offer.gpu_id}, not the server's {gpu_id}; pick an offer for {gpu_id}",
            "offer_id",
        )
    if _offer_price(offer, pricing) is None:
        raise InvalidRequestError(f"offer {offer_id} has no {pricing} price", "offer_id")
    return offer


def _cheapest_offer(catalog: Catalog, gpu_id: str, pricing: CloudPricing, offer_id: str | None) -> CloudOffer:
    if offer_id is not None:
        return _chosen_offer(catalog, gpu_id, pricing, offer_id)
    offers = cloud_offers_for(catalog, gpu_id, pricing)
    if not offers:
        raise InvalidRequestError(f"no cloud offer with a {pricing} price for {gpu_id}", "offer_id")
    return offers[0]


def own_vs_cloud(
    server_id: str,
    num_nodes: int = 1,
    offer_id: str | None = None,
    assumptions: TcoAssumptions | None = None,
    catalog: Catalog | None = None,
    server_price_usd: float | None = None,
) -> OwnVsCloud:
    """Owning versus renting the same GPUs (the cheapest offer unless ``offer_id``): monthly costs,
    cumulative spend and the break-even month."""
    a, cat = assumptions or TcoAssumptions(), catalog or load_catalog()
    own = ownership_tco(server_id, num_nodes, a, cat, server_price_usd=server_price_usd)
    offer = _cheapest_offer(cat, own.gpu_id, a.cloud_pricing, offer_id)
    price = _offer_price(offer, a.cloud_pricing) or 0.0
    cloud_month = cloud_cost_usd(price, own.num_gpus, HOURS_PER_MONTH * _billed_share(a.cloud_pricing, a.utilisation))
    own_month = own.opex_per_year.total_usd / 12
    series = cumulative_costs(own.capex.total_usd, own_month, cloud_month, round(a.horizon_years * 12))
    return OwnVsCloud(
        ownership=own,
        offer_id=offer.id,
        cloud_pricing=a.cloud_pricing,
        cloud_usd_per_gpu_hour=price,
        cloud_monthly_usd=cloud_month,
        own_monthly_opex_usd=own_month,
        cumulative=series,
    )


def own_vs_cloud_or_note(
    server_id: str,
    num_nodes: int = 1,
    offer_id: str | None = None,
    assumptions: TcoAssumptions | None = None,
    catalog: Catalog | None = None,
    server_price_usd: float | None = None,
) -> tuple[OwnVsCloud | None, str | None]:
    """:func:`own_vs_cloud`, or ``(None, why)`` when no cloud offer rents this GPU at the chosen pricing (an
    MI300X or B200 server without offers still gets its ownership TCO). A bad ``offer_id`` is still an error."""
    a, cat = assumptions or TcoAssumptions(), catalog or load_catalog()
    if offer_id is None:
        _server, gpu = resolve_server(cat, server_id)
        if not cloud_offers_for(cat, gpu.id, a.cloud_pricing):
            return None, (
                f"No cloud offer in the catalog rents the {gpu.name} at a {a.cloud_pricing} price, so owning is "
                "not set against renting (no break-even month); add an offer to the catalog to compare."
            )
    return own_vs_cloud(server_id, num_nodes, offer_id, a, cat, server_price_usd), None


# ------------------------------------------------------------------------------------------------- a job


def _job_energy_kwh(job: JobCost, gpu: Gpu, a: TcoAssumptions, server: Server | None = None) -> float:
    """The job's IT energy: as given, else nodes x power at load x hours."""
    if job.energy_kwh is not None:
        return job.energy_kwh
    watts = node_power_at_load_w(gpu, job.gpus_per_node, a.server_non_gpu_power_w, server)
    return watts * job.num_nodes * job.hours / 1000


def _check_job(job: JobCost, server: Server) -> None:
    if job.gpu_id != server.gpu_id:
        raise InvalidRequestError(f"{server.name} carries {server.gpu_id}, not {job.gpu_id}", "gpu_id")
    _gpus_per_node(server, job.gpus_per_node)


def _run(job: JobCost, gpu: Gpu, a: TcoAssumptions, server: Server | None = None, **fields: Any) -> RunCost:
    energy = _job_energy_kwh(job, gpu, a, server)
    cost = float(fields["cost_usd"])
    return RunCost(
        gpu_id=job.gpu_id,
        num_gpus=job.num_gpus,
        time_to_train_s=job.time_to_train_s,
        usd_per_million_tokens=cost / (job.train_tokens / 1e6),
        energy_kwh=energy,
        facility_energy_kwh=energy * a.pue,
        **fields,
    )


def job_cost_owned(job: JobCost, assumptions: TcoAssumptions | None = None, catalog: Catalog | None = None) -> RunCost:
    """Cost of one run on owned servers: owned $/useful GPU-hour (capex over its life + opex) x GPU-hours."""
    a, cat = assumptions or TcoAssumptions(), catalog or load_catalog()
    server, gpu = resolve_server(cat, job.server_id)
    _check_job(job, server)
    own = ownership_tco(job.server_id, job.num_nodes, a, cat, job.gpus_per_node, job.server_price_usd)
    label = job.label or f"own {job.num_nodes}x {server.name}"
    return _run(
        job,
        gpu,
        a,
        server,
        label=label,
        kind="own",
        server_id=server.id,
        offer_id=None,
        provider=None,
        cost_usd=own.usd_per_gpu_hour * job.gpu_hours,
        usd_per_gpu_hour=own.usd_per_gpu_hour,
        price_date=server.price_date,
    )


def job_cost_cloud(
    job: JobCost,
    offer: CloudOffer,
    pricing: CloudPricing = "on-demand",
    assumptions: TcoAssumptions | None = None,
    catalog: Catalog | None = None,
) -> RunCost:
    """Cost of one run on a cloud offer: $/GPU-hour x GPUs x hours (the run's own hours only)."""
    a, cat = assumptions or TcoAssumptions(), catalog or load_catalog()
    price = _offer_price(offer, pricing)
    if price is None or offer.gpu_id != job.gpu_id:
        raise InvalidRequestError(f"offer {offer.id} has no {pricing} price for {job.gpu_id}", "offer_id")
    gpu = cat.gpu(job.gpu_id)
    return _run(
        job,
        gpu,
        a,
        label=f"{offer.provider} {offer.instance} ({pricing})",
        kind=_cloud_kind(offer, pricing),
        server_id=None,
        offer_id=offer.id,
        provider=offer.provider,
        cost_usd=cloud_cost_usd(price, job.num_gpus, job.hours),
        usd_per_gpu_hour=price,
        price_date=offer.date,
    )


def compare_job(
    job: JobCost, assumptions: TcoAssumptions | None = None, catalog: Catalog | None = None
) -> list[RunCost]:
    """The run owned and on every cloud offer for its GPU, on-demand and reserved, cheapest first."""
    a, cat = assumptions or TcoAssumptions(), catalog or load_catalog()
    runs = [job_cost_owned(job, a, cat)]
    for pricing in ("on-demand", "reserved"):
        runs += [job_cost_cloud(job, o, pricing, a, cat) for o in _priced_offers(cat, job.gpu_id, pricing)]
    return sorted(runs, key=lambda r: r.cost_usd)


def _cheapest_cloud_run(job: JobCost, a: TcoAssumptions, cat: Catalog) -> RunCost | None:
    offers = _priced_offers(cat, job.gpu_id, "on-demand")
    runs = [job_cost_cloud(job, o, "on-demand", a, cat) for o in offers]
    return min(runs, key=lambda r: r.cost_usd) if runs else None


# ---------------------------------------------------------------------------------------------- upgrade


def _payback_runs(capex_a: float, capex_b: float, opex_run_a: float, opex_run_b: float) -> float | None:
    """Runs after which B's extra capex is repaid by its lower running cost per run: (capex_B - capex_A) /
    (opex per run A - opex per run B); 0 when B costs no more to buy, ``None`` when it never pays back."""
    extra, saving = capex_b - capex_a, opex_run_a - opex_run_b
    if extra <= 0:
        return 0.0
    if saving <= 0:
        return None
    return extra / saving


def _verdict(faster: bool, cheaper: bool) -> Verdict:
    """``cheaper``: cheaper per run (amortised) and, when it costs more to buy, paying back within the life."""
    if faster and cheaper:
        return "upgrade"
    if faster:
        return "upgrade-if-time-matters"
    return "upgrade-if-cost-matters" if cheaper else "stay"


def compare_upgrade(
    job_on_a: JobCost, job_on_b: JobCost, assumptions: TcoAssumptions | None = None, catalog: Catalog | None = None
) -> UpgradeAnswer:
    """ "When should I move from A (e.g. 8x A100) to B (8x H100)?" for one job: time saved per run, owned cost
    per run (amortised), cloud cost per run, energy, and when buying B pays back (in runs and months), set
    against the depreciation life: a payback later than the life is a payback that never comes."""
    a, cat = assumptions or TcoAssumptions(), catalog or load_catalog()
    own_a, own_b = job_cost_owned(job_on_a, a, cat), job_cost_owned(job_on_b, a, cat)
    tco_a = ownership_tco(
        job_on_a.server_id, job_on_a.num_nodes, a, cat, job_on_a.gpus_per_node, job_on_a.server_price_usd
    )
    tco_b = ownership_tco(
        job_on_b.server_id, job_on_b.num_nodes, a, cat, job_on_b.gpus_per_node, job_on_b.server_price_usd
    )
    opex_a, opex_b = tco_a.opex_usd_per_gpu_hour * job_on_a.gpu_hours, tco_b.opex_usd_per_gpu_hour * job_on_b.gpu_hours
    runs = _payback_runs(tco_a.capex.total_usd, tco_b.capex.total_usd, opex_a, opex_b)
    runs_owned = _payback_runs(0.0, tco_b.capex.total_usd, opex_a, opex_b)
    saved = job_on_a.time_to_train_s - job_on_b.time_to_train_s
    diff = own_b.cost_usd - own_a.cost_usd
    per_year = HOURS_PER_YEAR * a.utilisation / job_on_b.hours  # back-to-back runs on B at the utilisation
    months, months_owned = _months(runs, per_year), _months(runs_owned, per_year)
    life_months = a.depreciation_years * 12
    answer = UpgradeAnswer(
        own_a=own_a,
        own_b=own_b,
        cloud_a=_cheapest_cloud_run(job_on_a, a, cat),
        cloud_b=_cheapest_cloud_run(job_on_b, a, cat),
        time_saved_s=saved,
        speedup=job_on_a.time_to_train_s / job_on_b.time_to_train_s,
        cost_difference_usd_per_run=diff,
        energy_saved_kwh=own_a.energy_kwh - own_b.energy_kwh,
        capex_a_usd=tco_a.capex.total_usd,
        capex_b_usd=tco_b.capex.total_usd,
        opex_per_run_a_usd=opex_a,
        opex_per_run_b_usd=opex_b,
        break_even_runs=runs,
        break_even_runs_if_a_owned=runs_owned,
        break_even_months=months,
        break_even_months_if_a_owned=months_owned,
        runs_per_year=per_year,
        life_years=a.depreciation_years,
        pays_back_within_life=months is not None and months <= life_months,
        pays_back_within_life_if_a_owned=months_owned is not None and months_owned <= life_months,
        usd_per_hour_saved=diff / (saved / 3600) if saved > 0 and diff > 0 else None,
        verdict=_verdict(saved > 0, diff <= 0 and (runs == 0 or (months is not None and months <= life_months))),
        summary="",
    )
    return answer.model_copy(update={"summary": _summary(answer, a, cat)})


def _months(runs: float | None, runs_per_year: float) -> float | None:
    """Calendar months to run ``runs`` jobs back to back at the fleet's utilisation."""
    return runs / runs_per_year * 12 if runs is not None else None


# ------------------------------------------------------------------------------------------- plain words


def _duration(seconds: float) -> str:
    hours = abs(seconds) / 3600
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} h"


def _usd(x: float) -> str:
    """Whole dollars, with cents below $100 (so $0.08 is not shown as $0)."""
    return f"${abs(x):,.2f}" if abs(x) < 100 else f"${abs(x):,.0f}"


def _hardware(run: RunCost, cat: Catalog) -> str:
    return f"{run.num_gpus}x {cat.gpu(run.gpu_id).name}"


def _summary(u: UpgradeAnswer, a: TcoAssumptions, cat: Catalog) -> str:
    name_a, name_b = _hardware(u.own_a, cat), _hardware(u.own_b, cat)
    parts = [_time_sentence(u, name_a, name_b), _own_sentence(u, a), _payback_sentence(u, name_a, name_b)]
    if u.cloud_a and u.cloud_b:
        parts.append(_cloud_sentence(u.cloud_a, u.cloud_b))
    parts.append(_verdict_sentence(u))
    return " ".join(parts)


def _time_sentence(u: UpgradeAnswer, name_a: str, name_b: str) -> str:
    t_a, t_b = _duration(u.own_a.time_to_train_s), _duration(u.own_b.time_to_train_s)
    head = f"On {name_b} this job trains in {t_b} instead of {t_a} on {name_a}"
    if u.time_saved_s > 0:
        return f"{head}: {_duration(u.time_saved_s)} saved per run ({u.speedup:.2f}x faster)."
    return f"{head}: {_duration(u.time_saved_s)} slower per run ({u.speedup:.2f}x)."


def _own_sentence(u: UpgradeAnswer, a: TcoAssumptions) -> str:
    cmp = "less" if u.cost_difference_usd_per_run <= 0 else "more"
    return (
        f"Owned ({a.depreciation_years:g}-year amortisation, {a.utilisation:.0%} utilisation), a run costs "
        f"{_usd(u.own_b.cost_usd)} instead of {_usd(u.own_a.cost_usd)}: {_usd(u.cost_difference_usd_per_run)} "
        f"{cmp} per run, and uses {u.own_b.energy_kwh:,.0f} kWh instead of {u.own_a.energy_kwh:,.0f} kWh."
    )


def _payback_words(runs: float | None, months: float | None, within: bool, life: float) -> str:
    """'pays back after N runs (M months)', or why it does not within the ``life``-year life."""
    if runs is None or months is None:
        return "never pays back on running costs alone (the new option does not cost less to run per run)"
    if within:
        return f"pays back after {runs:,.1f} runs ({months:,.1f} months), within the {life:g}-year life"
    return (
        f"does not pay back within the {life:g}-year life: it would take {runs:,.1f} runs, "
        f"{months / 12:,.1f} years of back-to-back runs"
    )


def _payback_sentence(u: UpgradeAnswer, name_a: str, name_b: str) -> str:
    buy = f"Buying {name_b} instead of {name_a}"
    if u.break_even_runs == 0:
        new = f"{buy} costs no more up front"
    else:
        words = _payback_words(u.break_even_runs, u.break_even_months, u.pays_back_within_life, u.life_years)
        new = f"{buy} {words}"
    owned = _payback_words(
        u.break_even_runs_if_a_owned, u.break_even_months_if_a_owned, u.pays_back_within_life_if_a_owned, u.life_years
    )
    return f"{new}; if you already own the {name_a}, replacing them {owned}."


def _cloud_sentence(cloud_a: RunCost, cloud_b: RunCost) -> str:
    return (
        f"In the cloud (cheapest on-demand offers) a run costs {_usd(cloud_b.cost_usd)} on {cloud_b.label} "
        f"instead of {_usd(cloud_a.cost_usd)} on {cloud_a.label}."
    )


def _verdict_sentence(u: UpgradeAnswer) -> str:
    if u.verdict == "upgrade":
        return "Verdict: move - the new option is faster and cheaper per run."
    if u.verdict == "upgrade-if-time-matters" and u.usd_per_hour_saved is not None:
        return f"Verdict: move if an hour of earlier results is worth more than {_usd(u.usd_per_hour_saved)}."
    if u.verdict == "upgrade-if-time-matters":
        return (
            "Verdict: move if time matters, or if you will keep the new servers busy: amortised over a fully used "
            f"{u.life_years:g}-year life it is cheaper per run, but for the same number of runs its extra cost "
            "does not pay back within that life."
        )
    if u.verdict == "upgrade-if-cost-matters":
        return "Verdict: the new option is cheaper per run but slower; move only if cost matters more than time."
    return "Verdict: stay - the new option is neither faster nor cheaper for this job."
