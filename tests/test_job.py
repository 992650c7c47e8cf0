"""estimator.job: the job a request becomes holds exactly the pydantic model's values, as compiled attributes."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from estimator.construct import replaced
from estimator.job import job_of
from estimator.memo import field_values
from estimator.model.spec import shape_for
from estimator.request import EstimateRequest, Hardware, ModelArch, Parallelism, Training

REQUESTS = [
    EstimateRequest(),
    EstimateRequest.model_validate({
        "model": "llama-3.1-70b",
        "training": {"method": "lora", "lora_rank": 64, "lora_targets": "attention", "precision": "fp8-mixed",
                     "optimizer": "adamw-8bit", "optimizer_impl": "foreach", "micro_batch_size": 3, "seq_len": 8192,
                     "gradient_accumulation_steps": 7, "activation_checkpointing": "selective", "train_tokens": 2e9,
                     "attention": "sdpa", "packed_document_tokens": 2048, "lora_dropout": 0.1,
                     "lora_kernel": "fused"},
        "parallelism": {"sharding": "fsdp", "tp": 2, "sequence_parallel": True, "offload": "optimizer+params",
                        "tp_comm_overlap": "on", "tp_plan": "replicated-embeddings"},
        "hardware": {"gpu": "a100-sxm4-80gb", "num_nodes": 2, "gpus_per_node": 4}}),
    EstimateRequest.model_validate({
        "model": "llama-3.1-405b",
        "training": {"pipeline_schedule": "interleaved", "virtual_stages": 2, "activation_checkpointing": "full"},
        "parallelism": {"framework": "megatron", "sharding": "hsdp", "hsdp_shard_size": 2, "tp": 8, "pp": 4,
                        "first_stage_layers": 30, "last_stage_layers": 30},
        "hardware": {"server": "dgx-h100", "num_nodes": 16}}),
]


def _pairs(req: EstimateRequest) -> list[tuple[BaseModel, object]]:
    v = job_of(req)
    return [(req.training, v.training), (req.parallelism, v.parallelism), (req.hardware, v.hardware)]


@pytest.mark.parametrize("req", REQUESTS)
def test_every_field_has_its_attribute_with_the_same_value(req: EstimateRequest) -> None:
    for model, fields in _pairs(req):
        for name in type(model).model_fields:
            value = getattr(fields, name)
            assert value == getattr(model, name) and type(value) is type(getattr(model, name)), name
        assert fields.values == field_values(model)  # type: ignore[attr-defined]


@pytest.mark.parametrize("req", REQUESTS)
def test_derived_values_are_the_models(req: EstimateRequest) -> None:
    v = job_of(req)
    assert v.request is req
    assert v.parallelism.normalized_sharding == req.parallelism.normalized_sharding
    assert v.parallelism.resolved_tp_plan == req.parallelism.resolved_tp_plan
    assert v.hardware.world_size == req.hardware.world_size
    assert v.dp == req.dp


def test_the_job_follows_the_request_object() -> None:
    a, b = REQUESTS[0], REQUESTS[1]
    assert job_of(a) is job_of(a)
    assert job_of(b).training.seq_len == 8192 and job_of(a).training.seq_len == 4096
    copy = replaced(a, {"training": Training(seq_len=1024)})  # an equal-looking request, another object
    assert job_of(copy).training.seq_len == 1024
    assert job_of(a).training.seq_len == 4096


def test_the_job_of_a_rebuilt_request_is_rebuilt() -> None:
    """A request freed and another made at the same address: the cache keeps the request it was made for, so
    ``is`` cannot match a newcomer."""
    seen = []
    for seq in (1024, 2048, 4096):
        req = EstimateRequest(training=Training(seq_len=seq), parallelism=Parallelism(), hardware=Hardware())
        seen.append(job_of(req).training.seq_len)
        del req
    assert seen == [1024, 2048, 4096]


def test_fields_are_read_by_name_when_the_dict_is_in_another_order() -> None:
    """The views read the model's values in field order (pydantic's ``__dict__`` order); a dict in another order
    (not one pydantic makes) is read by name."""
    req = REQUESTS[1]
    training = Training.model_validate(req.training.model_dump())
    object.__setattr__(training, "__dict__", dict(reversed(list(vars(training).items()))))
    odd = replaced(req, {"training": training})
    v = job_of(odd)
    for name in Training.model_fields:
        assert getattr(v.training, name) == getattr(req.training, name), name


def test_an_equal_section_of_another_request_shares_its_view_and_a_different_one_does_not() -> None:
    """A section equal to the last one viewed (value for value, type for type) is given that view; one field
    different in any section gives a view of its own, with that value."""
    base = REQUESTS[1]
    same = EstimateRequest.model_validate(base.model_dump())  # equal sections, other objects
    assert job_of(base).parallelism is job_of(same).parallelism and job_of(base).hardware is job_of(same).hardware
    changes = {"training": {"seq_len": 1024, "lora_dropout": 0.2, "train_tokens": None},
               "parallelism": {"tp": 4, "offload": "none", "tp_plan": None},
               "hardware": {"num_nodes": 3, "gpu": "h100-sxm5-80gb"}}
    for section, fields in changes.items():
        for name, value in fields.items():
            job_of(base)
            body = base.model_dump()
            body[section][name] = value
            other = EstimateRequest.model_validate(body)
            model, fields_view = getattr(other, section), getattr(job_of(other), section)
            for field in type(model).model_fields:
                assert getattr(fields_view, field) == getattr(model, field), (section, name, field)
            assert getattr(fields_view, name) == value


@pytest.mark.parametrize("model", ["llama-3.1-70b", "deepseek-v3", "mixtral-8x7b", "gemma-2-9b"])
def test_a_shapes_dims_hold_every_architecture_field(model: str) -> None:
    """``ModelShape.dims`` (modelspec.ArchDims) has every field of the pydantic architecture, with its value."""
    shape = shape_for(model)
    for name in ModelArch.model_fields:
        assert getattr(shape.dims, name) == getattr(shape.arch, name), name
