"""The cost formulas of :mod:`estimator.tco`: power, ownership (capex, opex, cost per useful GPU-hour), cloud
rental, break-even, and the cost of one training run owned or rented."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec

from estimator.errors import InvalidRequestError, UnknownHardwareError
from estimator.facility.rack import node_average_power_w, node_power_at_load_w, resolve_server
from estimator.messages import Money, Num, Text
from estimator.tco.assumptions import (
    HOURS_PER_MONTH,
    HOURS_PER_YEAR,
    MAX_CHART_MONTHS,
    CloudPricing,
    OptionKind,
    TcoAssumptions,
    resolve_inputs,
)
from estimator.tco.offers import ProviderClass, offer_confidence, provider_class
from estimator.tco.results import (
    CapexBreakdown,
    CumulativeCost,
    JobCost,
    OpexBreakdown,
    OwnershipTco,
    OwnVsCloud,
    RunCost,
    TcoOption,
)
from hardware_catalog import Catalog, CloudOffer, Gpu, Server, UnknownCatalogIdError

if TYPE_CHECKING:
    from estimator.request import ClusterChoice
    from estimator.tco.network import OwnedNetwork

__all__ = [
    "NoCloudOfferError",
    "annual_opex",
    "break_even_month",
    "capex",
    "cloud_cost_usd",
    "cloud_offers_for",
    "cloud_tco",
    "compare_job",
    "cumulative_costs",
    "job_cost_cloud",
    "job_cost_owned",
    "offer_name",
    "own_vs_cloud",
    "own_vs_cloud_headline",
    "own_vs_cloud_or_note",
    "ownership_tco",
    "ownership_tco_option",
    "power_cost_usd",
    "server_price",
    "tco_options",
]

P = ParamSpec("P")

# The public names are listed once, in estimator/tco/__init__.py.

# ------------------------------------------------------------------------------------------------- power


def power_cost_usd(it_kw: float, hours: float, pue: float, usd_per_kwh: float) -> float:
    """Electricity bill: IT kW x PUE (facility overhead, Uptime Institute definition) x hours x $/kWh."""
    return it_kw * pue * hours * usd_per_kwh


def cloud_cost_usd(usd_per_gpu_hour: float, num_gpus: int, hours: float) -> float:
    """Cloud bill: $/GPU-hour x GPUs x hours (per-GPU price = instance price / GPUs per instance)."""
    return usd_per_gpu_hour * num_gpus * hours


# --------------------------------------------------------------------------------------------- ownership


def server_price(server: Server, gpu: Gpu, a: TcoAssumptions, override: float | None = None) -> tuple[float, bool, str]:
    """(price, estimated?, source) of one server: the override, the catalog price, or an estimate.

    Estimate: GPU price midpoint x GPU count x server_cost_vs_gpu_price (Epoch training-cost-trends
    hardware.py: a server costs ~1.64x its GPUs).
    """
    if override is not None:
        return override, False, Text("price override")
    if server.price_usd is not None:
        return server.price_usd, False, Text("catalog (%(date)s)", date=server.price_date)
    if gpu.price_usd_mid is None:
        raise InvalidRequestError(
            f"{server.name} has no price and {gpu.name} has none to estimate it from; pass server_price_usd",
            "server_price_usd",
        )
    estimate = gpu.price_usd_mid * server.gpu_count * a.server_cost_vs_gpu_price
    return (
        estimate,
        True,
        Text("estimated: %(gpu)s %(price)s x %(count)s x %(ratio)s", gpu=gpu.name, price=Money(gpu.price_usd_mid),
             count=server.gpu_count, ratio=a.server_cost_vs_gpu_price),
    )


def capex(server_price_usd: float, num_nodes: int, a: TcoAssumptions,
          networking_usd_per_node: float | None = None) -> CapexBreakdown:
    """Capex = servers x nodes + networking per node x nodes (only when nodes > 1) + storage TB x $/TB.
    ``networking_usd_per_node``: the cluster network's figure (:func:`estimator.tco.network.owned_network`); ``None``:
    the flat assumption."""
    servers = server_price_usd * num_nodes
    per_node = a.networking_usd_per_node if networking_usd_per_node is None else networking_usd_per_node
    networking = per_node * num_nodes if num_nodes > 1 else 0.0
    storage = a.storage_tb * a.storage_usd_per_tb
    return CapexBreakdown(
        servers_usd=servers, networking_usd=networking, storage_usd=storage, total_usd=servers + networking + storage
    )


def annual_opex(average_kw: float, load_kw: float, capex_usd: float, a: TcoAssumptions,
                network_kw: float = 0.0) -> OpexBreakdown:
    """Yearly opex: power (the nodes' average kW, plus the cluster network's ``network_kw`` all year, x PUE x
    8760 h x $/kWh), colocation (load kW x $/kW/month x 12, CBRE), maintenance (% x capex) and staff. The network's
    power enters the power bill only, as ``/cluster``'s TCO has always added it (not colocation)."""
    network = network_kw * HOURS_PER_YEAR * a.pue * a.electricity_usd_per_kwh  # /cluster's order: its figures unchanged
    power = power_cost_usd(average_kw, HOURS_PER_YEAR, a.pue, a.electricity_usd_per_kwh) + network
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
        network_power_kw=network_kw,
        network_power_usd=network,
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
    cluster: ClusterChoice | None = None,
    network: OwnedNetwork | None = None,
) -> OwnershipTco:
    """N-year TCO of owning ``num_nodes`` servers (N = ``horizon_years``) and the cost per useful GPU-hour.

    The cluster network (capex and its power) is ``network`` when given (``/cluster`` passes the fabric it has just
    designed), else :func:`estimator.tco.network.owned_network` for this server, node count, assumptions and
    ``cluster`` choice: the designed fabric, the user's explicit figure, or the flat assumption."""
    from estimator.tco.network import owned_network

    a, cat = resolve_inputs(assumptions, catalog)
    server, gpu = resolve_server(cat, server_id)
    per_node = _gpus_per_node(server, gpus_per_node)
    price, estimated, price_source = server_price(server, gpu, a, server_price_usd)
    net = network if network is not None else owned_network(cat, server.id, num_nodes, a, cluster)
    cap = capex(price, num_nodes, a, net.usd_per_node)
    load_kw = node_power_at_load_w(gpu, per_node, a.server_non_gpu_power_w, server) * num_nodes / 1000
    avg_kw = node_average_power_w(gpu, per_node, a.utilisation, a.server_non_gpu_power_w, server) * num_nodes / 1000
    opex = annual_opex(avg_kw, load_kw, cap.total_usd, a, net.power_w / 1000)
    own = _ownership(server, gpu, num_nodes * per_node, num_nodes, (price, estimated, price_source), cap, opex, a)
    if num_nodes <= 1:
        return own
    return own.model_copy(update={"networking_usd_per_node": net.usd_per_node, "networking_fabric": net.fabric,
                                  "networking_note": net.note})


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
        label=label or Text("own %(nodes)sx %(server)s", nodes=t.num_nodes, server=t.server_name),
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


