"""``capplan check --run`` on tensor-parallel layouts (issue 31): what it accepts and refuses (naming the field),
the one implementation of the TP plans it shares with the calibration's ``benchmarks/calibration/measure_tp.py``
(:mod:`app.check.tensor_parallel`), and its run path on the CPU: a 2-layer Llama under the fake process group,
each rank's parameters the plan's shards, forward, backward and optimizer steps through ``run_steps``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

from app.check import run as check_run
from app.check import tensor_parallel as TP
from app.check.trace import TraceUnsupported, _build, hf_config
from app.core.startup import load_source_catalog
from estimator import EstimateRequest, EstimateResponse, estimate

ROOT = Path(__file__).resolve().parents[1]
CATALOG = load_source_catalog()
#: Llama's structure (GQA, tied embeddings as Llama 3.2) at widths the CPU runs in a second
TINY = {"name": "tiny llama", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_kv_heads": 2,
        "ffn_hidden_size": 128, "vocab_size": 512, "tied_embeddings": True}


def _request(*, gpus: int = 2, model: dict[str, Any] | None = None, **sections: dict[str, Any]) -> EstimateRequest:
    training = {"method": "full", "precision": "bf16-mixed", "optimizer": "adamw", "optimizer_impl": "fused",
                "micro_batch_size": 2, "seq_len": 32, "attention": "sdpa", **sections.get("training", {})}
    parallelism = {"tp": 2, **sections.get("parallelism", {})}
    return EstimateRequest.model_validate({
        "model": {**TINY, **(model or {})}, "training": training, "parallelism": parallelism,
        "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": gpus}})


def _estimated(request: EstimateRequest) -> tuple[EstimateRequest, EstimateResponse]:
    return request, estimate(request, CATALOG)


# ------------------------------------------------------------------------------------ accepted and refused
@pytest.mark.parametrize("sections", [
    {},
    {"parallelism": {"tp": 2, "sequence_parallel": True}},
    {"parallelism": {"tp": 2, "tp_plan": "replicated-embeddings"}, "model": {"tied_embeddings": False}},
    {"parallelism": {"tp": 2, "sharding": "fsdp"}, "gpus": 8},
    {"parallelism": {"tp": 2, "sharding": "hsdp", "hsdp_shard_size": 2}, "gpus": 8},
    {"training": {"precision": "bf16-true", "activation_checkpointing": "full"}},
], ids=["tp2", "tp2-sp", "tp2-hf-plan", "fsdp4xtp2", "hsdp", "bf16-true-ckpt"])
def test_tensor_parallel_layouts_are_run(sections: dict[str, Any]) -> None:
    req = _request(gpus=sections.get("gpus", 2), model=sections.get("model"),
                   **{k: v for k, v in sections.items() if k in ("training", "parallelism")})
    assert check_run.run_refusal(*_estimated(req)) is None


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"parallelism": {"tp": 1, "pp": 2}}, "parallelism.pp"),
    ({"parallelism": {"tp": 1, "cp": 2}}, "parallelism.cp"),
    ({"parallelism": {"framework": "megatron"}}, "parallelism.framework"),
    ({"parallelism": {"sharding": "zero1"}, "gpus": 4}, "parallelism.sharding"),
    ({"parallelism": {"tp_plan": "replicated-embeddings", "sequence_parallel": True},
      "model": {"tied_embeddings": False}}, "parallelism.sequence_parallel"),
    ({"parallelism": {"tp_plan": "replicated-embeddings"}}, "model.tied_embeddings"),
    ({"training": {"method": "lora"}}, "training.method"),
    ({"training": {"loss_kernel": "chunked"}}, "training.loss_kernel"),
    ({"model": {"qk_norm": True}}, "model:"),  # Qwen3 (q/k norms): not a family the plans address
])
def test_what_run_cannot_run_is_refused_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    req = _request(gpus=kwargs.get("gpus", 2), model=kwargs.get("model"),
                   **{k: v for k, v in kwargs.items() if k in ("training", "parallelism")})
    why = check_run.run_refusal(*_estimated(req))
    assert why is not None and why.startswith(field), why
    with pytest.raises(TraceUnsupported, match=field.replace(".", r"\.")):
        check_run.run_steps(*_estimated(req), 3, "cpu")


def test_expert_parallelism_is_refused_naming_the_field() -> None:
    moe = {"num_experts": 4, "experts_per_token": 2, "moe_ffn_hidden_size": 64}
    req = _request(model=moe, parallelism={"tp": 1, "ep": 2})
    why = check_run.run_refusal(*_estimated(req))
    assert why is not None and why.startswith("parallelism.ep")


def test_the_trace_still_refuses_tensor_parallelism() -> None:
    """--trace follows no TP plan (its tracker does not): TP stays refused there, only --run runs it."""
    from app.check.trace import _refusal

    req, result = _estimated(_request())
    assert (_refusal(req, result) or "").startswith("parallelism")
    assert _refusal(req, result, tensor_parallel=True) is None


# ------------------------------------------------------------------------------------ one implementation
def test_measure_tp_and_run_use_the_one_tensor_parallel_module() -> None:
    """``measure_tp.py`` (loaded as the calibration runs it: its folder on ``sys.path``, in its own process)
    takes its plans from ``app/check/tensor_parallel.py`` and defines none of its own; ``--run`` imports the
    same module; and a CPU case of ``measure_tp.run_case`` calls the shared plan function."""
    assert check_run.TP is TP
    tree = ast.parse((ROOT / "benchmarks" / "calibration" / "measure_tp.py").read_text())
    called = {getattr(n.func, "id", None) or getattr(n.func, "attr", None) for n in ast.walk(tree)
              if isinstance(n, ast.Call)}
    own = called & {"ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
                    "parallelize_module", "fully_shard", "MixedPrecisionPolicy", "loss_parallel", "cross_entropy"}
    assert not own, f"measure_tp.py builds its own {own}: they must come from app/check/tensor_parallel.py"
    assert {"apply_tp", "apply_fsdp", "materialize", "forward_loss", "backward", "batch"} <= called
    script = """
