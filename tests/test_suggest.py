"""Suggestions for a request that does not fit: each one is a real change, re-estimated by the same model."""

from typing import Any

import pytest

from estimator.estimate import estimate
from estimator.request import EstimateRequest

GIB = 1 << 30

LORA_70B_XE9680 = {"model": "llama-3.1-70b", "training": {"method": "lora"}, "parallelism": {"sharding": "fsdp"},
                   "hardware": {"server": "dell-xe9680-h100"}}


def _apply(body: dict[str, Any], changes: dict[str, Any]) -> EstimateRequest:
    data = EstimateRequest.model_validate(body).model_dump()
    for dotted, value in changes.items():
        section, name = dotted.split(".", 1)
        data[section][name] = value
    return EstimateRequest.model_validate(data)


def test_a_fitting_request_has_no_suggestions() -> None:
    body = {**LORA_70B_XE9680, "training": {"method": "lora", "activation_checkpointing": "full"}}
    response = estimate(EstimateRequest.model_validate(body))
    assert response.memory.fits and response.suggestions == []


def test_70b_lora_without_checkpointing_is_told_to_checkpoint() -> None:
    """Llama 3.1 70B LoRA on 8x H100 without recomputation keeps 116 GiB of activations per GPU; full
    checkpointing alone is the smallest change that fits, so it is the first (and here the only) suggestion."""
    response = estimate(EstimateRequest.model_validate(LORA_70B_XE9680))
    assert not response.memory.fits
    first = response.suggestions[0]
    assert first.changes == {"training.activation_checkpointing": "full"} and first.fits
    assert "Full activation checkpointing" in response.warnings[0] and "fits" in response.warnings[0]


@pytest.mark.parametrize("body", [
    LORA_70B_XE9680,
    {"model": "llama-3.1-70b"},  # full fine-tune, plain DDP on 8x H100
    {"model": "llama-3.1-8b", "training": {"micro_batch_size": 4},
     "hardware": {"gpu": "l40s-48gb", "gpus_per_node": 1}},
], ids=["70b-lora-no-ckpt", "70b-full-ddp", "8b-full-one-l40s"])
def test_every_suggestion_is_what_the_changed_request_estimates(body: dict[str, Any]) -> None:
    response = estimate(EstimateRequest.model_validate(body))
    assert response.suggestions, "a request that does not fit gets suggestions"
    for s in response.suggestions:
        changed = estimate(_apply(body, s.changes)).memory
        assert (changed.total_bytes, changed.fits) == (s.total_bytes, s.fits), s.summary


def test_fitting_suggestions_are_minimal_and_keep_the_method_first() -> None:
    response = estimate(EstimateRequest.model_validate({"model": "llama-3.1-70b"}))
    fitting = [s for s in response.suggestions if s.fits]
    assert fitting == response.suggestions
    for s in fitting:  # no suggestion contains another one
        assert not any(o is not s and o.changes.items() <= s.changes.items() for o in fitting)
    kept = ["training.method" not in s.changes for s in fitting]
    assert kept == sorted(kept, reverse=True), "changes that keep the full fine-tune come before LoRA/QLoRA"


def test_when_nothing_fits_the_closest_changes_come_first() -> None:
    """Llama 3.1 405B on one A100 40GB: no lever fits; the list is ordered by the memory each leaves."""
    body = {"model": "llama-3.1-405b", "hardware": {"gpu": "a100-sxm4-40gb", "gpus_per_node": 1}}
    response = estimate(EstimateRequest.model_validate(body))
    totals = [s.total_bytes for s in response.suggestions]
    assert response.suggestions and not any(s.fits for s in response.suggestions)
    assert totals == sorted(totals) and totals[0] < response.memory.total_bytes
    assert "still does not fit" in response.warnings[0]
