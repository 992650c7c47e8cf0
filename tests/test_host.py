"""Whole-node sizing (estimator.host.sizing, issue #8): RAM, storage, network and power, table-driven where possible."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from test_host_support import catalog

from estimator.errors import InvalidRequestError
from estimator.host.network import inter_node_traffic
from estimator.host.ram import BREAKDOWN_KEYS, host_ram
from estimator.host.sizing import NicConfig, host_result, host_sizing, recommend_dimms, recommend_nics
from estimator.host_options import GIB, HostOptions, host_defaults
from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest, Hardware, Parallelism, Training
from estimator.response import HostResult
from estimator.training.checkpoint import checkpoint_size
from estimator.training.layout import build_layout
from estimator.training.tensors import local_tensors, pow2ceil
from hardware_catalog import load_catalog


def make(model: str = "llama-3.1-8b", *, gpu: str = "h100-sxm5-80gb", server: str | None = "nvidia-dgx-h100",
         nodes: int = 1, gpus: int = 8, **kw: Any) -> tuple[EstimateRequest, ModelShape, Any]:
    training = {k: v for k, v in kw.items() if k in Training.model_fields}
    parallel = {k: v for k, v in kw.items() if k in Parallelism.model_fields}
    req = EstimateRequest(model=model, training=Training(**training), parallelism=Parallelism(**parallel),
                          hardware=Hardware(gpu=gpu, server=server, num_nodes=nodes, gpus_per_node=gpus))
    shape = ModelShape(resolve_model(req.model))
    return req, shape, build_layout(job_of(req), shape)


def sizing(req: EstimateRequest, shape: ModelShape, layout: Any, options: HostOptions | None = None,
           time: Any = None) -> Any:
    cat = catalog()
    server = cat.servers.get(req.hardware.server) if req.hardware.server else None
    return host_sizing(job_of(req), shape, layout, cat.gpus[req.hardware.gpu], server, cat, time=time, options=options)


# ------------------------------------------------------------------------------------------------------ RAM
def test_every_defaults_figure_has_a_source() -> None:
    d = host_defaults()
    for section, items in d.values.items():
        for key in items:
            assert len(d.source(section, key)) > 10, f"{section}.{key}"


def test_breakdown_adds_up_to_the_node_total() -> None:
    req, shape, layout = make(sharding="fsdp", offload="optimizer+params")
    s = sizing(req, shape, layout)
    assert set(s.ram.node_items) == set(BREAKDOWN_KEYS)
    assert sum(s.ram.node_items.values()) == s.ram.per_node
    result = host_result(job_of(req), shape, layout, catalog().gpus[req.hardware.gpu],
                         catalog().servers["nvidia-dgx-h100"], catalog())
    assert isinstance(result, HostResult)
    assert sum(result.ram_breakdown_bytes.values()) == result.ram_bytes_per_node


def test_fsdp2_offload_holds_16_bytes_per_parameter_plus_rounding() -> None:
    """ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840): fp32 params, grads and Adam m, v on the host =
    16 bytes per parameter, sharded over the ranks; PyTorch's pinned allocator adds power-of-two rounding."""
    req, shape, layout = make(sharding="fsdp", offload="optimizer+params", optimizer_impl="fused")
    job = job_of(req)
    ram = host_ram(job, shape, layout, checkpoint_size(job, shape, layout), HostOptions(model_loading="meta"))
    states = sum(ram.node_items[k] for k in ("offloaded_parameters", "offloaded_gradients",
                                             "offloaded_optimizer_states"))
    assert states == pytest.approx(16 * shape.total_params(), rel=0.002)  # padding of dim-0 shards only
    exact_rounding = 0
    for x in local_tensors(job_of(req), shape, layout, "only"):
        n = x.shard_numel(8)
        exact_rounding += 2 * (pow2ceil(4 * n) - 4 * n) * x.count
    assert ram.node_items["pinned_rounding"] == 8 * exact_rounding


def test_deepspeed_offload_follows_its_own_estimator() -> None:
    """deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs (zero_init, 1 node):
    cpu_mem = total_params x 18 x 1.5 with parameter offload, x 16 x 1.5 with optimizer offload only."""
    for offload, per_param in (("optimizer+params", 18), ("optimizer", 16)):
        req, shape, layout = make(sharding="zero3", offload=offload, framework="deepspeed")
        job = job_of(req)
        ram = host_ram(job, shape, layout, checkpoint_size(job, shape, layout), HostOptions(model_loading="meta"))
        keys = ("offloaded_parameters", "offloaded_gradients", "offloaded_optimizer_states",
                "cpu_optimizer_temporary")
        assert sum(ram.node_items[k] for k in keys) == pytest.approx(shape.total_params() * per_param * 1.5,
                                                                     rel=0.002)


