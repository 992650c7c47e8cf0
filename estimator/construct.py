"""pydantic models made in the hot paths: the response's parts, validated, and the planner's request copies.

Calling a model class runs ``BaseModel.__init__``, a Python function whose only work is to hand its keyword
arguments to the class's compiled validator (``self.__pydantic_validator__.validate_python(data,
self_instance=self)``, ``pydantic/main.py``); :func:`validated` calls that validator directly (the same checks,
coercions, errors and instance). The planner builds one :class:`~estimator.request.EstimateRequest` per layout
it prices (a few thousand per search), each the search's base request with its training, parallelism and
hardware sections replaced; pydantic's ``model_copy(update=...)`` is Python-level code (``BaseModel.__copy__``
through ``copy.copy``) that costs more than the lookups around it, and :func:`replaced` builds the same instance
directly.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["replaced", "validated"]

M = TypeVar("M", bound=BaseModel)


def validated(cls: type[M], **fields: Any) -> M:
    """``cls(**fields)``: the model validated by its class's validator, without ``BaseModel.__init__``'s Python
    frame (module docstring). For models without their own ``__init__`` (``tests/test_construct.py``)."""
    model: M = cls.__pydantic_validator__.validate_python(fields)
    return model


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