def _offer_label(offer: CloudOffer, pricing: CloudPricing) -> str:
    """ "AWS p5.48xlarge (on-demand)": the pricing once (not again when the instance name has it), and a
    capacity block called one."""
    kind = "capacity block" if pricing == "on-demand" and offer.offer_kind == "capacity-block" else pricing
    name = f"{offer.provider} {offer.instance}"
    return name if f"({kind})" in offer.instance or kind in offer.instance.lower() else f"{name} ({kind})"


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
        label=_offer_label(offer, p),
        kind=_cloud_kind(offer, p),
        years=a.horizon_years,
        cloud_usd=cost,
        total_usd=cost,
    )


def _priced_offers(catalog: Catalog, gpu_id: str, pricing: CloudPricing) -> list[CloudOffer]:
    return [o for o in catalog.offers_for(gpu_id) if _offer_price(o, pricing) is not None]


def tco_options(
    own: OwnershipTco, assumptions: TcoAssumptions | None = None, catalog: Catalog | None = None
) -> list[TcoOption]:
    """The owned option (an :func:`ownership_tco`) and every cloud offer for the same GPU and GPU count, over
    ``horizon_years``."""
    a, cat = resolve_inputs(assumptions, catalog)
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


def _not_capacity_blocks(offers: list[CloudOffer]) -> list[CloudOffer]:
    """Capacity blocks are reservations bought ahead, not on-demand capacity: the default comparison takes them
    only when the GPU has nothing else (issue 16: the H200 was priced at the $5.41 p5e block "on-demand")."""
    return [o for o in offers if o.offer_kind != "capacity-block"] or offers


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


