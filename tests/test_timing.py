"""Behaviour of the step-time model (estimator.training.timing) and the training totals (estimator.training.train).

Directional checks with their sources: the pipeline bubble ``(p-1)/(m v)`` (Narayanan et al. 2021, Sec. 2.2),
recomputation adds a forward (Korthikanti et al. 2022), TP collectives are exposed, DDP/FSDP communication
is hidden behind compute when compute is long enough; plus the interface contract (speed, purity, every
catalog GPU and server), and time-to-train arithmetic.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import pytest

from estimator.estimate import estimate
from estimator.host.sizing import host_sizing
from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.response import TimeResult
from estimator.training.accuracy import accuracy_table, time_kind_measured
from estimator.training.checkpoint import checkpoint_target
from estimator.training.layout import build_layout
from estimator.training.timing import host_issue_ratio, step_time, step_time_model
from estimator.training.train import train_result, train_warnings
from hardware_catalog import Catalog, load_catalog


@cache
def catalog() -> Catalog:
    return load_catalog()


def _req(model: Any = "llama-3.1-8b", gpu: str = "h100-sxm5-80gb", server: str | None = None, nodes: int = 1,
         gpus: int = 8, **kw: Any) -> EstimateRequest:
    training = {"micro_batch_size": 1, "seq_len": 4096, **kw.pop("training", {})}
    parallelism = {"sharding": "fsdp", **kw.pop("parallelism", {})}
    return EstimateRequest.model_validate({
        "model": model, "training": training, "parallelism": parallelism,
        "hardware": {"gpu": gpu, "server": server, "num_nodes": nodes, "gpus_per_node": gpus}})


def _time(req: EstimateRequest) -> TimeResult:
    c = catalog()
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    server = c.servers[req.hardware.server] if req.hardware.server else None
    return step_time(job_of(req), shape, layout, c.gpus[req.hardware.gpu], server, c)


def test_parts_add_up_to_the_step() -> None:
    t = _time(_req(training={"gradient_accumulation_steps": 4}, parallelism={"sharding": "none", "tp": 2,
                                                                          "pp": 2}))
    total = t.compute_s + t.bubble_s + t.exposed_communication_s + t.optimizer_s + t.offload_s
    assert t.step_time_s == pytest.approx(total)
    assert 0 < t.mfu < 1 and t.exposed_communication_s <= t.communication_s + 1e-12


def test_throughput_fields_are_consistent() -> None:
    req = _req(training={"micro_batch_size": 2, "gradient_accumulation_steps": 3})
    t = _time(req)
    tokens = 2 * 4096 * 3 * 8
    assert t.tokens_per_s == pytest.approx(tokens / t.step_time_s)
    assert t.tokens_per_s_per_gpu == pytest.approx(t.tokens_per_s / 8)
    peak = catalog().gpus["h100-sxm5-80gb"].bf16_tflops_dense * 1e12
    assert t.mfu == pytest.approx(t.flops_per_step / (t.step_time_s * 8 * peak))


@pytest.mark.parametrize(("m", "v"), [(4, 1), (8, 1), (16, 1), (8, 2), (8, 4)])
def test_pipeline_bubble_is_p_minus_1_over_m_v(m: int, v: int) -> None:
    req = _req(training={"gradient_accumulation_steps": m, "virtual_stages": v, "pipeline_schedule":
                         "interleaved" if v > 1 else "1f1b"}, parallelism={"sharding": "none", "pp": 4})
    t = _time(req)
    per_mb = (t.breakdown_s["forward_s"] + t.breakdown_s["backward_s"] + t.breakdown_s["recompute_s"]) / m
    assert t.bubble_s == pytest.approx(3 / v * per_mb)
    assert t.bubble_s / (m * per_mb) == pytest.approx(3 / (m * v))


def test_full_recompute_costs_about_one_more_forward() -> None:
    plain = _time(_req())
    ckpt = _time(_req(training={"activation_checkpointing": "full"}))
    assert ckpt.breakdown_s["recompute_s"] == pytest.approx(plain.breakdown_s["forward_s"], rel=0.1)
    assert 1.2 < ckpt.step_time_s / plain.step_time_s < 1.45
    assert ckpt.mfu < plain.mfu and ckpt.tflops_per_gpu > plain.tflops_per_gpu * 0.95


def test_selective_recompute_is_cheaper_than_full() -> None:
    sel = _time(_req(training={"activation_checkpointing": "selective"}))
    full = _time(_req(training={"activation_checkpointing": "full"}))
    assert sel.step_time_s < full.step_time_s


def test_tensor_parallel_collectives_are_exposed() -> None:
    t = _time(_req(parallelism={"sharding": "none", "tp": 8}))
    assert t.breakdown_s["tensor_parallel_s"] > 0
    assert t.exposed_communication_s >= t.breakdown_s["tensor_parallel_s"]


def test_fsdp_on_one_node_hides_most_communication() -> None:
    t = _time(_req(training={"micro_batch_size": 2}))
    assert t.communication_s > 0
    assert t.exposed_communication_s < 0.1 * t.communication_s


def test_inter_node_fsdp_exposes_more_than_intra_node() -> None:
    one = _time(_req(model="llama-3.1-70b", gpus=8, training={"activation_checkpointing": "full"}))
    many = _time(_req(model="llama-3.1-70b", nodes=8, gpus=8, training={"activation_checkpointing": "full"}))
    assert many.communication_s > one.communication_s


def test_hsdp_adds_a_cross_replica_all_reduce() -> None:
    req = _req(nodes=4, parallelism={"sharding": "hsdp", "hsdp_shard_size": 8})
    fsdp = _time(_req(nodes=4))
    hsdp = _time(req)
    assert hsdp.breakdown_s["data_parallel_s"] != fsdp.breakdown_s["data_parallel_s"]


def test_expert_and_context_parallel_add_their_traffic() -> None:
    ep = _time(_req(model="mixtral-8x7b", parallelism={"sharding": "fsdp", "ep": 8}))
    assert ep.breakdown_s["expert_parallel_s"] > 0
    cp = _time(_req(training={"seq_len": 65536}, parallelism={"sharding": "fsdp", "cp": 8}))
    assert cp.breakdown_s["context_parallel_s"] > 0
    assert 0 <= cp.breakdown_s["context_parallel_exposed_s"] <= cp.breakdown_s["context_parallel_s"]


_COMM_PARTS = ("tensor_parallel_s", "context_parallel_s", "expert_parallel_s", "pipeline_p2p_s", "data_parallel_s")
_EXPOSED_PARTS = ("tensor_parallel_s", "context_parallel_exposed_s", "expert_parallel_s", "pipeline_p2p_s",
                  "data_parallel_exposed_s")


@pytest.mark.parametrize("cp", [2, 8])
def test_context_parallel_ring_volume_is_in_communication_and_its_overhang_in_exposed(cp: int) -> None:
    """Ring attention at 32k tokens: the K/V exchanges all count in ``communication_s`` (as FSDP's hidden
    gathers do); only what the attention blocks do not cover is exposed."""
    t = _time(_req(training={"seq_len": 32768}, parallelism={"sharding": "fsdp", "cp": cp}))
    b = t.breakdown_s
    assert b["context_parallel_s"] > 0
    assert t.communication_s == pytest.approx(sum(b[k] for k in _COMM_PARTS))
    assert t.exposed_communication_s == pytest.approx(sum(b[k] for k in _EXPOSED_PARTS))


def test_full_recompute_repeats_the_forward_cp_and_ep_exchanges() -> None:
    """Forward: f of ring exchange, backward 2f; a recomputed forward adds f (4f / 3f). Expert parallelism:
    dispatch + combine per forward and in backward: 4 all-to-alls, 6 with the recomputed forward."""
    cp = {c: _time(_req(training={"seq_len": 32768, "activation_checkpointing": c},
                        parallelism={"sharding": "fsdp", "cp": 4})).breakdown_s for c in ("none", "full")}
    assert cp["full"]["context_parallel_s"] == pytest.approx(4 / 3 * cp["none"]["context_parallel_s"])
    ep = {c: _time(_req(model="mixtral-8x7b", training={"activation_checkpointing": c},
                        parallelism={"sharding": "fsdp", "ep": 8})).breakdown_s for c in ("none", "full")}
    assert ep["full"]["expert_parallel_s"] == pytest.approx(6 / 4 * ep["none"]["expert_parallel_s"])


def test_virtual_stages_shrink_the_bubble_only_when_interleaved() -> None:
    """Narayanan et al. 2021, Sec. 2.2: v virtual stages divide the bubble under interleaved 1F1B only; a 1F1B
    (or GPipe) layout that carries v > 1 runs one chunk per rank."""
    c = catalog()
    req = _req(training={"gradient_accumulation_steps": 8}, parallelism={"sharding": "none", "pp": 4})
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    gpu = c.gpus[req.hardware.gpu]
    plain = step_time(job_of(req), shape, layout, gpu, None, c)
    carried = step_time(job_of(req), shape, layout.replace(vp=2), gpu, None, c)
    assert carried.bubble_s == pytest.approx(plain.bubble_s) and carried.step_time_s == pytest.approx(
        plain.step_time_s)
    interleaved = _time(_req(training={"gradient_accumulation_steps": 8, "pipeline_schedule": "interleaved",
                                       "virtual_stages": 2}, parallelism={"sharding": "none", "pp": 4}))
    assert interleaved.bubble_s == pytest.approx(plain.bubble_s / 2)


def test_offload_adds_pcie_and_cpu_time() -> None:
    on_gpu = _time(_req(parallelism={"framework": "deepspeed", "sharding": "zero2"}))
    off = _time(_req(parallelism={"framework": "deepspeed", "sharding": "zero2", "offload": "optimizer"}))
    assert off.offload_s > 0 and off.optimizer_s == 0 and off.step_time_s > on_gpu.step_time_s
    torch_off = _time(_req(parallelism={"sharding": "fsdp", "offload": "optimizer"}))
    assert torch_off.offload_s > off.offload_s  # torch.optim on the CPU vs DeepSpeed CPU-Adam


@pytest.mark.parametrize(("impl", "slower_than"), [("foreach", "fused"), ("for-loop", "fused")])
def test_optimizer_implementations(impl: str, slower_than: str) -> None:
    fast = _time(_req(gpus=1, parallelism={"sharding": "none"}, training={"optimizer_impl": slower_than,
                                                                          "precision": "bf16-true"}))
    slow = _time(_req(gpus=1, parallelism={"sharding": "none"}, training={"optimizer_impl": impl,
                                                                          "precision": "bf16-true"}))
    assert slow.optimizer_s > 2 * fast.optimizer_s


def test_faster_hardware_is_faster() -> None:
    a100 = _time(_req(gpu="a100-sxm4-80gb"))
    h100 = _time(_req(gpu="h100-sxm5-80gb"))
    b200 = _time(_req(gpu="b200-sxm-180gb"))
    assert a100.step_time_s > h100.step_time_s > b200.step_time_s
    fp8 = _time(_req(training={"precision": "fp8-mixed"}))
    assert fp8.step_time_s < h100.step_time_s


def test_lora_is_faster_than_full_fine_tuning_and_qlora_slower_than_lora() -> None:
    full = _time(_req(gpus=1, parallelism={"sharding": "none"}, training={"precision": "bf16-true"}))
    lora = _time(_req(gpus=1, parallelism={"sharding": "none"}, training={"method": "lora"}))
    qlora = _time(_req(gpus=1, parallelism={"sharding": "none"}, training={"method": "qlora"}))
    assert lora.step_time_s < full.step_time_s < 1.6 * lora.step_time_s
    assert qlora.step_time_s > lora.step_time_s


def test_short_sequences_on_small_models_are_cpu_bound() -> None:
    small = _time(_req(model="llama-3.2-1b", gpus=1, parallelism={"sharding": "none"},
                       training={"seq_len": 256}))
    assert small.step_time_s > 16 * 3 * 1.2e-3  # 16 layers x (fwd + 2 bwd) x CPU time per layer forward


@pytest.mark.parametrize("server", sorted(load_catalog().servers))
def test_every_catalog_server_gives_a_finite_step(server: str) -> None:
    s = catalog().servers[server]
    n = s.gpu_count
    req = _req(model="llama-3.2-1b", gpu=s.gpu_id, server=server, nodes=2, gpus=n,
               training={"precision": "bf16-mixed"})
    t = _time(req)
    assert math.isfinite(t.step_time_s) and t.step_time_s > 0 and 0 < t.mfu < 1


def test_step_time_is_pure() -> None:
    """The same answer every time, and the request and layout left as they were (how fast it is: benchmarks/)."""
    req = _req(model="llama-3.1-70b", nodes=4, parallelism={"sharding": "none", "tp": 8, "pp": 2},
               training={"gradient_accumulation_steps": 8})
    c = catalog()
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    gpu = c.gpus[req.hardware.gpu]
    before = (req.model_dump(), layout)
    first = step_time(job_of(req), shape, layout, gpu, None, c)
    again = [step_time(job_of(req), shape, layout, gpu, None, c) for _ in range(3)]
    assert again == [first] * 3 and (req.model_dump(), layout) == before


# ------------------------------------------------------------------------------------------------ training
def test_no_token_budget_no_train_result() -> None:
    req = _req()
    c = catalog()
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    assert train_result(job_of(req), shape, layout, _time(req), c.gpus[req.hardware.gpu], None, c) is None


def test_time_to_train_gpu_hours_energy_and_dataloader() -> None:
    req = _req(server="nvidia-dgx-h100", nodes=2, training={"train_tokens": 1e10, "micro_batch_size": 2})
    resp = estimate(req, catalog())
    assert resp.time is not None and resp.train is not None
    tr, t = resp.train, resp.time
    tokens_per_step = 2 * 4096 * 16
    assert tr.steps == math.ceil(1e10 / tokens_per_step)
    assert tr.time_to_train_s == pytest.approx(1e10 / tokens_per_step * t.step_time_s)
    assert tr.gpu_hours == pytest.approx(16 * tr.time_to_train_s / 3600)
    # DGX H100: 10.2 kW peak, 0.75 average draw, two nodes (IT energy, no PUE)
    assert tr.energy_kwh == pytest.approx(2 * 10.2 * 0.75 * tr.time_to_train_s / 3600, rel=1e-6)
    assert tr.dataset_read_bytes_per_s == pytest.approx(4 * t.tokens_per_s)  # 128k vocabulary: int32 tokens
    assert tr.checkpoint_bytes > 12 * 8e9 and tr.checkpoint_write_s > 0


def test_lora_checkpoints_only_the_adapters() -> None:
    full = estimate(_req(training={"train_tokens": 1e9}), catalog()).train
    lora = estimate(_req(training={"train_tokens": 1e9, "method": "lora"}), catalog()).train
    assert full is not None and lora is not None
    assert lora.checkpoint_bytes < 0.02 * full.checkpoint_bytes


def test_a_step_larger_than_the_budget_bills_only_the_budget_and_warns() -> None:
    """1,000 micro-batches of 4,096 tokens on 8 GPUs make a 32.8M-token step: a 1M-token budget is 3% of it."""
    req = _req(training={"train_tokens": 1e6, "gradient_accumulation_steps": 1000})
    resp = estimate(req, catalog())
    assert resp.train is not None and resp.time is not None
    tokens_per_step = 4096 * 1000 * 8
    assert resp.train.steps == 1
    assert resp.train.time_to_train_s == pytest.approx(1e6 / tokens_per_step * resp.time.step_time_s)
    shape = ModelShape(resolve_model(req.model))
    assert train_warnings(job_of(req), build_layout(job_of(req), shape))
    assert any("more than the 1,000,000-token budget" in w for w in resp.warnings)
    assert not train_warnings(job_of(_req(training={"train_tokens": 1e9})), build_layout(job_of(req), shape))


def test_train_and_host_write_checkpoints_to_the_same_place_in_the_same_time() -> None:
    """One node writes to local NVMe, several to shared storage (estimator.training.checkpoint.checkpoint_target);
    the response's train and host blocks give one checkpoint write time."""
    assert checkpoint_target(1) == "local" and checkpoint_target(16) == "shared"
    assert checkpoint_target(16, "local") == "local"
    for nodes in (1, 2):
        req = _req(server="nvidia-dgx-h100", nodes=nodes, training={"train_tokens": 1e9})
        resp = estimate(req, catalog())
        assert resp.train is not None
        assert resp.train.checkpoint_write_s == pytest.approx(resp.host.checkpoint_write_s)
    # without the host sizing, the training totals pick the same shared storage across nodes
    c = catalog()
    req = _req(server="nvidia-dgx-h100", nodes=2, training={"train_tokens": 1e9})
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    gpu, server = c.gpus[req.hardware.gpu], c.servers["nvidia-dgx-h100"]
    alone = train_result(job_of(req), shape, layout, _time(req), gpu, server, c)
    host = host_sizing(job_of(req), shape, layout, gpu, server, c)
    assert alone is not None and host.checkpoint_target == "shared"
    assert alone.checkpoint_write_s == pytest.approx(host.checkpoint_write_s)


