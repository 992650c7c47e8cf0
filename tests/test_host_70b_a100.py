"""The seed question, answered whole: "can 8x A100 80 GB train a 70B model?" (issue #8).

Llama 3.1 70B on one NVIDIA DGX A100 640 GB (8x A100 SXM4 80 GB, 2 TB RAM): which layouts fit the GPUs, how much
host RAM the node then needs, and how long a step takes (the step-time model's figure when it is wired into
``estimate()``, else FLOPs at the fallback MFU). ``report()`` prints the table that docs/host-sizing.md shows.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_host_support import catalog

from estimator import estimate
from estimator.host import host_sizing
from estimator.layout import build_layout
from estimator.modelspec import ModelShape, resolve_model
from estimator.request import EstimateRequest, Hardware, Parallelism, Training

GIB = 1 << 30
HARDWARE = Hardware(gpu="a100-sxm4-80gb", server="nvidia-dgx-a100-640gb", num_nodes=1, gpus_per_node=8)
CKPT = "full"
LAYOUTS: dict[str, tuple[Training, Parallelism]] = {
    "full, FSDP": (Training(activation_checkpointing=CKPT), Parallelism(sharding="fsdp")),
    "full, TP 8 + ZeRO-1": (Training(activation_checkpointing=CKPT),
                           Parallelism(tp=8, sequence_parallel=True, sharding="zero1")),
    "full, FSDP + optimizer offload": (Training(activation_checkpointing=CKPT),
                                       Parallelism(sharding="fsdp", offload="optimizer")),
    "full, FSDP + optimizer and parameter offload": (Training(activation_checkpointing=CKPT),
                                                     Parallelism(sharding="fsdp", offload="optimizer+params")),
    "LoRA r16, FSDP": (Training(method="lora", activation_checkpointing=CKPT), Parallelism(sharding="fsdp")),
    "QLoRA r16, DDP": (Training(method="qlora", activation_checkpointing=CKPT), Parallelism(sharding="none")),
}


def answer(name: str) -> dict[str, Any]:
    training, parallelism = LAYOUTS[name]
    req = EstimateRequest(model="llama-3.1-70b", training=training, parallelism=parallelism, hardware=HARDWARE)
    cat = catalog()
    resp = estimate(req, catalog=cat)
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(req, shape)
    server = cat.servers[HARDWARE.server or ""]
    sizing = host_sizing(req, shape, layout, cat.gpus[HARDWARE.gpu], server, cat, time=resp.time)
    host_ram = resp.host.ram_bytes_per_node if resp.host is not None else sizing.ram.per_node
    step = resp.time.step_time_s if resp.time is not None else sizing.step_time_s
    return {"layout": name, "fits": resp.memory.fits, "gpu_gib": resp.memory.total_bytes / GIB,
            "host_ram_gib": host_ram / GIB, "recommended_ram_gib": sizing.dimms.total_gib if sizing.dimms else None,
            "fits_server": sizing.fits_server, "step_s": step, "step_source": sizing.step_time_source,
            "tokens_per_s": req.training.seq_len * req.training.micro_batch_size * layout.dp / step}


def report() -> str:
    rows = [answer(n) for n in LAYOUTS]
    out = ["| layout | fits 80 GB | GPU GiB | host RAM GiB/node | RAM to fit | step s | tokens/s |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['layout']} | {'yes' if r['fits'] else 'no'} | {r['gpu_gib']:.1f} | {r['host_ram_gib']:,.0f} "
                   f"| {r['recommended_ram_gib'] or '-'} | {r['step_s']:.1f} | {r['tokens_per_s']:,.0f} |")
    out.append(f"(step time: {rows[0]['step_source']})")
    return "\n".join(out)


@pytest.mark.parametrize("name", ["full, FSDP", "full, TP 8 + ZeRO-1"])
def test_full_fine_tuning_without_offload_does_not_fit(name: str) -> None:
    """16 bytes per parameter of model state (ZeRO, arXiv 1910.02054) = 1.13 TB over 8 GPUs > 8 x 80 GB."""
    assert not answer(name)["fits"]


def test_full_fine_tuning_fits_with_cpu_offload_and_needs_over_a_terabyte_of_host_ram() -> None:
    r = answer("full, FSDP + optimizer and parameter offload")
    assert r["fits"]
    assert 1024 < r["host_ram_gib"] < 2048  # 70.6e9 x 16 B plus pinned rounding, baselines and the OS reserve
    assert r["fits_server"] and r["recommended_ram_gib"] is not None and r["recommended_ram_gib"] <= 2048


@pytest.mark.parametrize("name", ["LoRA r16, FSDP", "QLoRA r16, DDP"])
def test_adapters_fit_and_need_little_host_ram(name: str) -> None:
    r = answer(name)
    assert r["fits"]
    assert r["host_ram_gib"] < 512  # the rank-0 bf16 load (141 GB) dominates
    assert r["step_s"] > 0


def test_the_complete_answer() -> None:
    """Which layouts fit, the node's host RAM and the speed, as one table (printed with ``pytest -s``)."""
    rows = {n: answer(n) for n in LAYOUTS}
    fitting = {n for n, r in rows.items() if r["fits"]}
    assert {"full, FSDP + optimizer and parameter offload", "LoRA r16, FSDP", "QLoRA r16, DDP"} <= fitting
    assert all(r["host_ram_gib"] > 0 and r["tokens_per_s"] > 0 for r in rows.values())
    print("\n" + report())
