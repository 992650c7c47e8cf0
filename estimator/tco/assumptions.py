"""TCO assumptions: every one editable, each default sourced in ``hardware_catalog/data/tco_defaults.yaml``,
and the shared constants and base models of :mod:`estimator.tco`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from estimator.facility.rack import default_rack_kw
from hardware_catalog import Catalog, load_catalog

__all__ = [
    "HOURS_PER_MONTH",
    "HOURS_PER_YEAR",
    "MAX_CHART_MONTHS",
    "AssumptionRow",
    "CloudPricing",
    "NetworkFabric",
    "OptionKind",
    "TcoAssumptions",
    "Verdict",
    "assumption_table",
    "resolve_inputs",
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
    rack_kw: float = Field(default_factory=lambda: default_rack_kw(), ge=0.5, le=1000)

    @property
    def networking_usd_per_node(self) -> float:
        """The networking price of the chosen fabric (InfiniBand NDR or RoCE)."""
        if self.network_fabric == "roce":
            return self.networking_usd_per_node_roce
        return self.networking_usd_per_node_ib_ndr

    def networking_override(self, fabric: NetworkFabric | None = None) -> float | None:
        """The user's own networking figure for ``fabric`` (default: ``network_fabric``), when they set it (it is in
        pydantic's ``model_fields_set``: given to the constructor, the form or ``model_copy(update=...)``); ``None``
        when it is the catalog default. The one rule for "an explicit figure wins over a designed fabric"
        (:func:`estimator.tco.network.owned_network`)."""
        kind = fabric or self.network_fabric
        name = "networking_usd_per_node_roce" if kind == "roce" else "networking_usd_per_node_ib_ndr"
        return float(getattr(self, name)) if name in self.model_fields_set else None

    def networking_for(self, fabric: NetworkFabric | None = None) -> float:
        """The flat networking figure of ``fabric`` (default: ``network_fabric``)."""
        kind = fabric or self.network_fabric
        return self.networking_usd_per_node_roce if kind == "roce" else self.networking_usd_per_node_ib_ndr


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


def resolve_inputs(assumptions: TcoAssumptions | None, catalog: Catalog | None) -> tuple[TcoAssumptions, Catalog]:
    """The assumptions and catalog to use: those given, else the catalog defaults and the packaged catalog."""
    return assumptions or TcoAssumptions(), catalog or load_catalog()
