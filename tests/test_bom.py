"""Bill of materials (estimator.host.bom, issue #8): servers, RAM, NVMe, NICs and switches, priced from the catalog."""

from __future__ import annotations

from typing import Any

import pytest
from test_host_support import catalog

from estimator.host.bom import bill_of_materials, choose_server, switch_counts
from estimator.host.sizing import host_result, host_sizing
from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest, Hardware, Parallelism, Training
from estimator.training.layout import build_layout

KEYS = {"item", "sku", "quantity", "unit_price_usd", "source"}


def setup(server: str | None, nodes: int, gpu: str = "h100-sxm5-80gb", **par: Any) -> tuple[Any, ...]:
    req = EstimateRequest(model="llama-3.1-70b", training=Training(train_tokens=1e10),
                          parallelism=Parallelism(**par),
                          hardware=Hardware(gpu=gpu, server=server, num_nodes=nodes, gpus_per_node=8))
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    cat = catalog()
    srv = cat.servers.get(server) if server else None
    return req, shape, layout, cat.gpus[gpu], srv, cat


def by_sku(items: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(i["sku"]): i for i in items}


def test_single_node_priced_server_no_fabric() -> None:
    req, shape, layout, gpu, srv, cat = setup("nvidia-dgx-h100", 1, sharding="fsdp", offload="optimizer+params")
    host = host_result(job_of(req), shape, layout, gpu, srv, cat)
    items = bill_of_materials(job_of(req), layout, srv, cat, host)
    assert all(set(i) == KEYS for i in items)
    skus = by_sku(items)
    assert skus["nvidia-dgx-h100"]["quantity"] == 1
    assert skus["nvidia-dgx-h100"]["unit_price_usd"] == srv.price_usd
    assert "catalog" in str(skus["nvidia-dgx-h100"]["source"])
    # a DGX ships with its 2 TB: no separate, unpriced DIMM line; the server line says what RAM it carries
    assert not any("rdimm" in str(i["sku"]) for i in items)
    assert "2,048 GiB DDR5 system memory" in str(skus["nvidia-dgx-h100"]["item"])
    assert host.recommended_ram_gib == 2048 and "fixed configuration" in host.recommended_dimms
    assert not any(str(i["sku"]).startswith(("switch", "nic")) for i in items)


def test_configurable_server_gets_a_dimm_line_of_its_memory_type() -> None:
    req, shape, layout, gpu, srv, cat = setup("dell-xe9680-h100", 1, sharding="fsdp", offload="optimizer+params")
    host = host_result(job_of(req), shape, layout, gpu, srv, cat)
    ram = next(i for i in bill_of_materials(job_of(req), layout, srv, cat, host) if "rdimm" in str(i["sku"]))
    assert str(ram["sku"]).startswith("ddr5-rdimm-") and ram["unit_price_usd"] is None
    size = int(str(ram["sku"]).split("-")[-1].removesuffix("gb"))
    assert int(str(ram["quantity"])) * size == host.recommended_ram_gib
    assert host.recommended_ram_gib * 2**30 >= host.ram_bytes_per_node


def test_ddr4_server_gets_ddr4_dimms() -> None:
    """DGX A100 runs AMD EPYC 7742 (DDR4): as a configurable chassis its DIMMs are DDR4 and never 96 GB (a
    DDR5-only, 24 Gb-die size)."""
    req, shape, layout, gpu, srv, cat = setup("nvidia-dgx-a100-640gb", 1, gpu="a100-sxm4-80gb", sharding="fsdp",
                                             offload="optimizer+params")
    assert srv is not None and srv.memory_type == "DDR4"
    open_chassis = srv.model_copy(update={"ram_gib_configured": None})
    sizing = host_sizing(job_of(req), shape, layout, gpu, open_chassis, cat)
    assert sizing.dimms is not None and sizing.dimms.memory_type == "DDR4" and sizing.dimms.size_gib != 96
    items = bill_of_materials(job_of(req), layout, open_chassis, cat, sizing)
    assert any(str(i["sku"]).startswith("ddr4-rdimm-") for i in items)


@pytest.mark.parametrize(("ports", "leaves", "spines"), [(0, 0, 0), (16, 1, 0), (64, 1, 0), (65, 3, 2),
                                                          (128, 4, 2), (1024, 32, 16)])
def test_switch_counts_two_tier_fat_tree(ports: int, leaves: int, spines: int) -> None:
    assert switch_counts(ports) == (leaves, spines)


def test_multi_node_lists_nics_switches_and_cables() -> None:
    req, shape, layout, gpu, srv, cat = setup("nvidia-dgx-h100", 16, sharding="fsdp")
    sizing = host_sizing(job_of(req), shape, layout, gpu, srv, cat)
    items = bill_of_materials(job_of(req), layout, srv, cat, sizing)
    skus = by_sku(items)
    assert sizing.nics is not None
    nic = skus[f"nic-{sizing.nics.gbps}g"]
    assert nic["quantity"] == 16 * sizing.nics.count
    leaves, spines = switch_counts(16 * sizing.nics.count)
    switches = [i for i in items if str(i["sku"]).startswith("switch")]
    assert sum(int(str(i["quantity"])) for i in switches) == leaves + spines
    assert skus["nvidia-dgx-h100"]["quantity"] == 16
    # the response's host block gives the same configuration as the full sizing
    host = host_result(job_of(req), shape, layout, gpu, srv, cat)
    assert by_sku(bill_of_materials(job_of(req), layout, srv, cat, host)).keys() == skus.keys()


def test_without_a_server_suggests_one_that_carries_the_gpu() -> None:
    req, shape, layout, gpu, _, cat = setup(None, 1, sharding="fsdp")
    chosen = choose_server(job_of(req), None, gpu, cat)
    assert chosen is not None and chosen.gpu_id == gpu.id and chosen.gpu_count >= 8
    job = job_of(req)
    items = bill_of_materials(job, layout, None, cat, host_sizing(job, shape, layout, gpu, chosen, cat), gpu=gpu)
    assert items[0]["sku"] == chosen.id and "suggested" in str(items[0]["item"])


def test_unpriced_items_say_so() -> None:
    req, shape, layout, gpu, srv, cat = setup("dell-xe9680-h100", 2, sharding="fsdp")
    items = bill_of_materials(job_of(req), layout, srv, cat, host_sizing(job_of(req), shape, layout, gpu, srv, cat))
    for i in items:
        if i["unit_price_usd"] is None:
            assert "price" in str(i["source"]) or "catalog" in str(i["source"]) or "QM9700" in str(i["source"])
