"""Issue 29's mechanisms in ``capplan check`` (issue 31): one implementation (``app/check/stacks.py``) shared with the
GPU measurements; a request's fields mapped to the mechanism the H100 measured; ``--trace`` applies torchtune's
chunked loss and Muon and refuses, naming the field, what fake tensors cannot run as a GPU runs it."""

from __future__ import annotations

import ast
import copy
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from app.check import stacks
from app.check.command import check_request, main
from app.check.trace import TraceUnsupported, mechanisms, missing_packages
from app.core.startup import load_source_catalog
from benchmarks.calibration.stacks_compare import request_for
from estimator import EstimateRequest, estimate

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "tests" / "data" / "stacks_h100_raw"
CATALOG = load_source_catalog()
#: the mechanism functions that live in app/check/stacks.py only
MOVED = {"Combined", "make_optimizer", "state_bytes", "apply_liger", "make_loss", "ensure_trl_utils", "add_trl_head",
         "add_trl_head_direct", "muon_optimizer", "chunked_forward", "_parts"}
#: a 2-layer Llama with a 32k vocabulary at 512 tokens, checkpointed: the logits dominate the activations
TINY = {"model": {"name": "tiny llama", "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                  "num_kv_heads": 2, "ffn_hidden_size": 512, "vocab_size": 32000},
        "training": {"method": "full", "seq_len": 512, "attention": "sdpa", "activation_checkpointing": "full"},
        "hardware": {"gpu": "h100-sxm5-80gb", "gpus_per_node": 1}}


def _request(**training: Any) -> EstimateRequest:
    body = copy.deepcopy(TINY)
    body["training"].update(training)
    return EstimateRequest.model_validate(body)


def _measured_cases() -> list[dict[str, Any]]:
    out = []
    for path in sorted(RAW.glob("call*_results.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r.get("issue") == 29 and "case" in r:
                out.append(r["case"])
    return out


CASES = _measured_cases()


# ------------------------------------------------------------------------------------- one implementation
def test_the_measurement_scripts_define_no_mechanism_of_their_own() -> None:
    for rel in ("benchmarks/calibration/measure_stacks.py", "benchmarks/check/trace_fsdp_mechanisms.py"):
        tree = ast.parse((ROOT / rel).read_text())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert not defined & (MOVED - {"make_optimizer"}), (rel, defined & MOVED)
    src = (ROOT / "benchmarks/calibration/measure_stacks.py").read_text()
    assert "stacks.make_optimizer(name, tr, model, params, base=M.make_optimizer)" in src


def test_measure_stacks_runs_the_modules_functions() -> None:
    """run_case's names (make_loss, apply_liger, ...) are app/check/stacks.py's, loaded by path as ``stacks``."""
    code = ("import sys; sys.path.insert(0, 'benchmarks/calibration'); import measure_stacks as m, stacks; "
            "print(stacks.__file__); print(all(getattr(m, n) is getattr(stacks, n) for n in "
            "('Combined', 'state_bytes', 'apply_liger', 'make_loss', 'ensure_trl_utils', 'add_trl_head')))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "CAPPLAN_NATIVE": "0"})
    assert p.returncode == 0, p.stderr[-2000:]
    path, same = p.stdout.split()[-2:]
    assert Path(path).resolve() == (ROOT / "app" / "check" / "stacks.py").resolve() and same == "True"


def test_the_module_imports_without_capplan_pydantic_or_the_web_stack(tmp_path: Path) -> None:
    """As on the GPU machine, beside measure_stacks.py: torch only."""
    absent = ("fastapi", "starlette", "sqlalchemy", "alembic", "pydantic", "estimator", "app", "typer")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nclass _A:\n    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {absent!r}:\n            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _A())\n")
    folder = tmp_path / "gpu"
    folder.mkdir()
    (folder / "stacks.py").write_text((ROOT / "app" / "check" / "stacks.py").read_text())
    code = ("import stacks; print(stacks.stack_of(stack='trl', loss_kernel='chunked', fused_kernels='none', "
            "activation_offloading='none', optimizer='muon')[0])")
    p = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(site)})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "'loss': 'trl'" in p.stdout and "'optimizer': 'muon'" in p.stdout


# ---------------------------------------------------------------------------------- request -> stack dict
@pytest.mark.parametrize("case", [c for c in CASES if request_for(c) is not None], ids=lambda c: c["id"])
def test_each_measured_case_s_request_maps_back_to_the_mechanism_the_h100_ran(case: dict[str, Any]) -> None:
    """The request the accuracy table sizes a case by (stacks_compare.request_for) is run by --run with the very
    mechanism the H100 measured (the case's stack dict)."""
    st, applied = mechanisms(EstimateRequest.model_validate(request_for(case)))
    assert st == case["stack"]
    for field, default in (("loss", "hf"), ("offload", "none"), ("alloc_conf", None)):
        named = {"loss": "loss_kernel", "offload": "activation_offloading", "alloc_conf": "allocator"}[field]
        assert (named in applied) == (case["stack"][field] != default)


@pytest.mark.parametrize(("training", "expected", "says"), [
    ({"stack": "trl"}, {"loss": "trl"}, "TRL ChunkedLogProbFunction"),
    ({"stack": "torchtune"}, {"loss": "torchtune", "logit_softcap": False}, "torchtune CEWithChunkedOutputLoss"),
    ({"loss_kernel": "chunked"}, {"loss": "torchtune"}, "torchtune"),
    ({"loss_kernel": "fused"}, {"loss": "cce"}, "Cut Cross-Entropy"),
    ({"fused_kernels": "liger"}, {"loss": "liger", "liger_kernels": True}, "Liger fused linear cross-entropy"),
    ({"fused_kernels": "liger", "loss_kernel": "materialized"}, {"loss": "hf", "liger_kernels": True}, "RMSNorm"),
    ({"stack": "axolotl", "loss_kernel": "fused"}, {"loss": "cce"}, "Cut Cross-Entropy"),
    ({"activation_offloading": "all"}, {"offload": "trl"}, "get_act_offloading_ctx_manager"),
    ({"optimizer": "paged-adamw-8bit"}, {"optimizer": "paged-adamw-8bit"}, "PagedAdamW8bit"),
    ({"optimizer": "paged-adamw"}, {"optimizer": "paged-adamw-32bit"}, "PagedAdamW32bit"),
    ({"optimizer": "adamw-4bit"}, {"optimizer": "ao-adamw-4bit"}, "torchao AdamW4bit"),
    ({"optimizer": "adamw-8bit"}, {"optimizer": "adamw-8bit"}, "bitsandbytes AdamW8bit"),
    ({"optimizer": "muon", "optimizer_impl": "for-loop"}, {"optimizer": "muon"}, "torch.optim.Muon"),
    ({"allocator": "expandable_segments"}, {"alloc_conf": "expandable_segments:True"}, "expandable_segments"),
])
def test_request_fields_map_to_the_estimators_library(training: dict[str, Any], expected: dict[str, Any],
                                                       says: str) -> None:
    st, applied = mechanisms(_request(**training))
    base = {"loss": "hf", "liger_kernels": False, "offload": "none", "optimizer": "adamw", "alloc_conf": None}
    assert st == base | expected
    assert any(says in line for line in applied.values()), applied


def test_unsloth_s_fused_loss_is_run_as_cce_and_its_offloaded_checkpoints_are_refused() -> None:
    st, applied = stacks.stack_of(stack="unsloth", loss_kernel="fused", fused_kernels="none",
                                  activation_offloading="none", optimizer="adamw")
    assert st["loss"] == "cce" and "Unsloth's own loss is not run" in applied["loss_kernel"]
    with pytest.raises(TraceUnsupported, match=r"^training\.activation_offloading: 'checkpoints'"):
        mechanisms(_request(stack="unsloth", method="lora"))


def test_a_missing_library_names_the_field_and_the_pip_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("cut_cross_entropy", "bitsandbytes") else real(name, *a))
    st, _ = mechanisms(_request(loss_kernel="fused"))
    assert missing_packages(st) == ("training.loss_kernel: needs the package cut-cross-entropy, which is not "
                                    "installed here (pip install cut-cross-entropy)")
    st, _ = mechanisms(_request(optimizer="paged-adamw-8bit"))
    assert "training.optimizer" in (missing_packages(st) or "") and "pip install bitsandbytes" in missing_packages(st)
    st, _ = mechanisms(_request(optimizer="muon", optimizer_impl="for-loop"))
    assert missing_packages(st) is None