import json, sys
sys.path.insert(0, "benchmarks/calibration")
import measure_tp
import app.check.tensor_parallel as shared
names = ["torchtitan_plan", "hf_tp_plan", "apply_tp", "apply_fsdp", "materialize", "optimizer_groups", "batch",
         "forward_loss", "backward", "plan_record"]
same_code = [getattr(measure_tp.TP, n).__code__.co_code == getattr(shared, n).__code__.co_code for n in names]
calls = []
orig = measure_tp.TP.apply_tp
def spy(*a, **k):
    calls.append(k.get("plan", a[3] if len(a) > 3 else None))
    return orig(*a, **k)
measure_tp.TP.apply_tp = spy
case = measure_tp.dry_shrink(measure_tp.by_id("l1b-full-mixed-fused-b2-s4096-nock-tp2"))
res = {"id": case["id"], "measured": {}}
measure_tp.run_case(case, res, True)
print(json.dumps({
    "file": measure_tp.TP.__file__, "shared_file": shared.__file__, "same_code": same_code,
    "aliases": [measure_tp.tp_plan.__name__, measure_tp.hf_tp_plan.__name__],
    "calls": calls, "tp_plan": res.get("tp_plan", {}).get("plan"), "steps": len(res["measured"]["phase_peaks"])}))
