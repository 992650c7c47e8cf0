"""Copies of the request models with some fields replaced, for the planner's hot loop.

The planner builds one :class:`~estimator.request.EstimateRequest` per layout it prices (a few thousand per
search), each the search's base request with its training, parallelism and hardware sections replaced.
pydantic's ``model_copy(update=...)`` is Python-level code (``BaseModel.__copy__`` through ``copy.copy``) that
costs more than the lookups around it; :func:`replaced` builds the same instance directly.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["replaced"]

M = TypeVar("M", bound=BaseModel)


def replaced(model: M, update: dict[str, Any]) -> M:
    """``model.model_copy(update=update)``: a new instance of the model's class whose field values are the
    model's with ``update`` applied (not validated, as ``model_copy``'s are not) and whose set fields are the
    model's plus the updated ones. What pydantic's ``BaseModel.__copy__`` and ``model_copy`` set
    (``pydantic/main.py``): the ``__dict__``, ``__pydantic_fields_set__``, ``__pydantic_extra__`` and
    ``__pydantic_private__``. A model with extra fields or private attributes goes through ``model_copy``
    itself (``tests/test_construct.py`` compares the two)."""
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy(update=update)
    cls = type(model)
    new = cls.__new__(cls)
    values = dict(model.__dict__)
    values.update(update)
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    object.__setattr__(new, "__pydantic_private__", None)
    return new
