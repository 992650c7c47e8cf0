"""estimator.construct: ``replaced`` is the same new instance as pydantic's ``model_copy(update=...)``, for the
request models the planner copies (and goes through ``model_copy`` itself for a model with private attributes or
extras); ``trusted`` is the same instance as validating the values, for the response's parts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from estimator.construct import replaced, trusted
from estimator.errors import EstimatorError
from estimator.estimate import estimate
from estimator.messages import Num, Text
from estimator.request import EstimateRequest, Hardware, Parallelism, Training
from estimator.response import HostResult
from estimator.tco.run_cost import CostBasis
from hardware_catalog import load_catalog

BASE = EstimateRequest.model_validate({"model": "llama-3.1-70b", "training": {"method": "lora", "seq_len": 2048},
                                       "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 2}})
UPDATES: list[tuple[BaseModel, dict[str, Any]]] = [
    (BASE, {"training": Training(seq_len=4096), "parallelism": Parallelism(tp=8, sequence_parallel=True),
            "hardware": Hardware(gpu="a100-sxm4-80gb", num_nodes=4)}),
    (BASE.training, {"micro_batch_size": 4, "gradient_accumulation_steps": 16, "activation_checkpointing": "full",
                     "virtual_stages": 2, "pipeline_schedule": "interleaved"}),
    (BASE, {}),
]


def _state(m: BaseModel) -> tuple[object, ...]:
    return (type(m), dict(m.__dict__), m.model_fields_set, m.__pydantic_extra__, m.__pydantic_private__,
            m.model_dump_json())


@pytest.mark.parametrize(("model", "update"), UPDATES)
def test_replaced_is_model_copy(model: BaseModel, update: dict[str, Any]) -> None:
    new = replaced(model, update)
    assert _state(new) == _state(model.model_copy(update=update))
    assert new == model.model_copy(update=update)
    assert new is not model and new.__dict__ is not model.__dict__


def test_replaced_leaves_the_original_alone() -> None:
    before = _state(BASE)
    replaced(BASE, {"training": Training(seq_len=8192)})
    assert _state(BASE) == before
    assert BASE.training.seq_len == 2048


def test_a_model_with_private_attributes_or_extras_goes_through_model_copy() -> None:
    class Private(BaseModel):
        x: int = 1
        _cache: dict[str, int] = PrivateAttr(default_factory=dict)

    class Extra(BaseModel):
        model_config = ConfigDict(extra="allow")
        x: int = 1

    p = Private()
    p._cache["k"] = 3
    assert _state(replaced(p, {"x": 2})) == _state(p.model_copy(update={"x": 2}))
    e = Extra.model_validate({"x": 1, "y": 5})
    assert _state(replaced(e, {"x": 2})) == _state(e.model_copy(update={"x": 2}))
    assert replaced(e, {"x": 2}).model_dump() == {"x": 2, "y": 5}



# ------------------------------------------------------------------------------------------ trusted results
# estimator.construct.trusted builds the instance validation builds, or validates: compared on hand-made values
# (each kind of field, each value validation converts or refuses) and on every part of real responses.

def _deep(value: object) -> object:
    """A value with the exact type of every part (a float 1.0 and an int 1 differ; a Text and a str differ)."""
    if isinstance(value, BaseModel):
        return (type(value), tuple((k, _deep(v)) for k, v in value.__dict__.items()),
                frozenset(value.model_fields_set), value.__pydantic_extra__, value.__pydantic_private__)
    if isinstance(value, list):
        return (list, tuple(_deep(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((type(k), k, _deep(v)) for k, v in value.items()))
    return (type(value), value)


def _same_as_validated(cls: type[BaseModel], values: dict[str, Any]) -> BaseModel:
    built = trusted(cls, **values)
    assert _deep(built) == _deep(cls(**values))
    return built


def _host_values() -> dict[str, Any]:
    return {"ram_bytes_per_node": 2 << 40, "ram_bytes_per_process": 1 << 30, "ram_breakdown_bytes": {"weights": 5},
            "nvme_bytes": 7, "checkpoint_bytes": 9, "checkpoint_write_s": 1.5, "dataset_read_bytes_per_s": 3,
            "network_bytes_per_s_per_node": 0.0, "power_w_per_node": 10200, "fits_server": True,
            "warnings": [Text("Power: %(kw)s kW", kw=Num(12.0, ".1f")), "plain"], "fabric": Text("Single node."),
            "checkpoint_target": Text("local"), "notes": []}


@pytest.mark.parametrize("change", [
    {},  # as computed: ints for int fields, an int for a float field (made 1.0 as validation makes it), messages
    {"checkpoint_write_s": True},  # a bool for a float: validation makes it 1.0
    {"nvme_bytes": True},  # a bool for an int: validation makes it 1
    {"nvme_bytes": 7.0},  # a whole float for an int: validation makes it 7
    {"ram_peak_phase": Text("forward")},  # a Text for a plain str: validation makes it a str
    {"ram_breakdown_bytes": {"weights": 5.0}},  # a float in a dict of ints
    {"warnings": ("a", "b")},  # a tuple for a list
])
def test_trusted_builds_what_validation_builds(change: dict[str, Any]) -> None:
    _same_as_validated(HostResult, {**_host_values(), **change})


def test_trusted_keeps_messages_and_copies_containers() -> None:
    values = _host_values()
    built = trusted(HostResult, **values)
    assert type(built.warnings[0]) is Text and type(built.fabric) is Text  # the page translates these
    assert type(built.checkpoint_target) is str and type(built.checkpoint_write_s) is float
    assert built.warnings is not values["warnings"] and built.ram_breakdown_bytes is not values["ram_breakdown_bytes"]
    assert built.model_fields_set == set(values)


@pytest.mark.parametrize("change", [
    {"nvme_bytes": "x"},  # not a number
    {"nvme_bytes": 7.5},  # a fraction for an int
    {"unknown_field": 1},  # extra="forbid"
    {"warnings": [1]},  # not a message
])
def test_trusted_refuses_what_validation_refuses(change: dict[str, Any]) -> None:
    values = {**_host_values(), **change}
    with pytest.raises(ValidationError) as ours:
        trusted(HostResult, **values)
    with pytest.raises(ValidationError) as theirs:
        HostResult(**values)
    assert ours.value.errors() == theirs.value.errors()


def test_trusted_refuses_a_missing_field_and_a_bad_literal() -> None:
    values = _host_values()
    del values["fits_server"]
    with pytest.raises(ValidationError, match="fits_server"):
        trusted(HostResult, **values)
    basis = {"basis": "lease", "usd_per_gpu_hour": 2.0, "label": "x", "source": "y", "date": None,
             "confidence": "high", "pricing": "on-demand"}
    with pytest.raises(ValidationError, match="basis"):
        trusted(CostBasis, **basis)
    _same_as_validated(CostBasis, {**basis, "basis": "rent", "provider_class": None, "utilisation": 1})


def test_a_class_it_does_not_cover_is_validated() -> None:
    class Bounded(BaseModel):
        n: int = Field(ge=0)

    with pytest.raises(ValidationError):
        trusted(Bounded, n=-1)
    assert trusted(Bounded, n=True).n == 1 and type(trusted(Bounded, n=True).n) is int


def _models(value: object) -> list[BaseModel]:
    """Every pydantic instance in a response, the response first."""
    if isinstance(value, BaseModel):
        return [value, *(m for v in value.__dict__.values() for m in _models(v))]
    if isinstance(value, list):
        return [m for v in value for m in _models(v)]
    return []


def _guard_estimates() -> list[EstimateRequest]:
    from benchmarks.guard import requests

    out = []
    for kind, body in requests():
        if kind != "estimate":
            continue
        try:
            out.append(EstimateRequest.model_validate(body))
        except ValidationError:
            continue
    return out[::7]  # every seventh: grid, parallel layouts, host options, custom models, random mixes


def test_every_part_of_real_responses_is_what_validation_builds() -> None:
    """The guard's estimate requests (a seventh of them, every kind): each part of each response, rebuilt by
    validating the values it was built from, is the same down to the type of every value."""
    catalog = load_catalog()
    parts = 0
    for req in _guard_estimates():
        try:
            response = estimate(req, catalog)
        except EstimatorError:
            continue
        for model in _models(response):
            given = {k: getattr(model, k) for k in model.model_fields_set}
            assert _deep(model) == _deep(type(model)(**given)), type(model).__name__
            parts += 1
    assert parts > 1500
