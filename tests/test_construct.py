"""estimator.construct.replaced: the same new instance as pydantic's ``model_copy(update=...)``, for the request
models the planner copies (and through ``model_copy`` itself for a model with private attributes or extras)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, PrivateAttr

from estimator.construct import replaced
from estimator.request import EstimateRequest, Hardware, Parallelism, Training

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

