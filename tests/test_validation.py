"""Invalid layouts and combinations get a clear error that names the request field."""

import pytest
from pydantic import ValidationError

from estimator.errors import EstimatorError, InvalidRequestError, UnsupportedCombinationError
from estimator.layout import build_layout
from estimator.modelspec import ModelShape, resolve_model
from estimator.request import EstimateRequest


def _layout(**kw: object):  # type: ignore[no-untyped-def]
    req = EstimateRequest.model_validate(kw)
    return build_layout(req, ModelShape(resolve_model(req.model)))


@pytest.mark.parametrize(
    ("request_fields", "field", "message"),
    [
        ({"model": "llama-3.1-8b", "parallelism": {"tp": 3}, "hardware": {"gpus_per_node": 3}}, "parallelism.tp",
         "num_attention_heads"),
        ({"model": "llama-3.1-8b", "parallelism": {"pp": 3}, "hardware": {"gpus_per_node": 3}}, "parallelism.pp",
         "num_layers"),
        ({"model": "llama-3.1-8b", "parallelism": {"tp": 4, "pp": 4}}, "parallelism", "not divisible"),
        ({"model": "llama-3.1-8b", "parallelism": {"ep": 2}}, "parallelism.ep", "mixture-of-experts"),
        ({"model": "mixtral-8x7b", "parallelism": {"ep": 3}, "hardware": {"gpus_per_node": 6}}, "parallelism.ep",
         "num_experts"),
        ({"model": "llama-3.1-8b", "parallelism": {"sequence_parallel": True}}, "parallelism.sequence_parallel",
         "tp > 1"),
        ({"model": "llama-3.1-8b", "parallelism": {"offload": "optimizer"}}, "parallelism.offload", "sharding"),
        ({"model": "llama-3.1-8b", "parallelism": {"sharding": "zero2", "offload": "optimizer+params"}},
         "parallelism.offload", "ZeRO-3"),
        ({"model": "llama-3.1-8b", "training": {"method": "qlora"},
          "parallelism": {"sharding": "zero3", "offload": "optimizer+params"}}, "parallelism.offload", "QLoRA"),
        ({"model": "llama-3.1-8b", "training": {"method": "qlora", "precision": "fp32"}}, "training.precision",
         "bf16"),
        ({"model": "llama-3.1-8b", "parallelism": {"framework": "megatron", "sharding": "zero3"}},
         "parallelism.sharding", "Megatron"),
        ({"model": "llama-3.1-8b", "training": {"virtual_stages": 2}}, "training.virtual_stages", "pp > 1"),
        ({"model": "llama-3.1-8b", "parallelism": {"cp": 8}, "training": {"seq_len": 4100}}, "parallelism.cp",
         "seq_len"),
    ],
)
def test_invalid_combination_names_the_field(request_fields: dict, field: str, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message) as info:
        _layout(**request_fields)
    assert info.value.field == field
    assert isinstance(info.value, ValueError)


def test_unsupported_is_a_kind_of_invalid() -> None:
    assert issubclass(UnsupportedCombinationError, InvalidRequestError)
    assert issubclass(InvalidRequestError, EstimatorError)


@pytest.mark.parametrize(
    ("payload", "loc"),
    [
        ({"training": {"micro_batchsize": 2}}, ("training", "micro_batchsize")),
        ({"training": {"method": "prefix-tuning"}}, ("training", "method")),
        ({"training": {"seq_len": 0}}, ("training", "seq_len")),
        ({"parallelism": {"sharding": "zero4"}}, ("parallelism", "sharding")),
        ({"hardware": {"num_nodes": -1}}, ("hardware", "num_nodes")),
    ],
)
def test_schema_errors_name_the_field(payload: dict, loc: tuple) -> None:
    with pytest.raises(ValidationError) as info:
        EstimateRequest.model_validate(payload)
    assert any(tuple(err["loc"][: len(loc)]) == loc for err in info.value.errors())


def test_fsdp_is_zero3() -> None:
    layout = _layout(model="llama-3.1-8b", parallelism={"sharding": "fsdp"})
    assert layout.sharding == "zero3" and layout.shard_group == 8


def test_hsdp_shards_within_a_node() -> None:
    layout = _layout(model="llama-3.1-8b", parallelism={"sharding": "hsdp"}, hardware={"num_nodes": 4})
    assert (layout.dp, layout.shard_group) == (32, 8)