class NoCloudOfferError(InvalidRequestError):
    """No cloud offer in the catalog rents this GPU at the chosen pricing; ``note`` says so in plain words."""

    def __init__(self, message: str, field: str | None, note: str) -> None:
        super().__init__(message, field)
        self.note = note


def _cheapest_offer(catalog: Catalog, gpu: Gpu, pricing: CloudPricing, offer_id: str | None) -> CloudOffer:
    if offer_id is not None:
        return _chosen_offer(catalog, gpu.id, pricing, offer_id)
    offers = _not_capacity_blocks(cloud_offers_for(catalog, gpu.id, pricing))
    if not offers:
        note = Text("No cloud offer in the catalog rents the %(gpu)s at a %(pricing)s price, so owning is not set "
                    "against renting (no break-even month); add an offer to the catalog to compare.", gpu=gpu.name,
                    pricing=pricing)
        raise NoCloudOfferError(f"no cloud offer with a {pricing} price for {gpu.id}", "offer_id", note)
    return offers[0]


def own_vs_cloud(
    own: OwnershipTco,
    offer_id: str | None = None,
    assumptions: TcoAssumptions | None = None,
    catalog: Catalog | None = None,
) -> OwnVsCloud:
    """Owning (an :func:`ownership_tco`) versus renting the same GPUs (the cheapest offer unless ``offer_id``):
    monthly costs, cumulative spend and the break-even month."""
    a, cat = resolve_inputs(assumptions, catalog)
    offer = _cheapest_offer(cat, cat.gpu(own.gpu_id), a.cloud_pricing, offer_id)
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


def _or_note(compare: Callable[P, OwnVsCloud]) -> Callable[P, tuple[OwnVsCloud | None, str | None]]:
    def or_note(*args: P.args, **kwargs: P.kwargs) -> tuple[OwnVsCloud | None, str | None]:
        try:
            return compare(*args, **kwargs), None
        except NoCloudOfferError as exc:
            return None, exc.note

    or_note.__doc__ = (
        ":func:`own_vs_cloud`, or ``(None, why)`` when no cloud offer rents this GPU at the chosen pricing (an "
        "MI300X or B200 server without offers still gets its ownership TCO). A bad ``offer_id`` is still an error."
    )
    return or_note


#: :func:`own_vs_cloud` with the same arguments, or ``(None, why)`` when no offer rents the GPU.
own_vs_cloud_or_note = _or_note(own_vs_cloud)


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
    a, cat = resolve_inputs(assumptions, catalog)
    server, gpu = resolve_server(cat, job.server_id)
    _check_job(job, server)
    own = ownership_tco(job.server_id, job.num_nodes, a, cat, job.gpus_per_node, job.server_price_usd)
    label = job.label or Text("own %(nodes)sx %(server)s", nodes=job.num_nodes, server=server.name)
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
        confidence="low" if own.server_price_estimated or server.is_uncertain("price_usd") else None,
    )


