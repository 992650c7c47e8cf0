"""FLOP counts of estimator.training.flops against the closed forms they follow.

- 6 N T for dense training (Kaplan et al. 2020, arXiv 2001.08361, Sec. 2.1) plus causal attention
  ``6 L b s^2 h / 2`` (Narayanan et al. 2021, arXiv 2104.04473, Eq. 2 without the causal saving, halved here
  for flash attention's skipped blocks).
- LoRA: the frozen base has no weight-gradient GEMMs (Hu et al. 2021), so 4 N T plus the adapters.
- Mixture of experts: active parameters only (Fedus et al. 2021, arXiv 2101.03961).
"""

from __future__ import annotations

from typing import Any

import pytest

from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.training.flops import attention_flops, model_flops_per_step, workload
from estimator.training.layout import build_layout


def _setup(training: dict[str, Any] | None = None, parallelism: dict[str, Any] | None = None,
           model: str = "llama-3.1-8b", gpus: int = 1) -> tuple[EstimateRequest, ModelShape, Any]:
    req = EstimateRequest.model_validate({
        "model": model, "training": {"micro_batch_size": 1, "seq_len": 4096, **(training or {})},
        "parallelism": parallelism or {}, "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": gpus}})
    shape = ModelShape(resolve_model(req.model))
    return req, shape, build_layout(job_of(req), shape)


def _matmul_params(shape: ModelShape) -> int:
    """Parameters that take part in a GEMM: everything but the embedding lookup and the norms."""
    lm_head = shape.arch.vocab_size * shape.arch.hidden_size
    norms = shape.norm_params_per_layer() * shape.arch.num_layers + shape.final_norm_params()
    return shape.total_params() - shape.embedding_params() - norms + (lm_head if shape.arch.tied_embeddings else 0)


def _causal_attention(shape: ModelShape, s: int) -> float:
    a = shape.arch
    return 2.0 * a.num_layers * (s * s / 2.0) * 2 * a.num_attention_heads * shape.head_dim


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.2-1b", "qwen2.5-7b", "mistral-7b"])
def test_dense_model_flops_are_6nt_plus_causal_attention(model: str) -> None:
    req, shape, layout = _setup(model=model)
    tokens = 4096
    got = model_flops_per_step(job_of(req), shape, layout, workload(job_of(req), shape, layout))
    expected = 6.0 * _matmul_params(shape) * tokens + 3.0 * _causal_attention(shape, 4096)
    assert got == pytest.approx(expected, rel=0.002)


def test_lora_skips_weight_gradients_of_the_frozen_base() -> None:
    req, shape, layout = _setup({"method": "lora", "lora_rank": 16})
    got = model_flops_per_step(job_of(req), shape, layout, workload(job_of(req), shape, layout))
    base = 4.0 * _matmul_params(shape) * 4096 + 3.0 * _causal_attention(shape, 4096)
    assert base < got < base * 1.01  # the rank-16 adapters add well under 1%


def test_moe_counts_active_experts_only() -> None:
    req, shape, layout = _setup(model="mixtral-8x7b")
    got = model_flops_per_step(job_of(req), shape, layout, workload(job_of(req), shape, layout))
    active = shape.active_params() - shape.embedding_params()
    assert got == pytest.approx(6.0 * active * 4096 + 3.0 * _causal_attention(shape, 4096), rel=0.01)


def test_flash_attention_halves_the_causal_scores_eager_does_not() -> None:
    req, shape, layout = _setup({"attention": "flash"})
    eager = _setup({"attention": "eager"})[0]
    flash_flops, _ = attention_flops(shape, job_of(req), layout)
    eager_flops, _ = attention_flops(shape, job_of(eager), layout)
    assert eager_flops == pytest.approx(2.0 * flash_flops)


