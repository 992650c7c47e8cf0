"""Invalid layouts and combinations get a clear error that names the request field."""

import pytest
from pydantic import ValidationError

from estimator.errors import EstimatorError, InvalidRequestError, UnsupportedCombinationError
from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.training.layout import build_layout


def _layout(**kw: object):  # type: ignore[no-untyped-def]
    req = EstimateRequest.model_validate(kw)
    return build_layout(job_of(req), ModelShape(resolve_model(req.model)))


@pytest.mark.parametrize(
    ("request_fields", "field", "message"),
    [
        ({"model": "llama-3.1-8b", "parallelism": {"tp": 3}, "hardware": {"gpus_per_node": 3}}, "parallelism.tp",
         "num_attention_heads"),
        ({"model": "llama-3.1-8b", "parallelism": {"pp": 40}, "hardware": {"num_nodes": 5}}, "parallelism.pp",
         "num_layers"),
        ({"model": "llama-3.1-8b", "parallelism": {"pp": 4, "first_stage_layers": 6}},
         "parallelism.first_stage_layers", "evenly"),
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
        ({"model": "llama-3.1-8b", "training": {"virtual_stages": 2, "pipeline_schedule": "interleaved"}},
         "training.virtual_stages", "pp > 1"),
        ({"model": "llama-3.1-8b", "training": {"pipeline_schedule": "interleaved", "virtual_stages": 2,
                                                "gradient_accumulation_steps": 6},
          "parallelism": {"pp": 4, "sharding": "none"}}, "training.gradient_accumulation_steps", "multiple of pp"),
        ({"model": "llama-3.1-8b", "parallelism": {"sharding": "hsdp", "hsdp_shard_size": 3}},
         "parallelism.hsdp_shard_size", "must divide"),
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
        ({"training": {"micro_batch_size": True}}, ("training", "micro_batch_size")),
        ({"training": {"seq_len": False}}, ("training", "seq_len")),
        ({"parallelism": {"tp": True}}, ("parallelism", "tp")),
        ({"training": {"train_tokens": 1e308}}, ("training", "train_tokens")),
        ({"training": {"train_tokens": 2e16}}, ("training", "train_tokens")),
        ({"training": {"train_tokens": True}}, ("training", "train_tokens")),
        ({"training": {"virtual_stages": 2}}, ("training", "virtual_stages")),
        ({"training": {"virtual_stages": 2, "pipeline_schedule": "gpipe"}}, ("training", "virtual_stages")),
        ({"parallelism": {"hsdp_shard_size": 8}}, ("parallelism", "hsdp_shard_size")),
        ({"parallelism": {"sharding": "fsdp", "hsdp_shard_size": 8}}, ("parallelism", "hsdp_shard_size")),
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


def test_infinite_train_tokens_are_refused() -> None:
    """JSON cannot carry Infinity, but Python callers (and lenient parsers) can: it must not reach train.py."""
    with pytest.raises(ValidationError) as info:
        EstimateRequest.model_validate({"training": {"train_tokens": float("inf")}})
    assert info.value.errors()[0]["loc"] == ("training", "train_tokens")


def test_numeric_strings_stay_accepted_for_the_web_form() -> None:
    """The web form submits text: "4" is still 4 (only booleans are refused for integer fields)."""
    assert EstimateRequest.model_validate({"training": {"micro_batch_size": "4"}}).training.micro_batch_size == 4


def _model_error_fields(arch: dict) -> set[str]:
    with pytest.raises(ValidationError) as info:
        EstimateRequest.model_validate({"model": arch})
    # a union: pydantic reports every member; keep the ModelArch member's errors, without its tag
    return {str(e["loc"][-1]) for e in info.value.errors() if len(e["loc"]) == 3}


SHAPE = {"num_layers": 2, "hidden_size": 96, "num_attention_heads": 3, "ffn_hidden_size": 256,
         "vocab_size": 1000}


@pytest.mark.parametrize(("change", "field"), [
    ({"hidden_size": 100}, "hidden_size"),  # 100 / 3 heads, and no head_dim
    ({"num_kv_heads": 2}, "num_kv_heads"),
    ({"num_experts": 4, "experts_per_token": 8}, "experts_per_token"),
    ({"first_dense_layers": 3}, "first_dense_layers"),
    ({"moe_ffn_hidden_size": 10**9}, "moe_ffn_hidden_size"),
    ({"q_lora_rank": 10**9}, "q_lora_rank"),
    ({"kv_lora_rank": 10**9}, "kv_lora_rank"),
    ({"v_head_dim": 10**6}, "v_head_dim"),
    ({"sliding_window": 10**12}, "sliding_window"),
    ({"first_dense_layers": 10**6}, "first_dense_layers"),
    ({"learned_position_embeddings": 10**12}, "learned_position_embeddings"),
    ({"final_logit_softcapping": 1e300}, "final_logit_softcapping"),
    ({"num_layers": True}, "num_layers"),
])
def test_inline_model_errors_name_the_field(change: dict, field: str) -> None:
    assert field in _model_error_fields({**SHAPE, **change})


def test_head_dim_makes_an_indivisible_hidden_size_valid() -> None:
    req = EstimateRequest.model_validate({"model": {**SHAPE, "hidden_size": 100, "head_dim": 32}})
    assert not isinstance(req.model, str)