def test_mfu_peak_is_stated_in_the_assumptions() -> None:
    fp8 = estimate(_req(training={"precision": "fp8-mixed"}), catalog())
    assert any("fp8 peak" in a for a in fp8.assumptions)
    assert fp8.time is not None
    peak = catalog().gpus["h100-sxm5-80gb"].fp8_tflops_dense * 1e12
    assert fp8.time.mfu == pytest.approx(fp8.time.flops_per_step / (fp8.time.step_time_s * 8 * peak))
    assert any("bf16 peak" in a for a in estimate(_req(), catalog()).assumptions)


def test_error_bar_is_wider_for_kinds_never_measured() -> None:
    bars = accuracy_table()["time_error_bar_pct"]
    measured = _time(_req(gpu="h200-sxm-141gb", gpus=1, training={"attention": "sdpa"},
                          parallelism={"sharding": "none"}))
    assert measured.error_bar_pct == bars["single_gpu"]
    # measured on one H200 in device call 4: QLoRA, eager attention, 8-bit AdamW, SGD, Adafactor; an 8B QLoRA
    # step is launch-bound (0.97 ms of Python per 4-bit linear: Pass.host_bound) and takes that measured class's bar
    qlora = _time(_req(gpu="h200-sxm-141gb", gpus=1, parallelism={"sharding": "none"},
                       training={"attention": "sdpa", "method": "qlora"}))
    assert qlora.error_bar_pct == bars["host_bound"]
    for kw in ({"training": {"attention": "eager", "seq_len": 1024}},
               {"training": {"attention": "sdpa", "optimizer": "adamw-8bit"}},
               {"training": {"attention": "sdpa", "optimizer": "sgd"}},
               {"training": {"attention": "sdpa", "optimizer": "adafactor", "optimizer_impl": "for-loop"}}):
        t = _time(_req(gpu="h200-sxm-141gb", gpus=1, parallelism={"sharding": "none"}, **kw))
        assert t.error_bar_pct == bars["single_gpu"], kw
    for kw in ({"training": {"attention": "sdpa", "precision": "fp8-mixed"}},
               {"training": {"attention": "flash"}}, {"training": {"attention": "sdpa", "optimizer": "lion"}},
               {"training": {"attention": "sdpa"}, "parallelism": {"offload": "optimizer", "framework": "deepspeed",
                                                                  "sharding": "zero2"}}):
        kw.setdefault("parallelism", {"sharding": "none"})
        t = _time(_req(gpu="h200-sxm-141gb", gpus=1, **kw))
        assert t.error_bar_pct == bars["unmeasured_floor"] > bars["single_gpu"]
    several = _req(gpu="h200-sxm-141gb", training={"method": "qlora"}, parallelism={"sharding": "fsdp"})
    job = job_of(several)
    assert not time_kind_measured(job, build_layout(job, ModelShape(resolve_model(several.model))),
                                  "h200-sxm-141gb")  # QLoRA was measured on one GPU only
    mi300 = _time(_req(gpu="mi300x-192gb", gpus=1, training={"attention": "sdpa"}, parallelism={"sharding": "none"}))
    assert mi300.error_bar_pct == bars["unmeasured_floor"]