# ------------------------------------------------------------------------------------------------- --trace
def _check(req: EstimateRequest) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec, _header = check_request(req, estimate(req, CATALOG), trace=True)
    return rec


def test_the_chunked_loss_is_traced_and_keeps_less_than_the_materialized_one() -> None:
    """torchtune's chunked loss keeps the bf16 and fp32 chunks (6 bytes a logit) instead of the materialized
    10-12: the traced peak is lower, in the forward (where the chunks are), and the estimate moves the same way."""
    plain, chunked = _check(_request()), _check(_request(loss_kernel="chunked"))
    mp, mc = plain["measured"], chunked["measured"]
    logits = 512 * 32000
    assert mp["peak_allocated_bytes"] - mc["peak_allocated_bytes"] > 2 * logits  # more than 2 bytes a logit less
    assert chunked["estimated"]["peak_allocated_bytes"] < plain["estimated"]["peak_allocated_bytes"]
    assert mc["parts_bytes"]["parameters"] == mp["parts_bytes"]["parameters"]
    assert "torchtune" in mc["mechanisms"]["loss_kernel"]
    assert not mp.get("mechanisms")


def test_muon_is_traced_with_one_state_per_decoder_matrix() -> None:
    """Muon keeps one fp32 momentum buffer per 2-D decoder matrix; AdamW (two fp32 states) the embedding (tied LM
    head) and the norms: the traced states are 4 bytes a matrix weight + 8 bytes a remaining one, fewer than
    AdamW's 8 bytes a weight; the parameters are the same."""
    adamw, muon = _check(_request()), _check(_request(optimizer="muon", optimizer_impl="for-loop"))
    m = TINY["model"]
    h, ffn, layers, kv = m["hidden_size"], m["ffn_hidden_size"], m["num_layers"], 2 * 64
    matrices = layers * (2 * h * h + 2 * kv * h + 3 * h * ffn)
    total = adamw["measured"]["parts_bytes"]["optimizer_states"] // 8  # AdamW: 8 bytes a weight (fp32 m and v)
    expected = 4 * matrices + 8 * (total - matrices)
    got = muon["measured"]["parts_bytes"]["optimizer_states"]
    assert abs(got - expected) <= 512 * 4 * (layers * 9 + 3), (got, expected)  # each state rounded to 512 bytes
    assert got < adamw["measured"]["parts_bytes"]["optimizer_states"]
    assert muon["measured"]["parts_bytes"]["parameters"] == adamw["measured"]["parts_bytes"]["parameters"]
    assert "torch.optim.Muon" in muon["measured"]["mechanisms"]["optimizer"]


