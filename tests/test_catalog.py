"""The hardware catalog: completeness, sources, unit consistency, lookups and the loader's error messages.

Figures checked against /work/shared/reference/hardware-facts.md (section numbers given per table).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from hardware_catalog import (
    DEFAULT_DATA_DIR,
    Catalog,
    CatalogError,
    Gpu,
    Server,
    Source,
    UnknownCatalogIdError,
    load_catalog,
)
from hardware_catalog.loader import PCIE_X16_GBPS_PER_DIRECTION

MIB = 2**20


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _entries(catalog: Catalog) -> list[tuple[str, object]]:
    """Every sourced entry in the catalog, labelled for test ids."""
    out: list[tuple[str, object]] = []
    out += [(f"gpu:{k}", v) for k, v in catalog.gpus.items()]
    out += [(f"server:{k}", v) for k, v in catalog.servers.items()]
    out += [(f"link:{k}", v) for k, v in catalog.interconnects.items()]
    out += [(f"storage:{k}", v) for k, v in catalog.storage.items()]
    out += [(f"offer:{o.id}", o) for o in catalog.cloud_offers]
    out += [(f"busbw:{m.fabric}/{m.collective}/{m.busbw_gbps}", m) for m in catalog.collective_efficiency]
    return out


# ------------------------------------------------------------------------------------------ completeness

REQUIRED_GPUS = [
    "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-40gb", "a100-pcie-80gb", "h100-sxm5-80gb", "h100-pcie-80gb",
    "h100-nvl-94gb", "h200-sxm-141gb", "h200-nvl-141gb", "b200-sxm-180gb", "l40s-48gb", "mi300x-192gb",
]  # fmt: skip

# (server model prefix, GPU ids it must be offered with) - the issue-4 list
REQUIRED_SERVERS = [
    ("dell-xe9680", {"h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb", "mi300x-192gb"}),
    ("dell-xe8640", {"h100-sxm5-80gb"}),
    ("dell-r760xa", set()),
    ("hpe-dl380a-gen11", set()),
    ("hpe-dl380a-gen12", set()),
    ("hpe-dl380-gen11", set()),
    ("hpe-cray-xd670", {"h100-sxm5-80gb", "h200-sxm-141gb"}),
    ("lenovo-sr680a-v3", set()),
    ("lenovo-sr675-v3", set()),
    ("supermicro-sys-821ge-tnhr", {"h100-sxm5-80gb"}),
    ("nvidia-dgx-a100", {"a100-sxm4-40gb", "a100-sxm4-80gb"}),
    ("nvidia-dgx-h100", {"h100-sxm5-80gb"}),
    ("nvidia-dgx-h200", {"h200-sxm-141gb"}),
    ("nvidia-dgx-b200", {"b200-sxm-180gb"}),
    ("cisco-ucs-c885a-m8", {"h200-sxm-141gb"}),
]


@pytest.mark.parametrize("gpu_id", REQUIRED_GPUS)
def test_required_gpu_is_present(catalog: Catalog, gpu_id: str) -> None:
    assert gpu_id in catalog.gpus


@pytest.mark.parametrize(("prefix", "gpus"), REQUIRED_SERVERS, ids=[p for p, _ in REQUIRED_SERVERS])
def test_required_server_is_present_with_its_gpu_variants(catalog: Catalog, prefix: str, gpus: set[str]) -> None:
    variants = {s.gpu_id for s in catalog.servers.values() if s.id.startswith(prefix)}
    assert variants, f"no server variant of {prefix}"
    assert gpus <= variants


def test_ids_are_unique_across_every_collection(catalog: Catalog) -> None:
    offer_ids = [o.id for o in catalog.cloud_offers]
    assert len(offer_ids) == len(set(offer_ids))
    assert all(k == v.id for k, v in catalog.gpus.items())
    assert all(k == v.id for k, v in catalog.servers.items())


# --------------------------------------------------------------------------------------------- sources


def _sourced_figures(catalog: Catalog) -> list[tuple[str, str, tuple[Source, ...]]]:
    rows = []
    for label, entry in _entries(catalog):
        for name in entry.figures():  # type: ignore[attr-defined]
            rows.append((label, name, entry.sources_for(name)))  # type: ignore[attr-defined]
    return rows


def test_every_figure_has_a_dated_source(catalog: Catalog) -> None:
    rows = _sourced_figures(catalog)
    assert len(rows) > 600
    missing = [(label, name) for label, name, sources in rows if not sources]
    assert not missing
    for _, _, sources in rows:
        assert all(re.fullmatch(r"\d{4}(-\d{2}(-\d{2})?)?", s.date) and len(s.citation) > 10 for s in sources)


def test_every_tco_default_has_unit_source_and_date(catalog: Catalog) -> None:
    for name, default in catalog.tco_defaults.assumptions.items():
        assert default.unit and default.source and default.date, name


@pytest.mark.parametrize(
    ("gpu_id", "field"),
    [
        ("h100-nvl-94gb", "nvlink_gbps_bidir"),  # 600 (Lenovo MLPerf) vs 900 (HPE MLPerf), facts section 6.3
        ("a100-pcie-80gb", "tdp_w"),  # 300 W vs 250 W, section 6.4
        ("b200-sxm-180gb", "memory_gb"),  # 180 vs 192 GB, section 6.2
        ("b200-sxm-180gb", "hbm_bandwidth_gbps"),  # 7.7 vs 8 TB/s
        ("mi300x-192gb", "fp32_tflops"),  # not retrieved, section 6.11
    ],
)
def test_disputed_figures_are_marked_uncertain(catalog: Catalog, gpu_id: str, field: str) -> None:
    assert catalog.gpu(gpu_id).is_uncertain(field)


def test_placeholders_are_flagged_and_say_so(catalog: Catalog) -> None:
    placeholders = [s for s in catalog.servers.values() if s.placeholder]
    assert {s.id for s in placeholders} == {"hpe-dl380a-gen12-h200-nvl", "hpe-dl380-gen11-l40s"}
    for server in placeholders:
        assert "gpu_count" in server.uncertain
        assert any("PLACEHOLDER" in s.citation for s in (*server.sources, *server.sources_for("gpu_count")))


# ----------------------------------------------------------------------------------------------- units


@pytest.mark.parametrize("gpu_id", REQUIRED_GPUS)
def test_gpu_units_are_consistent(catalog: Catalog, gpu_id: str) -> None:
    g = catalog.gpu(gpu_id)
    assert g.bf16_tflops_dense >= g.tf32_tflops_dense >= g.fp32_tflops
    assert g.fp16_tflops_dense == g.bf16_tflops_dense
    assert g.fp8_tflops_dense is None or g.fp8_tflops_dense >= g.bf16_tflops_dense
    assert 0.9 <= g.memory_bytes / (g.memory_gb * 1e9) <= 1.1
    assert 500 <= g.hbm_bandwidth_gbps <= 10_000  # GB/s, not TB/s
    assert 200 <= g.tdp_w <= 1200
    assert g.pcie_gbps_per_direction == PCIE_X16_GBPS_PER_DIRECTION[g.pcie_gen]
    assert (g.nvlink_gen is None) == (g.nvlink_gbps_bidir == 0)
    assert g.memory_bytes % MIB == 0


# nvidia-smi memory.total in MiB (the brief's table; sources in each GPU file)
@pytest.mark.parametrize(
    ("gpu_id", "mib"),
    [
        ("h100-sxm5-80gb", 81559),
        ("h200-sxm-141gb", 143771),  # measured on the project's H200, 2026-12-02
        ("a100-sxm4-80gb", 81920),
        ("a100-sxm4-40gb", 40960),
        ("h100-nvl-94gb", 95830),
        ("b200-sxm-180gb", 183359),
        ("l40s-48gb", 46068),
    ],
)
def test_memory_bytes_is_what_nvidia_smi_reports(catalog: Catalog, gpu_id: str, mib: int) -> None:
    assert catalog.gpu(gpu_id).memory_bytes == mib * MIB


# dense peak TFLOP/s, hardware-facts.md section 1.1 (never the with-sparsity figure)
@pytest.mark.parametrize(
    ("gpu_id", "bf16", "fp8"),
    [
        ("a100-sxm4-80gb", 312, None),
        ("h100-sxm5-80gb", 989.5, 1979),
        ("h100-pcie-80gb", 756, 1513),
        ("h200-sxm-141gb", 989.5, 1979),
        ("b200-sxm-180gb", 2250, 4500),
        # half the sparse figures of NVIDIA's tables: HGX B300 72 PF FP8 over 8 GPUs; GB200 / GB300 NVL72 720 PF
        # FP8 and 360 PF BF16 over 72 GPUs (the rack-scale parts run at 1,200-1,400 W)
        ("b300-sxm-288gb", 2250, 4500),
        ("gb200-186gb", 2500, 5000),
        ("gb300-288gb", 2500, 5000),
        ("l40s-48gb", 362, 733),
        ("mi300x-192gb", 1307.4, 2614.9),
    ],
)
def test_flops_are_the_dense_datasheet_figures(catalog: Catalog, gpu_id: str, bf16: float, fp8: float | None) -> None:
    gpu = catalog.gpu(gpu_id)
    assert (gpu.bf16_tflops_dense, gpu.fp8_tflops_dense) == (bf16, fp8)


def test_servers_reference_existing_gpus_and_fit_their_power(catalog: Catalog) -> None:
    for server in catalog.servers.values():
        gpu = catalog.gpu(server.gpu_id)
        if server.max_power_kw is not None:
            assert server.max_power_kw * 1000 >= server.gpu_count * gpu.tdp_w
        link = max(gpu.scale_up_gbps_bidir, 2 * PCIE_X16_GBPS_PER_DIRECTION[gpu.pcie_gen])
        assert 0 < server.intra_node_gbps_bidir_per_gpu <= link, server.id
        if server.gpu_fabric == "nvswitch":  # an 8-GPU board, or a tray of a rack-wide NVSwitch domain (NVL72)
            assert server.gpu_count == 8 or server.scale_up_gpus > server.gpu_count, server.id
            assert gpu.nvlink_gen is not None


def test_every_figure_is_non_negative(catalog: Catalog) -> None:
    for label, entry in _entries(catalog):
        negatives = {k: v for k, v in entry.figures().items() if v < 0}  # type: ignore[attr-defined]
        assert not negatives, label


def test_cloud_prices_per_gpu_match_the_instance_price(catalog: Catalog) -> None:
    for offer in catalog.cloud_offers:
        if offer.on_demand_usd_per_instance_hour and offer.on_demand_usd_per_gpu_hour:
            per_gpu = offer.on_demand_usd_per_instance_hour / offer.gpus_per_instance
            assert per_gpu == pytest.approx(offer.on_demand_usd_per_gpu_hour, rel=0.01), offer.id
        if offer.reserved_usd_per_gpu_hour and offer.on_demand_usd_per_gpu_hour:
            assert offer.reserved_usd_per_gpu_hour <= offer.on_demand_usd_per_gpu_hour


# ---------------------------------------------------------------------------------------------- lookups


@pytest.mark.parametrize(
    ("fabric", "collective", "busbw"),
    [
        ("nvswitch-h100", "all_reduce", 476),  # nccl-tests#290, maintainer-confirmed
        ("nvswitch-h100", "all_gather", 370),  # nccl-tests#212, ring / non-allreduce
        ("nvswitch-h200", "all_reduce", 475),  # nccl-tests#272
        ("nvswitch-a100", "all_reduce", 208),  # nccl-tests#178
        ("nvlink-bridge-h100-pcie", "all_reduce", 116),  # nccl#1161
        ("ib-hdr-4x-per-node", "all_reduce", 84.8),  # nccl-tests#119
    ],
)
def test_busbw_returns_the_representative_measurement(
    catalog: Catalog, fabric: str, collective: str, busbw: float
) -> None:
    assert catalog.busbw_gbps(fabric, collective) == busbw


@pytest.mark.parametrize(
    ("server_id", "fabric"),
    [("nvidia-dgx-h100", "nvswitch-h100"), ("nvidia-dgx-a100-640gb", "nvswitch-a100"), ("dell-r760xa-l40s", None)],
)
def test_fabric_for_a_server(catalog: Catalog, server_id: str, fabric: str | None) -> None:
    assert catalog.fabric_for(server_id) == fabric


@pytest.mark.parametrize(
    ("call", "suggestion"),
    [
        (lambda c: c.gpu("h100"), "h100-sxm5-80gb"),
        (lambda c: c.server("dell-xe9680"), "dell-xe9680-h100"),
        (lambda c: c.busbw_gbps("nvswitch-h100", "all_to_all"), "nvswitch-h100/all_reduce"),
        (lambda c: c.cloud_offer("aws-p5"), "aws-p5-48xlarge"),
    ],
)
def test_unknown_ids_raise_a_key_error_listing_close_matches(catalog: Catalog, call, suggestion: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnknownCatalogIdError) as info:
        call(catalog)
    assert isinstance(info.value, KeyError)
    assert suggestion in str(info.value) and "close matches" in str(info.value)


def test_offers_for_a_gpu_are_cheapest_first(catalog: Catalog) -> None:
    offers = catalog.offers_for("h100-sxm5-80gb")
    prices = [o.on_demand_usd_per_gpu_hour for o in offers if o.on_demand_usd_per_gpu_hour is not None]
    assert len(prices) >= 5 and prices == sorted(prices)
    assert offers[-1].on_demand_usd_per_gpu_hour is None  # reserved-only last


def test_models_round_trip_through_json_for_database_seeding(catalog: Catalog) -> None:
    for model, items in ((Gpu, catalog.gpus.values()), (Server, catalog.servers.values())):
        for item in items:
            assert model.model_validate(item.model_dump(mode="json")) == item


# --------------------------------------------------------------------------------------------- version


def test_default_catalog_is_cached_and_versioned(catalog: Catalog) -> None:
    assert load_catalog() is catalog
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}\.[0-9a-f]{12}", catalog.version)


def _copy_data(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(DEFAULT_DATA_DIR, target)
    return target


def test_version_changes_with_the_data(tmp_path: Path, catalog: Catalog) -> None:
    data = _copy_data(tmp_path)
    assert load_catalog(data).version == catalog.version
    path = data / "gpus" / "h100-sxm5-80gb.yaml"
    path.write_text(path.read_text().replace("tdp_w: 700", "tdp_w: 690"))
    changed = load_catalog(data)
    assert changed.version != catalog.version and changed.gpu("h100-sxm5-80gb").tdp_w == 690


# ------------------------------------------------------------------------------------ malformed files


def _edit_yaml(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _drop(key: str):  # type: ignore[no-untyped-def]
    return lambda d: d.pop(key)


def _set(key: str, value: object):  # type: ignore[no-untyped-def]
    return lambda d: d.__setitem__(key, value)


def _duplicate_first_offer(d: dict) -> None:  # type: ignore[type-arg]
    d["offers"].append(dict(d["offers"][0]))


MALFORMED = [
    ("missing source", "gpus/h100-sxm5-80gb.yaml", _drop("sources"), "sources"),
    ("empty sources", "gpus/h100-sxm5-80gb.yaml", _set("sources", []), "sources"),
    ("source without date", "gpus/h100-sxm5-80gb.yaml", _set("sources", [{"citation": "a datasheet"}]), "date"),
    ("unknown gpu_id", "servers/nvidia-dgx-h100.yaml", _set("gpu_id", "h100-sxm9"), "unknown GPU id 'h100-sxm9'"),
    ("duplicate id", "cloud_offers.yaml", _duplicate_first_offer, "duplicate id 'aws-p4d-24xlarge'"),
    ("memory in GiB", "gpus/h100-sxm5-80gb.yaml", _set("memory_bytes", 80), "memory_bytes"),
    ("bandwidth in TB/s", "gpus/h100-sxm5-80gb.yaml", _set("hbm_bandwidth_gbps", 3.35), "not in GB/s"),
    ("sparse FLOP/s", "gpus/h100-sxm5-80gb.yaml", _set("tf32_tflops_dense", 1979), "fp32 <= tf32 <= bf16"),
    ("power in W", "servers/nvidia-dgx-h100.yaml", _set("max_power_kw", 10200 / 1e6), "max_power_kw"),
    ("uncertain unknown field", "gpus/l40s-48gb.yaml", _set("uncertain", ["tdp"]), "do not exist"),
    ("unknown field", "gpus/l40s-48gb.yaml", _set("tdp_watts", 350), "tdp_watts"),
    ("id is not the file name", "gpus/l40s-48gb.yaml", _set("id", "l40s"), "does not match the file name"),
    ("offer without price", "cloud_offers.yaml", lambda d: d["offers"][2].pop("on_demand_usd_per_gpu_hour"), "price"),
    ("tco default without source", "tco_defaults.yaml", lambda d: d["assumptions"]["pue"].pop("source"), "source"),
]


@pytest.mark.parametrize(("relpath", "edit", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_loader_rejects_a_malformed_file_naming_it(tmp_path: Path, relpath: str, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    data = _copy_data(tmp_path)
    _edit_yaml(data / relpath, edit)
    with pytest.raises(CatalogError) as info:
        load_catalog(data)
    assert isinstance(info.value, ValueError)
    assert relpath.split("/")[-1] in str(info.value) and message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [("id: a\nid: b\n", "duplicate key 'id'"), ("id: [unclosed\n", "not valid YAML"), ("- a list\n", "mapping")],
)
def test_loader_rejects_broken_yaml(tmp_path: Path, text: str, message: str) -> None:
    data = _copy_data(tmp_path)
    (data / "gpus" / "l40s-48gb.yaml").write_text(text)
    with pytest.raises(CatalogError, match=re.escape(message)):
        load_catalog(data)


def test_loader_reports_a_missing_file(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)
    (data / "storage.yaml").unlink()
    with pytest.raises(CatalogError, match=r"storage\.yaml: file is missing"):
        load_catalog(data)


def test_an_fp4_figure_without_an_fp8_one_is_accepted(catalog: Catalog) -> None:
    """Regression (schemathesis on POST /catalog/gpus): fp4 given with fp8 null compared a float with None (500)."""
    data = catalog.gpu("h100-sxm5-80gb").model_dump()
    data.update(id="custom-no-fp8", fp8_tflops_dense=None, fp4_tflops_dense=3000.0)
    assert Gpu.model_validate(data).fp4_tflops_dense == 3000.0


# ------------------------------------------------------------------------------------ B200, GPU SKU power


def test_dgx_b200_follows_the_nvidia_user_guide(catalog: Catalog) -> None:
    s = catalog.server("nvidia-dgx-b200")  # DGX B200 user guide: 10U, 14.3 kW, 2x Xeon 8570 (56 cores), 2 TB
    assert (s.gpu_count, s.rack_units, s.max_power_kw, s.cores_per_cpu, s.ram_gib_configured) == (8, 10, 14.3, 56,
                                                                                                   2048)
    assert any("docs.nvidia.com/dgx/dgxb200-user-guide" in (src.url or "") for src in s.sources)
    assert s.is_uncertain("price_usd") and s.sources_for("price_usd")


def test_b200_has_a_marked_uncertain_price_and_cloud_offers(catalog: Catalog) -> None:
    gpu = catalog.gpu("b200-sxm-180gb")
    assert (gpu.price_usd_low, gpu.price_usd_high) == (30_000, 40_000)
    assert gpu.is_uncertain("price_usd_low") and gpu.sources_for("price_usd_low")
    offers = catalog.offers_for("b200-sxm-180gb")
    assert [o.id for o in offers] == ["spheron-b200", "aws-p6-b200-48xlarge"]  # cheapest on-demand first
    assert all(o.date and o.sources for o in offers)


@pytest.mark.parametrize(
    ("gpu_id", "low", "high", "source"),
    [
        # Amazon street-price history in United-Compute/gpu-price-tracker: $34,749.95 (2023-12..2024-08) down to
        # $25,249.95 (2025-07); a 2023 news item quotes $30,000 for the PCIe H100
        ("h100-pcie-80gb", 25_249.95, 34_749.95, "gpu-price-tracker"),
        # datastorage.com: 'On-premise Module ~$7k-$10k'; chipversus.com: 'MSRP $7500'
        ("l40s-48gb", 7_000, 10_000, "datastorage.com"),
    ],
)
def test_pcie_gpus_carry_a_sourced_uncertain_price_range(
    catalog: Catalog, gpu_id: str, low: float, high: float, source: str
) -> None:
    gpu = catalog.gpu(gpu_id)
    assert (gpu.price_usd_low, gpu.price_usd_high) == (low, high) and gpu.price_date
    for field in ("price_usd_low", "price_usd_high"):
        sources = gpu.sources_for(field)
        assert len(sources) >= 2 and any(source in (s.url or "") for s in sources)
        assert all(s.date and s.url for s in sources)
        assert gpu.is_uncertain(field)  # street prices and estimates, not an NVIDIA list price
    assert low < (gpu.price_usd_mid or 0) < high


@pytest.mark.parametrize("gpu_id", ["h100-nvl-94gb", "h200-nvl-141gb"])
def test_gpus_without_a_sourced_price_have_none(catalog: Catalog, gpu_id: str) -> None:
    # no NVL-specific purchase price in the shared reference nor a usable public source: left empty
    # (docs/tco.md says so); an H100 or H200 SXM price is not taken for the NVL card
    gpu = catalog.gpu(gpu_id)
    assert gpu.price_usd_low is None and gpu.price_usd_high is None


def test_the_xe9680_a100_uses_dells_500_w_sku(catalog: Catalog) -> None:
    s = catalog.server("dell-xe9680-a100")  # hardware-facts.md section 3 (XE9680 row) and 6.4
    assert s.gpu_tdp_w == 500 and catalog.gpu(s.gpu_id).tdp_w == 400
    assert s.is_uncertain("gpu_tdp_w") and s.sources_for("gpu_tdp_w")
    assert all(x.gpu_tdp_w is None for x in catalog.servers.values() if x.id != "dell-xe9680-a100")
