"""One cost basis for every page, API response and quote: what one GPU-hour of this hardware costs, and why.

A basis is either

* **own**: the server's purchase price amortised over its depreciation life, plus power (at PUE and $/kWh),
  colocation, maintenance and staff, per *useful* GPU-hour at a stated utilisation -- exactly
  :func:`estimator.tco.ownership_tco` on the server's catalog entry (the TCO page prices the same run the same
  way, :func:`estimator.tco.job_cost_owned`); or
* **rent**: one named cloud offer (provider, on-demand / reserved, region, source, date and confidence).

The default follows the request (:func:`choose_basis`): a chosen server means *own*; no server means *rent*
from the cloud offers of one provider class (hyperscalers unless asked otherwise), the same class for every
GPU so that a comparison is like for like. AWS capacity blocks are short reservations bought in advance, not
on-demand capacity, so they never stand in for an on-demand price. An option that can only be priced another
way (a server with no purchase price and no GPU price to estimate it from, a GPU no offer of the class rents)
is priced the other way with a flag saying so, never silently. A low-confidence price (a figure the catalog
marks uncertain, a price taken from secondary sources only, a server price estimated from its GPUs) carries
``confidence="low"`` into every total it feeds.

Pure: catalog objects are read by attribute, no web, database or plotting imports. Compiled (issue 19); its
pydantic models live in :mod:`estimator.tco.run_cost_models` (plain Python, as pydantic models are) and are imported
from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from estimator.construct import trusted
from estimator.errors import InvalidRequestError, UnknownHardwareError
from estimator.memo import BoundedMemo, ObjectMemo, field_values
from estimator.messages import Text
from estimator.tco import ownership_tco
from estimator.tco.offers import (
    HYPERSCALERS,
    Confidence,
    Pricing,
    ProviderClass,
    age_confidence,
    offer_confidence,
    price_field,
    provider_class,
)
from estimator.tco.run_cost_models import Basis, CostBasis, CostChoice, CostResult

if TYPE_CHECKING:
    from estimator.request import ClusterChoice
    from hardware_catalog import Catalog, Server

__all__ = [
    "HYPERSCALERS",
    "CostBasis",
    "CostChoice",
    "CostResult",
    "choose_basis",
    "cost_of_run",
    "offer_confidence",
    "provider_class",
]

# ------------------------------------------------------------------------------------------------ offers


def _offer_rate(offer: Any, pricing: Pricing) -> float | None:
    if pricing == "reserved":
        value = getattr(offer, "reserved_usd_per_gpu_hour", None)
    elif pricing == "spot":
        value = getattr(offer, "spot_usd_per_gpu_hour", None)
    elif getattr(offer, "offer_kind", "on-demand") == "on-demand":
        value = getattr(offer, "on_demand_usd_per_gpu_hour", None)
    else:
        value = None
    return float(value) if value else None


def _offers(catalog: Catalog, gpu_id: str, pricing: Pricing, klass: ProviderClass | None) -> list[Any]:
    found = [
        o
        for o in catalog.cloud_offers
        if o.gpu_id == gpu_id
        and _offer_rate(o, pricing) is not None
        and (klass is None or provider_class(o.provider) == klass)
    ]
    return sorted(found, key=lambda o: (_offer_rate(o, pricing), o.id))


def _an(pricing: str) -> str:
    return f"an {pricing}" if pricing[0] in "aeiou" else f"a {pricing}"


def _pricing_words(pricing: Pricing) -> str:
    return {"on-demand": "on-demand", "reserved": "reserved (committed term)", "spot": "spot"}[pricing]


def _rent_basis(offer: Any, pricing: Pricing, catalog: Catalog, flags: list[str]) -> CostBasis:
    rate = _offer_rate(offer, pricing)
    assert rate is not None
    region = getattr(offer, "region", None)
    where = f", {region}" if region else ""
    sources = getattr(offer, "sources_for", lambda _f: offer.sources)(price_field(pricing))
    cites = "; ".join(str(getattr(s, "citation", s)) for s in sources[:2])
    klass = provider_class(offer.provider)
    return trusted(CostBasis,
        basis="rent",
        usd_per_gpu_hour=rate,
        label=f"{offer.provider} {offer.instance} ({pricing}{where})",
        source=cites or f"{offer.provider} price list",
        date=offer.date,
        confidence=offer_confidence(offer, pricing, catalog),
        pricing=pricing,
        provider=offer.provider,
        provider_class=klass,
        region=region,
        offer_id=offer.id,
        priced_another_way=bool(flags),
        assumptions=[
            f"Rented from {offer.provider} ({klass}) at its {_pricing_words(pricing)} price of "
            f"${rate:,.2f} per GPU-hour ({offer.date}); billed for the run's own hours.",
        ],
        flags=flags,
    )


# ------------------------------------------------------------------------------------------------- own


def _cheapest_server(catalog: Catalog, gpu_id: str) -> Server | None:
    servers = sorted((s for s in catalog.servers.values() if s.gpu_id == gpu_id), key=lambda s: s.id)
    priced = sorted((s for s in servers if s.price_usd), key=lambda s: (float(s.price_usd or 0.0) / s.gpu_count, s.id))
    pool = priced or servers
    return pool[0] if pool else None


def _own_basis(
    server: Server, num_nodes: int, gpus_per_node: int, choice: CostChoice, catalog: Catalog, flags: list[str],
    cluster: ClusterChoice | None = None,
) -> CostBasis:
    a = choice.tco_assumptions()
    gpn = min(gpus_per_node, server.gpu_count)
    own = ownership_tco(server.id, num_nodes, a, catalog, gpn, cluster=cluster)
    uncertain = "price_usd" in tuple(getattr(server, "uncertain", ()) or ())
    if own.server_price_estimated or uncertain:
        confidence: Confidence = "low"
    else:
        confidence = age_confidence(server.price_date, False, catalog)
    price = "estimated from its GPUs" if own.server_price_estimated else f"catalog price ({server.price_date})"
    o = own.opex_per_year
    return trusted(CostBasis,
        basis="own",
        usd_per_gpu_hour=own.usd_per_gpu_hour,
        label=f"owned {server.name}",
        source=f"{server.name}: {price} ${own.server_price_usd:,.0f}; {own.server_price_source}",
        date=server.price_date,
        confidence=confidence,
        pricing="owned",
        server_id=server.id,
        utilisation=a.utilisation,
        networking_usd_per_node=own.networking_usd_per_node if num_nodes > 1 else None,
        priced_another_way=bool(flags),
        assumptions=[
            f"Owned: ${own.capex.total_usd:,.0f} of capex amortised over {a.depreciation_years:g} years, plus "
            f"${o.total_usd:,.0f} a year of power ({a.pue:g} PUE at ${a.electricity_usd_per_kwh:g}/kWh), "
            f"colocation (${a.colocation_usd_per_kw_month:g}/kW/month), maintenance "
            f"({a.maintenance_pct_per_year:g}% a year) and staff, per useful GPU-hour at "
            f"{a.utilisation:.0%} utilisation.",
            *([own.networking_note] if own.networking_note else []),
        ],
        flags=flags,
    )


# -------------------------------------------------------------------------------------------- the choice


def _gpu_name(catalog: Catalog, gpu_id: str) -> str:
    gpu = catalog.gpus.get(gpu_id)
    return str(gpu.name) if gpu is not None else gpu_id


def _named_offer(catalog: Catalog, gpu_id: str, choice: CostChoice) -> CostBasis:
    offer = next((o for o in catalog.cloud_offers if o.id == choice.offer_id), None)
    if offer is None:
        raise UnknownHardwareError(
            f"unknown cloud offer {choice.offer_id!r}; GET /api/v1/catalog/cloud-offers lists them", "cost.offer_id"
        )
    if offer.gpu_id != gpu_id:
        raise InvalidRequestError(
            f"offer {offer.id} rents the {_gpu_name(catalog, offer.gpu_id)}, not the {_gpu_name(catalog, gpu_id)}",
            "cost.offer_id",
        )
    if _offer_rate(offer, choice.pricing) is None:
        raise InvalidRequestError(f"offer {offer.id} has no {choice.pricing} price", "cost.pricing")
    return _rent_basis(offer, choice.pricing, catalog, [])


def _rent(catalog: Catalog, gpu_id: str, choice: CostChoice, flags: list[str]) -> CostBasis | None:
    name = _gpu_name(catalog, gpu_id)
    offers = _offers(catalog, gpu_id, choice.pricing, choice.provider_class)
    if offers:
        return _rent_basis(offers[0], choice.pricing, catalog, flags)
    others = _offers(catalog, gpu_id, choice.pricing, None)
    if others:
        other = provider_class(others[0].provider)
        flag = (
            f"No {choice.provider_class} offer in the catalog rents the {name} at {_an(choice.pricing)} price: "
            f"priced from a {other} offer instead, not like for like."
        )
        return _rent_basis(others[0], choice.pricing, catalog, [*flags, flag])
    return None


def _own(
    catalog: Catalog, server: Server, num_nodes: int, gpus_per_node: int, choice: CostChoice, flags: list[str],
    cluster: ClusterChoice | None = None,
) -> CostBasis | None:
    try:
        return _own_basis(server, num_nodes, gpus_per_node, choice, catalog, flags, cluster)
    except (InvalidRequestError, AttributeError):  # no price to own it by, or a catalog without TCO data
        return None


_BASES: Final[BoundedMemo[tuple[Any, ...], tuple[CostBasis | None, tuple[str, ...]]]] = BoundedMemo(4096)


def choose_basis(
    catalog: Catalog,
    gpu_id: str,
    server_id: str | None,
    num_nodes: int = 1,
    gpus_per_node: int = 8,
    choice: CostChoice | None = None,
    strict: bool = False,
    cluster: ClusterChoice | None = None,
) -> tuple[CostBasis | None, list[str]]:
    """The cost basis of one hardware option, and the notes of what could not be priced.

    ``auto``: own with a server, else rent. ``own`` without a server takes the cheapest server carrying the GPU
    (as the planner does). When the chosen way has no price, the other way is used with a flag; ``None`` when
    there is no price either way (the notes say so plainly). ``strict`` (the planner, which ranks by cost): no
    other way, ``None`` instead, so that one ranking never mixes owned and rented prices. Memoised per catalog
    (its identity and version: an override makes a new effective catalog) and arguments. An owned multi-node
    basis prices its network with :func:`estimator.tco.network.owned_network` (the fabric designed for the server
    and node count, on ``cluster``'s choice when given), through :func:`estimator.tco.ownership_tco`.
    """
    key = (
        id(catalog),
        str(getattr(catalog, "version", "")),
        gpu_id,
        server_id,
        num_nodes,
        gpus_per_node,
        None if choice is None else field_values(choice),
        strict,
        None if cluster is None else field_values(cluster),
    )
    found = _BASES.get(key)
    if found is None:
        basis, notes = _choose_basis(catalog, gpu_id, server_id, num_nodes, gpus_per_node, choice, strict, cluster)
        found = _BASES.remember(key, (basis, tuple(notes)))
    return found[0], list(found[1])


def _choose_basis(
    catalog: Catalog,
    gpu_id: str,
    server_id: str | None,
    num_nodes: int,
    gpus_per_node: int,
    choice: CostChoice | None,
    strict: bool,
    cluster: ClusterChoice | None = None,
) -> tuple[CostBasis | None, list[str]]:
    c = choice or CostChoice()
    if c.offer_id is not None:
        return _named_offer(catalog, gpu_id, c), []
    server = catalog.servers.get(server_id) if server_id else None
    want: Basis = "own" if c.basis == "own" or (c.basis == "auto" and server is not None) else "rent"
    if want == "own" and server is None:
        server = _cheapest_server(catalog, gpu_id)
    name = _gpu_name(catalog, gpu_id)
    if want == "own":
        basis = _own(catalog, server, num_nodes, gpus_per_node, c, [], cluster) if server is not None else None
        if basis is not None:
            return basis, []
        why = (
            f"No purchase price for {server.name if server is not None else 'a server with the ' + name} or its "
            f"GPU ({name}) in the catalog"
        )
        if strict:
            return None, [f"{why}: not priced."]
        rented = _rent(catalog, gpu_id, c, [f"{why}: priced as rent instead, not as owned."])
        return rented, [] if rented is not None else [f"{why}, and no cloud offer rents it: no cost shown."]
    rented = _rent(catalog, gpu_id, c, [])
    if rented is not None:
        return rented, []
    fallback = _cheapest_server(catalog, gpu_id) if server is None else server
    why = f"No cloud offer in the catalog rents the {name} at {_an(c.pricing)} price"
    if strict:
        return None, [f"{why}: not priced."]
    owned = (
        _own(catalog, fallback, num_nodes, gpus_per_node, c, [f"{why}: priced as owned instead, not as rent."],
             cluster)
        if fallback is not None
        else None
    )
    return owned, [] if owned is not None else [f"{why}, and it has no purchase price: no cost shown."]


def cost_of_run(basis: CostBasis, gpu_hours: float | None, fits: bool = True) -> CostResult:
    """The basis and the run's total (rate x GPU-hours); no total for a setup that does not fit."""
    total = basis.usd_per_gpu_hour * gpu_hours if gpu_hours is not None and fits else None
    flags = list(basis.flags)
    if not fits:
        flags.append(Text("Does not fit in GPU memory: no time or cost for this setup (see the suggestions)."))
    if basis.confidence == "low":
        flags.append(Text("Low-confidence price (%(label)s): treat the total as indicative.", label=basis.label))
    return trusted(CostResult,
        **{**_dumped(basis), "flags": flags},
        gpu_hours=gpu_hours if fits else None,
        total_usd=total,
    )


_DUMPS: Final[ObjectMemo[dict[str, Any]]] = ObjectMemo(1024)


def _dumped(basis: CostBasis) -> dict[str, Any]:
    """``basis.model_dump()``, memoised per basis object (:func:`choose_basis` memoises the bases); the result
    validates its own copies of the lists."""
    return _DUMPS.get_or_compute((basis,), (), basis.model_dump)