@pytest.mark.parametrize(("impl", "expect"), [("fused", 0), ("for-loop", "2 x largest"), ("foreach", "all")])
def test_cpu_optimizer_temporaries(impl: str, expect: Any) -> None:
    req, shape, layout = make(sharding="fsdp", offload="optimizer+params", optimizer_impl=impl)
    job = job_of(req)
    ram = host_ram(job, shape, layout, checkpoint_size(job, shape, layout), HostOptions(model_loading="meta"))
    per_process = ram.busiest_process.items["cpu_optimizer_temporary"]
    largest = max(x.shard_numel(8) for x in local_tensors(job_of(req), shape, layout, "only"))
    if expect == 0:
        assert per_process == 0
    elif expect == "2 x largest":
        assert per_process == 2 * 4 * largest
    else:
        assert per_process == pytest.approx(4 * shape.total_params() / 8, rel=0.002)


def test_no_offload_needs_little_host_ram_but_loading_on_every_rank_does() -> None:
    req, shape, layout = make("llama-3.1-70b", sharding="fsdp", method="lora")
    meta = sizing(req, shape, layout, HostOptions(model_loading="meta")).ram
    rank0 = sizing(req, shape, layout, HostOptions(model_loading="rank0")).ram
    every = sizing(req, shape, layout, HostOptions(model_loading="every-rank")).ram
    assert meta.per_node < 128 * GIB
    assert rank0.node_phase == "load"
    assert rank0.load_phase_node_bytes - meta.load_phase_node_bytes == pytest.approx(2 * shape.total_params(),
                                                                                     rel=0.01)
    assert every.per_node > 8 * 2 * shape.total_params()  # 8 processes x bf16 70B


def test_async_checkpoint_stages_a_pinned_copy_of_each_shard() -> None:
    req, shape, layout = make(sharding="fsdp")
    sync = sizing(req, shape, layout, HostOptions(async_checkpoint=False, model_loading="meta")).ram
    asyn = sizing(req, shape, layout, HostOptions(async_checkpoint=True, model_loading="meta")).ram
    ckpt = checkpoint_size(job_of(req), shape, layout)
    assert asyn.per_node - sync.per_node == 8 * ckpt.per_rank_bytes


def test_ram_against_the_server_and_dimms() -> None:
    req, shape, layout = make("llama-3.1-70b", gpu="a100-sxm4-80gb", server="dell-xe9680-a100",
                              sharding="fsdp", offload="optimizer+params", activation_checkpointing="full")
    s = sizing(req, shape, layout)
    assert s.dimms is not None and s.dimms.total_gib * GIB >= s.ram.per_node * 1.1
    assert s.dimms.total_gib <= 4096 and s.dimms.count in (16, 32)
    big, bshape, blayout = make("llama-3.1-405b", gpu="a100-sxm4-80gb", server="nvidia-dgx-a100-640gb",
                                sharding="fsdp", offload="optimizer+params", activation_checkpointing="full")
    s2 = sizing(big, bshape, blayout)
    assert not s2.fits_server and any("Host RAM" in w for w in s2.warnings)


@pytest.mark.parametrize(("need_gib", "expect"), [(100, (16, 32)), (700, (16, 64)), (1100, (16, 96)),
                                                  (1500, (16, 96)), (3000, (32, 96))])
def test_dimm_recommendation_is_the_smallest_common_configuration(need_gib: int, expect: tuple[int, int]) -> None:
    server = SimpleNamespace(dimm_slots=32, max_ram_gib=4096)
    d = recommend_dimms(int(need_gib / 1.1 * GIB), server)
    assert d is not None and (d.count, d.size_gib) == expect


