"""Memo correctness: an estimate's answer does not depend on what was estimated before it in the process.

Every estimator memo keys a sub-result by the request fields (and layout fields) its function reads; a field
left out of a key makes a later request that differs only there reuse an earlier request's sub-result (the LoRA
rank in the activation rates' key did: tests/test_memory_parallel.py). For a few base requests and, in turn, each
request field set to other values, the request's whole answer right after the base request (memos full of the
base's sub-results) must be byte for byte its answer with every memo emptied first.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from estimator import EstimateRequest, EstimatorError, estimate
from estimator.memo import clear_all
from estimator.model.spec import clear_shapes

BASES: dict[str, dict[str, Any]] = {
    "8B LoRA FSDP, 2 nodes": {
        "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 2},
        "training": {"method": "lora", "seq_len": 4096, "micro_batch_size": 2, "activation_checkpointing": "selective"},
        "parallelism": {"sharding": "zero3"}},
    "70B Megatron TP8 PP2": {
        "model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 4},
        "training": {"method": "full", "gradient_accumulation_steps": 8, "activation_checkpointing": "selective"},
        "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 8, "pp": 2, "sequence_parallel": True}},
    "Mixtral EP DeepSpeed": {
        "model": "mixtral-8x7b", "hardware": {"gpu": "a100-sxm4-80gb", "num_nodes": 2},
        "training": {"method": "full", "activation_checkpointing": "full"},
        "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 2, "ep": 4, "sequence_parallel": True}},
}

# (section, field, values to try); each changes one field of a base request
CHANGES: list[tuple[str, str, list[Any]]] = [
    ("training", "method", ["full", "lora", "qlora"]),
    ("training", "lora_rank", [8, 256]),
    ("training", "lora_targets", ["attention", "qkv"]),
    ("training", "lora_dropout", [0.1]),
    ("training", "lora_kernel", ["fused", "peft"]),
    ("training", "precision", ["fp32", "bf16-true", "fp8-mixed"]),
    ("training", "optimizer", ["sgd", "adamw-8bit", "adafactor"]),
    ("training", "optimizer_impl", ["foreach"]),
    ("training", "micro_batch_size", [1, 4]),
    ("training", "seq_len", [2048, 8192]),
    ("training", "gradient_accumulation_steps", [1, 16]),
    ("training", "activation_checkpointing", ["none", "full"]),
    ("training", "attention", ["eager", "sdpa"]),
    ("training", "train_tokens", [1e9]),
    ("training", "pipeline_schedule", ["interleaved"]),
    ("training", "virtual_stages", [2]),
    ("parallelism", "sharding", ["none", "zero1", "zero2", "hsdp"]),
    ("parallelism", "tp", [1, 2, 4]),
    ("parallelism", "pp", [1, 4]),
    ("parallelism", "cp", [2]),
    ("parallelism", "ep", [1, 2]),
    ("parallelism", "sequence_parallel", [False, True]),
    ("parallelism", "offload", ["optimizer", "optimizer+params"]),
    ("parallelism", "framework", ["pytorch", "deepspeed", "megatron"]),
    ("parallelism", "tp_plan", ["replicated-embeddings"]),
    ("parallelism", "tp_comm_overlap", ["off"]),
    ("hardware", "gpu", ["h200-sxm-141gb", "b200-sxm-180gb"]),
    ("hardware", "server", ["dell-xe9680-h100", "hpe-cray-xd670-h100"]),
    ("hardware", "num_nodes", [1, 8]),
    ("hardware", "gpus_per_node", [4]),
]


def _answer(body: dict[str, Any]) -> str | None:
    """The whole response as JSON, or ``None`` for a request the contract or the estimator refuses."""
    try:
        return estimate(EstimateRequest.model_validate(body)).model_dump_json()
    except (ValidationError, EstimatorError):
        return None


def _fresh(body: dict[str, Any]) -> str | None:
    clear_all()
    clear_shapes()
    return _answer(body)


@pytest.mark.parametrize("base", list(BASES))
def test_an_answer_does_not_depend_on_the_request_before_it(base: str) -> None:
    compared = 0
    for section, field, values in CHANGES:
        for value in values:
            body = {**BASES[base], section: {**BASES[base].get(section, {}), field: value}}
            expected = _fresh(body)
            if expected is None:
                continue
            clear_all()
            _answer(BASES[base])
            assert _answer(body) == expected, f"{base}: {section}.{field} = {value!r} after the base request"
            compared += 1
    assert compared >= 25, compared