@pytest.mark.parametrize(("training", "field"), [
    ({"loss_kernel": "fused"}, "training.loss_kernel"),
    ({"fused_kernels": "liger", "loss_kernel": "materialized"}, "training.fused_kernels"),
    ({"fused_kernels": "liger"}, "training.loss_kernel"),
    ({"stack": "trl"}, "training.loss_kernel"),
    ({"activation_offloading": "all"}, "training.activation_offloading"),
    ({"optimizer": "paged-adamw-8bit"}, "training.optimizer"),
    ({"optimizer": "paged-adamw"}, "training.optimizer"),
    ({"optimizer": "adamw-4bit"}, "training.optimizer"),
    ({"optimizer": "adamw-8bit"}, "training.optimizer"),
])
def test_what_fake_tensors_cannot_run_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               training: dict[str, Any], field: str) -> None:
    """Never a number for another setup: exit 2, the field named, nothing on stdout."""
    body = copy.deepcopy(TINY)
    body["training"].update(training)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(body))
    with pytest.raises(SystemExit) as exc:
        main([str(path), "--trace"])
    out, err = capsys.readouterr()
    assert exc.value.code == 2
    assert err.startswith(f"Error: {field}: ") and out == ""


def _stack(loss: str) -> dict[str, Any]:
    return {"loss": loss, "liger_kernels": False, "offload": "none", "optimizer": "adamw", "alloc_conf": None}


def _ids() -> Any:
    import torch

    return torch.randint(0, 32000, (1, 64), generator=torch.Generator().manual_seed(0))


def _random_model(req: EstimateRequest, cfg: Any, st: dict[str, Any] | None = None,
                  info: dict[str, Any] | None = None) -> Any:
    """--run's build of ``req`` (with the loss ``st`` installed) on the CPU, random weights, in fp32."""
    from app.check.random_init import init_weights, materialize
    from app.check.trace import _build

    model = _build(req, cfg, st, info)
    materialize(model, "cpu")
    init_weights(model, "cpu")
    return model.float()


def _installed_loss(req: EstimateRequest, cfg: Any, st: dict[str, Any], info: dict[str, Any], ids: Any) -> float:
    """The loss of the model with ``st``'s loss installed, as --run calls it."""
    from app.check.trace import loss_kwargs

    model = _random_model(req, cfg, st, info)
    return float(model(input_ids=ids, labels=ids, **loss_kwargs(st)).loss.detach())