# ------------------------------------------------------------------------------------------------ storage
def test_checkpoint_write_bandwidth_for_a_5_percent_share() -> None:
    req, shape, layout = make("llama-3.1-70b", gpu="h100-sxm5-80gb", server="nvidia-dgx-h100", sharding="fsdp",
                              offload="optimizer+params", train_tokens=1e10)
    s = sizing(req, shape, layout)
    per_node = s.checkpoint.per_node_bytes
    assert s.checkpoint_write_bytes_per_s_needed == pytest.approx(per_node / (0.05 * 3600))
    kept = host_defaults().num("checkpoint", "keep")
    assert s.nvme_bytes >= kept * per_node + s.dataset_bytes
    assert s.dataset_bytes == 4 * 10**10  # 128k vocabulary: int32 tokens (Megatron indexed_dataset)
    assert s.nvme is not None and s.nvme.count * s.nvme.write_bytes_per_s_each >= s.checkpoint_write_bytes_per_s_needed


def test_multi_node_writes_checkpoints_to_shared_storage_in_parallel() -> None:
    req, shape, layout = make("llama-3.1-70b", nodes=4, sharding="fsdp")
    s = sizing(req, shape, layout)
    assert s.checkpoint_target == "shared"
    assert s.checkpoint.per_node_bytes == pytest.approx(s.checkpoint.total_bytes / 4, rel=0.01)


# ------------------------------------------------------------------------------------------------ network
def test_single_node_needs_no_fabric() -> None:
    req, shape, layout = make(sharding="fsdp")
    s = sizing(req, shape, layout)
    assert s.network.bytes_per_step_per_node == 0 and s.nics is None
    assert "Single node" in s.fabric


def test_ddp_across_nodes_moves_2_n_minus_1_over_n_gradients() -> None:
    """nccl-tests PERFORMANCE.md: all-reduce busbw factor 2(n-1)/n; hierarchically, per node, of the whole
    fp32 gradient buffer of one replica."""
    req, shape, layout = make("llama-3.2-1b", nodes=4, sharding="none")
    traffic = inter_node_traffic(job_of(req), shape, layout)
    assert traffic.bytes_per_step_per_node == pytest.approx(2 * 4 * shape.total_params() * 3 / 4, rel=1e-6)


def test_fsdp_across_nodes_gathers_twice_and_reduce_scatters_per_micro_batch() -> None:
    req, shape, layout = make("llama-3.1-8b", nodes=2, sharding="fsdp", gradient_accumulation_steps=4)
    traffic = inter_node_traffic(job_of(req), shape, layout)
    p = shape.total_params()
    want = 4 * (2 * 2 * p + 4 * p) * 1 / 2  # m x (2 bf16 all-gathers + 1 fp32 reduce-scatter) x (N-1)/N
    assert traffic.bytes_per_step_per_node == pytest.approx(want, rel=1e-6)


def test_hsdp_keeps_sharding_inside_the_node() -> None:
    req, shape, layout = make("llama-3.1-8b", nodes=2, sharding="hsdp")
    traffic = inter_node_traffic(job_of(req), shape, layout)
    assert set(traffic.by_kind) == {"gradient all-reduce across replicas"}
    assert traffic.bytes_per_step_per_node == pytest.approx(2 * 4 * shape.total_params() / 2, rel=1e-6)


def test_nic_recommendation_and_fabric_notes() -> None:
    assert recommend_nics(1500, 8, pcie_gen=5) == NicConfig(4, 400)  # ties: fewer switch ports
    assert recommend_nics(700, 8, pcie_gen=5) == NicConfig(2, 400)
    assert recommend_nics(3000, 8, pcie_gen=5) == NicConfig(8, 400)
    assert recommend_nics(3000, 8, pcie_gen=4) is None  # 200G at most per Gen4 slot
    assert recommend_nics(5000, 8, pcie_gen=6) == NicConfig(8, 800)
    req, shape, layout = make("llama-3.1-70b", nodes=2, tp=16, sharding="zero1")
    s = sizing(req, shape, layout)
    assert "InfiniBand NDR" in s.fabric and s.network.latency_sensitive
    assert any("Tensor parallelism spans nodes" in w for w in s.warnings)


def test_uses_the_step_time_model_when_given() -> None:
    req, shape, layout = make("llama-3.1-8b", nodes=2, sharding="fsdp")
    fake = SimpleNamespace(step_time_s=2.0, compute_s=1.5, tokens_per_s=16384.0)
    s = sizing(req, shape, layout, time=fake)
    assert s.step_time_source == "step-time model"
    assert s.network_bytes_per_s_needed == pytest.approx(s.network.bytes_per_step_per_node / (1.5 * 0.5))
    assert s.dataset_read_bytes_per_s == pytest.approx(16384.0 / 2 * 4)