def job_cost_cloud(
    job: JobCost,
    offer: CloudOffer,
    pricing: CloudPricing = "on-demand",
    assumptions: TcoAssumptions | None = None,
    catalog: Catalog | None = None,
) -> RunCost:
    """Cost of one run on a cloud offer: $/GPU-hour x GPUs x hours (the run's own hours only)."""
    a, cat = resolve_inputs(assumptions, catalog)
    price = _offer_price(offer, pricing)
    if price is None or offer.gpu_id != job.gpu_id:
        raise InvalidRequestError(f"offer {offer.id} has no {pricing} price for {job.gpu_id}", "offer_id")
    gpu = cat.gpu(job.gpu_id)
    return _run(
        job,
        gpu,
        a,
        label=_offer_label(offer, pricing),
        kind=_cloud_kind(offer, pricing),
        server_id=None,
        offer_id=offer.id,
        provider=offer.provider,
        cost_usd=cloud_cost_usd(price, job.num_gpus, job.hours),
        usd_per_gpu_hour=price,
        price_date=offer.date,
        confidence=offer_confidence(offer, pricing, cat),
    )


def compare_job(
    job: JobCost, assumptions: TcoAssumptions | None = None, catalog: Catalog | None = None
) -> list[RunCost]:
    """The run owned and on every cloud offer for its GPU, on-demand and reserved, cheapest first."""
    a, cat = resolve_inputs(assumptions, catalog)
    runs = [job_cost_owned(job, a, cat)]
    for pricing in ("on-demand", "reserved"):
        runs += [job_cost_cloud(job, o, pricing, a, cat) for o in _priced_offers(cat, job.gpu_id, pricing)]
    return sorted(runs, key=lambda r: r.cost_usd)


def _cheapest_cloud_run(
    job: JobCost, a: TcoAssumptions, cat: Catalog, klass: ProviderClass | None = None
) -> RunCost | None:
    """The cheapest on-demand run of the job's GPU, of one provider class (``None``: any class)."""
    offers = _not_capacity_blocks(_priced_offers(cat, job.gpu_id, "on-demand"))
    runs = [job_cost_cloud(job, o, "on-demand", a, cat) for o in offers
            if klass is None or provider_class(o.provider) == klass]
    return min(runs, key=lambda r: r.cost_usd) if runs else None


# -------------------------------------------------------------------------------------------- the headline


def _span(months: float) -> Text:
    years = months / 12
    if years == 1:
        return Text("1 year")
    return Text("%(n)s years", n=Num(years, "g")) if years.is_integer() else Text("%(n)s months", n=Num(months, "g"))


def offer_name(offer: CloudOffer, pricing: CloudPricing) -> str:
    """An offer for people: provider, instance and pricing, once ("AWS p5.48xlarge (on-demand)")."""
    return _offer_label(offer, pricing)


def own_vs_cloud_headline(ov: OwnVsCloud, offer: str, utilisation: float, horizon_years: float) -> str:
    """The answer inside the horizon, in display names: which is cheaper over the horizon at this utilisation,
    and when (if ever) owning breaks even. ``offer`` is the offer's display name (:func:`offer_name`)."""
    months = round(horizon_years * 12)
    words = dict(span=_span(months), server=ov.ownership.server_name, pct=Num(utilisation, ".0%"), offer=offer)
    month = ov.cumulative.break_even_month
    if month is None:
        return Text("Renting %(offer)s is cheaper than owning %(server)s at %(pct)s utilisation: owning never breaks "
                    "even.", **words)
    if month <= months:
        return Text("Owning %(server)s is cheaper over %(span)s at %(pct)s utilisation: it breaks even with renting "
                    "%(offer)s after %(month)s months.", month=month, **words)
    return Text("Renting %(offer)s is cheaper over %(span)s at %(pct)s utilisation; owning %(server)s breaks even "
                "only after %(month)s months.", month=month, **words)