"""
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CAPPLAN_NATIVE": "0",
                            "HOME": str(ROOT)})
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).resolve() == Path(out["shared_file"]).resolve() == Path(TP.__file__).resolve()
    assert all(out["same_code"])
    assert out["aliases"] == ["torchtitan_plan", "hf_tp_plan"]
    assert out["calls"] == ["vocab-parallel"] and out["tp_plan"] == "vocab-parallel" and out["steps"] == 2


# ------------------------------------------------------------------------------------ the run path on the CPU
def _fake_group(world: int) -> None:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)


@pytest.mark.parametrize("plan", ["vocab-parallel", "replicated-embeddings"])
def test_rank_0_holds_the_plans_shards_and_trains_on_the_cpu(plan: str) -> None:
    """A 2-layer Llama, TP 2 on a fake process group, built as ``--run`` builds it: each parameter's local
    tensor is the plan's shard (column-parallel q/k/v/gate/up split on their outputs, row-parallel o/down on
    their inputs, the embedding and LM head split on the vocabulary under the vocab-parallel plan, the
    embedding whole under Hugging Face's), and a forward, backward and optimizer step leave each gradient the
    shape of its shard."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    tied = plan == "vocab-parallel"
    req = _request(model={"tied_embeddings": tied}, parallelism={"tp": 2, "tp_plan": plan})
    cfg = hf_config(req)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _build(req, cfg)
    _fake_group(2)
    try:
        mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        TP.apply_tp(model, mesh["tp"], False, plan)
        TP.materialize(model, "cpu", tied, fsdp=False)
        h, heads, kv, ffn, vocab = 64, 4, 2, 128, 512
        hd = h // heads
        layer = model.model.layers[0]
        shapes = {name: tuple(TP.local(p).shape) for name, p in layer.named_parameters()}
        assert shapes["self_attn.q_proj.weight"] == (heads * hd // 2, h)
        assert shapes["self_attn.k_proj.weight"] == (kv * hd // 2, h)
        assert shapes["self_attn.o_proj.weight"] == (h, heads * hd // 2)
        assert shapes["mlp.gate_proj.weight"] == (ffn // 2, h)
        assert shapes["mlp.down_proj.weight"] == (h, ffn // 2)
        assert shapes["input_layernorm.weight"] == (h,)
        assert not isinstance(layer.input_layernorm.weight, DTensor)  # norms replicated, plain tensors
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        assert tuple(TP.local(head).shape) == (vocab // 2, h)
        assert tuple(TP.local(embed).shape) == ((vocab // 2, h) if plan == "vocab-parallel" else (vocab, h))
        assert (head is embed) == tied
        params = [p for p in model.parameters() if p.requires_grad]
        groups, described = TP.optimizer_groups(params)
        assert described == "DTensor / plain"
        opt = torch.optim.AdamW(groups, lr=1e-5, foreach=False)
        x, labels, pos = TP.batch(vocab, 2, 16, "cpu")
        assert torch.equal(labels[:, :-1], x[:, 1:])
        vp = TP.uses_loss_parallel(2, plan)
        assert vp == (plan == "vocab-parallel")
        loss = TP.forward_loss(model, x, labels, pos, vocab_parallel=vp, device="cpu", autocast=False)
        TP.backward(loss, vocab_parallel=vp)
        for p in params:
            assert p.grad is not None and TP.local(p.grad).shape == TP.local(p).shape
        opt.step()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize(("kwargs", "world", "fsdp"), [
    ({}, 2, False),
    ({"parallelism": {"tp": 2, "sequence_parallel": True}, "training": {"gradient_accumulation_steps": 2}}, 2,
     False),
    ({"parallelism": {"tp": 2, "sharding": "fsdp"}, "gpus": 8}, 8, True),
], ids=["tp2", "tp2-sp-accum2", "fsdp4xtp2"])
def test_run_steps_runs_a_tensor_parallel_request_on_the_cpu(kwargs: dict[str, Any], world: int, fsdp: bool) -> None:
    """``--run``'s own path (``run_steps``) on the CPU: rank 0 of the layout under the fake process group
    (world size tp x shard group), the calibration's plan recorded, two memory steps and the timed ones, the
    result flagged memory only (no real collectives: the step time is not the layout's)."""
    req = _request(gpus=kwargs.get("gpus", 2), **{k: v for k, v in kwargs.items() if k != "gpus"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = check_run.run_steps(*_estimated(req), 3, "cpu")
    assert raw["world_size"] == world and raw["memory_only"] is True and raw["real_ranks"] is False
    assert raw["tp_plan"]["plan"] == "vocab-parallel" and raw["tp_plan"]["loss_parallel"] is True
    assert raw["tp_plan"]["sp"] == req.parallelism.sequence_parallel
    assert ("fsdp" in raw) == fsdp
    assert len(raw["phase_peaks"]) == check_run.MEMORY_STEPS and len(raw["step_times_s"]) == 1
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in raw["phase_peaks"])
    assert raw["tokens_per_step"] == 2 * 32 * req.training.gradient_accumulation_steps * (world // 2)


#: measure_tp.py's CPU dry run of calibration cases (its own shrink), and the same config pasted into a request
#: for --run's path: the same computation step by step
SAME_RUN = """
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, "benchmarks/calibration")
import torch.distributed as dist
import measure_tp
out = {}
for cid in sys.argv[1:]:
    case = measure_tp.dry_shrink(measure_tp.by_id(cid))
    res = {"id": cid, "measured": {}}
    measure_tp.run_case(case, res, True)
    dist.destroy_process_group()
    out[cid] = {"losses": [r["loss"] for r in res["measured"]["phase_peaks"]], "request": case["request"],
                "config": measure_tp.M.hf_config(case).to_dict(), "numel": res["measured"]["local_param_numel"]}
print(json.dumps(out))
"""


def test_run_and_measure_tp_compute_the_same_steps_on_the_cpu() -> None:
    """The calibration's TP cases (vocab-parallel, with sequence parallelism, Hugging Face's plan, FSDP2 x TP),
    shrunk as ``measure_tp.py --dry-run`` shrinks them and run by ``measure_tp.run_case`` in its own process;
    the same requests, with the same transformers config pasted, through ``--run``'s path (``run_steps`` on the
    CPU): rank 0 holds as many parameters, and the two memory steps' losses are bit for bit the same (same
    weights, batch, plan, loss, optimizer)."""
    ids = ["l1b-full-mixed-fused-b2-s4096-nock-tp2", "l8b-full-mixed-fused-b1-s4096-nock-tp4sp",
           "l8b-full-mixed-fused-b1-s4096-nock-tp2-hfplan", "l8b-full-mixed-fused-b1-s4096-ck-fsdp8xtp2"]
    p = subprocess.run([sys.executable, "-c", SAME_RUN, *ids], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(ROOT)})
    assert p.returncode == 0, p.stderr[-3000:]
    calibration = json.loads(p.stdout.strip().splitlines()[-1])
    for cid in ids:
        cal = calibration[cid]
        request = EstimateRequest.model_validate({**cal["request"], "model": {"hf_config": cal["config"]}})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = check_run.run_steps(*_estimated(request), 3, "cpu")
        assert raw["local_param_numel"] == cal["numel"], cid
        assert [r["loss"] for r in raw["phase_peaks"]] == cal["losses"][:check_run.MEMORY_STEPS], cid