# -------------------------------------------------------------------------------------------------- power
def test_power_of_a_dgx_h100_and_rack_density() -> None:
    """DGX H100: 10.2 kW max; 4 per 40.8 kW rack (hardware-facts.md §3, §5); 1 W = 3.412 BTU/h."""
    req, shape, layout = make(sharding="fsdp")
    s = sizing(req, shape, layout, HostOptions(rack_kw_budget=40.8))
    assert s.power_w_peak == pytest.approx(10200)
    assert s.btu_per_h == pytest.approx(10200 * 3.412)
    assert s.nodes_per_rack == 4
    assert s.power_w_average == pytest.approx(0.75 * 10200)


def test_power_without_a_catalog_figure_scales_gpu_tdp() -> None:
    req, shape, layout = make(gpu="h100-sxm5-80gb", server=None, sharding="fsdp")
    s = sizing(req, shape, layout)
    assert s.power_w_peak == pytest.approx(8 * 700 * 1.82)
    # the default budget is the catalog's one rack_kw (40.8 kW), not a second figure of the host defaults
    rack_w = float(load_catalog().tco_defaults.value("rack_kw")) * 1000
    assert s.nodes_per_rack == math.floor(rack_w / (8 * 700 * 1.82))


def test_options_are_validated() -> None:
    with pytest.raises(InvalidRequestError):
        HostOptions(checkpoint_max_time_share=1.5)
    with pytest.raises(InvalidRequestError):
        HostOptions(checkpoints_kept=0)


# ---------------------------------------------------------------------------------- RAM limits (audit fixes)
def test_unknown_server_maximum_uses_the_default_ceiling_and_warns() -> None:
    """Most of the catalog's servers publish no RAM maximum: the 4 TiB ceiling (32x 128 GB) applies, with a
    warning; past it the node does not fit (it used to 'fit' whatever the need)."""
    req, shape, layout = make("llama-3.1-70b", gpu="l40s-48gb", server="dell-r760xa-l40s", gpus=4,
                              sharding="fsdp", offload="optimizer+params", activation_checkpointing="full")
    s = sizing(req, shape, layout)
    assert s.fits_server and s.server_max_ram_bytes is None
    assert any("no RAM maximum" in w and "4,096 GiB" in w for w in s.warnings)
    big, bshape, blayout = make("llama-3.1-405b", gpu="l40s-48gb", server="dell-r760xa-l40s", gpus=4,
                                sharding="fsdp", offload="optimizer+params", activation_checkpointing="full")
    s2 = sizing(big, bshape, blayout)
    assert s2.ram.per_node > 4096 * GIB and not s2.fits_server
    assert any("more than it can hold" in w and "default ceiling" in w for w in s2.warnings)
    none, nshape, nlayout = make("llama-3.1-405b", gpu="l40s-48gb", server=None, gpus=4, sharding="fsdp",
                                 offload="optimizer+params", activation_checkpointing="full")
    assert not sizing(none, nshape, nlayout).fits_server


def test_ddr4_dgx_a100_is_a_fixed_configuration() -> None:
    """DGX A100 640 GB: 2x EPYC 7742 (DDR4), 2 TB as shipped (configured = maximum)."""
    req, shape, layout = make("llama-3.1-8b", gpu="a100-sxm4-80gb", server="nvidia-dgx-a100-640gb",
                              sharding="fsdp", offload="optimizer+params")
    s = sizing(req, shape, layout)
    assert s.dimms is not None and s.dimms.fixed and s.dimms.memory_type == "DDR4"
    assert s.dimms.total_gib == 2048 and "DDR4" in str(s.dimms) and "DDR5" not in str(s.dimms)


def test_nccl_host_memory_on_one_node_too() -> None:
    """NCCL keeps each communicator's work FIFO in pinned host memory on one node too (and SHM buffers where
    P2P is missing); the network proxy buffers come on top only across nodes."""
    d = host_defaults()
    single = make("llama-3.1-8b", sharding="fsdp")
    one_gpu = make("llama-3.1-8b", gpus=1)
    multi = make("llama-3.1-8b", sharding="fsdp", nodes=2)
    opts = HostOptions(model_loading="meta")

    def nccl(case: tuple[Any, ...]) -> int:
        req, shape, layout = case
        job = job_of(req)
        return host_ram(job, shape, layout, checkpoint_size(job, shape, layout), opts).busiest_process.items["nccl"]

    assert nccl(one_gpu) == 0
    assert nccl(single) == int(d.num("ram", "nccl_host_gib_single_node") * GIB) > 0
    assert nccl(multi) == int(d.num("ram", "nccl_host_gib") * GIB) > nccl(single)