def test_multi_node_over_frontend_nics_is_slow_and_says_so() -> None:
    """Two Dell R760xa H100 NVL (only 2 x 1 GbE listed): FSDP of an 8B model crosses 2 Gb/s per node; the
    response warns, and the step is far slower than on one node."""
    two = estimate(_req(gpu="h100-nvl-94gb", server="dell-r760xa-h100-nvl", nodes=2, gpus=4), catalog())
    one = estimate(_req(gpu="h100-nvl-94gb", server="dell-r760xa-h100-nvl", nodes=1, gpus=4), catalog())
    assert two.time is not None and one.time is not None
    assert any("frontend" in w for w in two.warnings)
    assert not any("frontend" in w for w in one.warnings)
    assert two.time.step_time_s > 10 * one.time.step_time_s


@pytest.mark.parametrize("body", [
    {"training": {"gradient_accumulation_steps": 4}, "parallelism": {"sharding": "none", "tp": 2, "pp": 2}},
    {"model": "llama-3.1-70b", "nodes": 3, "training": {"gradient_accumulation_steps": 8},
     "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 2, "pp": 3}},  # uneven: three stages
    {"training": {"method": "lora"}, "parallelism": {"sharding": "none"}, "gpus": 1},
])
def test_step_time_model_is_the_step_time_and_the_host_ratio_of_one_stage(body: dict[str, Any]) -> None:
    """``step_time_model``: the slowest stage's step once, its ``result()`` the ``TimeResult`` of ``step_time``,
    its seconds the result's and its ``host_ratio`` that of ``host_issue_ratio`` (which recomputes the stage)."""
    c = catalog()
    req = _req(**body)
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    gpu = c.gpus[req.hardware.gpu]
    model = step_time_model(job_of(req), shape, layout, gpu, None)
    t = step_time(job_of(req), shape, layout, gpu, None, c)
    assert model.result() == t
    assert (model.step_time_s, model.compute_s, model.communication_s, model.exposed_communication_s,
            model.bubble_s, model.optimizer_s, model.offload_s) == (
        t.step_time_s, t.compute_s, t.communication_s, t.exposed_communication_s, t.bubble_s, t.optimizer_s,
        t.offload_s)
    assert model.host_ratio == host_issue_ratio(job_of(req), shape, layout, gpu)