def test_sliding_window_caps_the_key_length() -> None:
    req, shape, layout = _setup({"seq_len": 16384})
    windowed = shape.arch.model_copy(update={"sliding_window": 4096})
    w_shape = ModelShape(windowed)
    full, seq_full = attention_flops(shape, job_of(req), layout)
    part, seq_part = attention_flops(w_shape, job_of(req), layout)
    assert seq_full == 16384 and seq_part == 4096
    assert part == pytest.approx(full * (16384 * 4096 - 4096**2 / 2) / (16384**2 / 2))


@pytest.mark.parametrize("par", [{"tp": 2}, {"tp": 8}, {"cp": 4}, {"tp": 2, "cp": 2}])
def test_tensor_and_context_parallel_split_the_work_evenly(par: dict[str, int]) -> None:
    req1, shape, l1 = _setup()
    reqn, _, ln = _setup(parallelism=par, gpus=8)
    one = workload(job_of(req1), shape, l1)
    split = workload(job_of(reqn), shape, ln)
    assert one.dense is not None and split.dense is not None
    ways = par.get("tp", 1) * par.get("cp", 1)
    assert split.dense.gemm_flops * ways == pytest.approx(one.dense.gemm_flops, rel=1e-9)
    assert split.dense.attn_flops * ways == pytest.approx(one.dense.attn_flops, rel=1e-9)


def test_model_flops_do_not_depend_on_the_layout() -> None:
    req1, shape, l1 = _setup()
    one = model_flops_per_step(job_of(req1), shape, l1, workload(job_of(req1), shape, l1))
    req8, _, l8 = _setup(parallelism={"tp": 2, "cp": 2}, gpus=8)
    eight = model_flops_per_step(job_of(req8), shape, l8, workload(job_of(req8), shape, l8))
    assert eight == pytest.approx(2 * one, rel=1e-6)  # dp = 2 replicas of the one-GPU step


def test_fp8_marks_the_decoder_linears_not_the_lm_head() -> None:
    req, shape, layout = _setup({"precision": "fp8-mixed"})
    work = workload(job_of(req), shape, layout)
    assert work.dense is not None and all(g.fp8 for g in work.dense.gemms)
    assert not work.head.fp8


def test_layer_parts_are_shared_only_where_they_are_equal() -> None:
    """``flops._memo_layer_parts`` keys the layout by its tensor and expert degrees only: for layouts that differ
    in node count, sharding, pipeline or context degree, tensor or expert degree, method and LoRA kernel, each
    memoised answer is the one computed afresh for that very layout (fails when a read is left out of the key)."""
    from estimator.memo import clear_all
    from estimator.model.spec import shape_for
    from estimator.training.flops import _layer_parts, _memo_layer_parts
    from estimator.training.layout import build_layout

    clear_all()
    cases: list[tuple[str, dict[str, object], int, dict[str, object]]] = [
        ("llama-3.1-70b", {"sharding": sh, "tp": tp, "pp": pp, "cp": cp}, nodes, training)
        for sh in ("zero1", "zero3") for tp, pp, cp in ((1, 1, 1), (8, 1, 1), (4, 2, 1), (8, 2, 2))
        for nodes in (4, 8) for training in ({"method": "full"}, {"method": "lora"},
                                             {"method": "lora", "lora_kernel": "fused"})]
    cases += [("mixtral-8x7b", {"sharding": "zero1", "tp": tp, "ep": ep}, 2, {"method": "full"})
              for tp in (1, 2) for ep in (1, 2, 4)]
    for model, par, nodes, training in cases:
        req = EstimateRequest.model_validate({"model": model, "training": training, "parallelism": par,
                                              "hardware": {"num_nodes": nodes}})
        shape = shape_for(req.model)
        job = job_of(req)
        layout = build_layout(job, shape)
        for moe in (False, True) if shape.is_moe else (False,):
            assert _fields(_memo_layer_parts(job, shape, layout, moe)) == _fields(_layer_parts(job, shape, layout, moe))


def _fields(parts: Any) -> tuple[object, ...]:
    names = ("gemms", "base_linear_params", "ffn_local", "qk_local", "lora_elems", "experts_local", "flash_library")
    return tuple(getattr(parts, n) for n in names)