def test_the_request_host_object_reaches_the_sizing() -> None:
    """``host`` in the request contract: validated, defaults from host_defaults.yaml, used by estimate()."""
    from pydantic import ValidationError

    from estimator import estimate
    from estimator.host_options import HostInput

    assert HostInput().checkpoints_kept == int(host_defaults().num("checkpoint", "keep"))
    base = {"model": "llama-3.1-8b", "training": {"train_tokens": 1e10},
            "hardware": {"gpu": "h100-sxm5-80gb", "server": "nvidia-dgx-h100"}}
    plain = estimate(EstimateRequest.model_validate(base), catalog())
    more = estimate(EstimateRequest.model_validate({**base, "host": {"checkpoints_kept": 6, "rack_kw_budget": 11,
                                                                     "dataset_bytes": 10**12}}), catalog())
    assert plain.host is not None and more.host is not None
    ckpt = plain.host.checkpoint_bytes_per_node
    assert more.host.nvme_bytes - plain.host.nvme_bytes == pytest.approx(
        4 * ckpt + 10**12 - plain.host.dataset_bytes, rel=1e-9)
    assert more.host.nodes_per_rack == 1 and plain.host.nodes_per_rack > 1
    for bad in ({"checkpoints_kept": 0}, {"checkpoint_interval_s": 1e-300}, {"rack_kw_budget": -1},
                {"model_loading": "lazy"}, {"kept": 2}):
        with pytest.raises(ValidationError):
            EstimateRequest.model_validate({**base, "host": bad})


def test_local_tensors_are_shared_only_where_they_are_equal() -> None:
    """``local_tensors`` is memoised on the tensor and expert degrees and the layers per stage, not the whole
    layout: for layouts that differ in node count, sharding, pipeline split, tensor or expert degree, each answer
    from the memo is the one computed afresh for that very layout."""
    from estimator.memo import clear_all
    from estimator.model.spec import shape_for
    from estimator.training.layout import build_layout
    from estimator.training.tensors import _local_tensors_uncached, local_tensors, stages

    clear_all()
    cases = [("llama-3.1-70b", {"sharding": sh, "tp": tp, "pp": pp}, nodes, method)
             for sh in ("zero1", "zero3") for tp, pp in ((1, 1), (8, 1), (4, 2), (8, 4)) for nodes in (4, 8, 16)
             for method in ("full", "lora")]
    cases += [("mixtral-8x7b", {"sharding": "zero1", "tp": 2, "ep": ep}, 2, "full") for ep in (1, 2, 4)]
    for model, par, nodes, method in cases:
        req = EstimateRequest.model_validate({"model": model, "training": {"method": method},
                                              "parallelism": par, "hardware": {"num_nodes": nodes}})
        shape = shape_for(req.model)
        job = job_of(req)
        layout = build_layout(job, shape)
        for stage in stages(layout):
            assert local_tensors(job, shape, layout, stage) == _local_tensors_uncached(job, shape, layout, stage)


def test_a_rack_too_small_for_one_node_is_a_note_or_a_field_error_never_a_crash() -> None:
    """A multi-node estimate whose ``host.rack_kw_budget`` cannot hold one node: the cluster design used to raise a
    bare ValueError (``racks_needed``), a 500 from POST /api/v1/plans found by the contract test; now the fabric is
    left out with the reason in the assumptions, and a request that named the fabric gets a 422 naming the field."""
    from estimator import estimate
    from estimator.errors import InvalidRequestError

    base = {"model": "llama-3.1-8b", "training": {"train_tokens": 1e10},
            "hardware": {"gpu": "h100-sxm5-80gb", "server": "nvidia-dgx-h100", "num_nodes": 2},
            "host": {"rack_kw_budget": 2}}
    r = estimate(EstimateRequest.model_validate(base), catalog())
    assert r.fabric is None
    assert any("does not fit a 2 kW rack" in a for a in r.assumptions), r.assumptions
    with pytest.raises(InvalidRequestError) as exc:
        estimate(EstimateRequest.model_validate({**base, "cluster": {"fabric": "ib-ndr"}}), catalog())
    assert exc.value.field == "host.rack_kw_budget"