@pytest.mark.parametrize("method", ["full", "lora"])
def test_the_installed_chunked_loss_computes_the_materialized_loss(method: str) -> None:
    """On real (CPU) tensors of a tiny model, the loss --run / --trace install (a replaced ``forward``, under peft
    for LoRA) and the loss measure_stacks.py's ``make_loss`` computes (the backbone called directly) both equal
    Hugging Face's ForCausalLMLoss on the same weights and tokens: the chunks change memory, not the loss."""
    from app.check.trace import hf_config

    req = _request(method=method, seq_len=64, activation_checkpointing="none")
    cfg = hf_config(req)
    ids = _ids()
    losses = {}
    warnings.simplefilter("ignore")  # transformers' / peft's deprecation notes (restored by pytest after the test)
    for loss in ("hf", "torchtune"):
        st, info = _stack(loss), {}
        losses[loss] = _installed_loss(req, cfg, st, info, ids)
        if loss == "torchtune":
            assert info["loss_impl"].startswith("torchtune CEWithChunkedOutputLoss")
            losses["make_loss"] = float(stacks.make_loss({"stack": st}, _random_model(req, cfg), ids, {})().detach())
    assert losses["torchtune"] == pytest.approx(losses["hf"], rel=1e-5)
    assert losses["make_loss"] == pytest.approx(losses["hf"], rel=1e-5)
    assert 9.0 < losses["hf"] < 11.5  # about ln(32000) = 10.4 for random weights: a real loss, not a constant


def test_trl_s_fused_head_computes_the_materialized_loss() -> None:
    """TRL's add_fused_lm_head (ChunkedLogProbFunction, its torch tiles on the CPU), installed before peft as
    measure_stacks.py installs it: the same loss as Hugging Face's on the same weights (trl is in the test extra)."""
    from app.check.trace import hf_config

    warnings.simplefilter("ignore")
    req = _request(method="lora", seq_len=64, activation_checkpointing="none")
    cfg = hf_config(req)
    ids = _ids()
    losses = {}
    info: dict[str, Any] = {}
    for loss in ("hf", "trl"):
        info = {}
        losses[loss] = _installed_loss(req, cfg, _stack(loss), info, ids)
    assert info["trl"]["version"]
    assert losses["trl"] == pytest.approx(losses["hf"], rel=1e-5)


# ------------------------------------------------------------------------------------- --run's path on the CPU
def _cpu_run(req: EstimateRequest) -> dict[str, Any]:
    from app.check.run import run_steps

    warnings.simplefilter("ignore")
    return run_steps(req, estimate(req, CATALOG), 3, "cpu")


@pytest.mark.parametrize("gpus", [1, 8])
def test_run_applies_the_chunked_loss_and_muon_one_gpu_and_fsdp2(gpus: int) -> None:
    """--run's own steps (``run_steps`` on the CPU: the same build, FSDP2 wrap on the fake group, optimizer and
    loss as on the GPU) with torchtune's loss and Muon: what ran is recorded, the loss is the materialized one's
    (the same weights and tokens), and under FSDP2 the loss' decoder stack and LM head are their own units as
    measure_stacks.py makes them."""
    par = {"sharding": "fsdp"} if gpus > 1 else {}
    body = copy.deepcopy(TINY) | {"parallelism": par}
    body["hardware"] = {"gpu": "h100-sxm5-80gb", "gpus_per_node": gpus}
    body["training"].update(seq_len=64, precision="bf16-true")
    plain = _cpu_run(EstimateRequest.model_validate(body))
    body["training"].update(loss_kernel="chunked", optimizer="muon", optimizer_impl="for-loop")
    raw = _cpu_run(EstimateRequest.model_validate(body))
    assert raw["stack"] == {"loss": "torchtune", "liger_kernels": False, "offload": "none", "optimizer": "muon",
                            "alloc_conf": None}
    assert set(raw["mechanisms"]) == {"loss_kernel", "optimizer"}
    assert raw["mechanism_settings"]["optimizer"]["class"].startswith("torch.optim.Muon")
    assert raw["mechanism_settings"]["optimizer"]["muon_params"] == 2 * (2 * 256 * 256 + 2 * 128 * 256 + 3 * 256 * 512)
    # step 1's loss is the untrained model's: the chunked loss computes the same number (bf16 logits: 1e-2)
    assert raw["phase_peaks"][0]["loss"] == pytest.approx(plain["phase_peaks"][0]["loss"], rel=1e-2)
    assert raw.get("fsdp_extra_units") == (["model.model", "lm_head"] if gpus > 1 else None)
    assert "fsdp_extra_units" not in plain


def test_the_record_s_mechanisms_are_validated_as_the_api_validates_them() -> None:
    """``measured.mechanisms`` (field -> what ran) is part of the record's contract: a field name in lower-case
    words, a reason of at most 500 characters; anything else is refused (the API's 422)."""
    from pydantic import ValidationError

    from app.schemas.measurement import MeasurementCreate

    rec = _check(_request(loss_kernel="chunked"))
    assert MeasurementCreate.model_validate(rec).measured.mechanisms == rec["measured"]["mechanisms"]
    for bad in ({"Loss Kernel": "x"}, {"loss_kernel": ""}, {"loss_kernel": "x" * 501}):
        with pytest.raises(ValidationError, match="mechanisms"):
            MeasurementCreate.model_validate(rec | {"measured": rec["measured"] | {"mechanisms": bad}})
