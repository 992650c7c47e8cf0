"""pydantic instances built directly, for the estimator's hot paths.

- :func:`replaced`: the planner builds one :class:`~estimator.request.EstimateRequest` per layout it prices (a
  few thousand per search), each the search's base request with its training, parallelism and hardware sections
  replaced. pydantic's ``model_copy(update=...)`` is Python-level code (``BaseModel.__copy__`` through
  ``copy.copy``) that costs more than the lookups around it; :func:`replaced` builds the same instance directly.
- :func:`trusted`: every estimate builds its response's parts (memory, time, host, cost, layout ...) from values
  the estimator computed. Validating them again was about a third of a distinct estimate's machine instructions
  (pydantic-core checks each field, a message field through a Python ``isinstance``); :func:`trusted` builds
  the instance validation would build when each value already is what validation would make of it, and hands
  anything else to the class itself.
"""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Final, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

from estimator.messages import Message, Text

__all__ = ["replaced", "trusted"]

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


# ------------------------------------------------------------------------------------------ trusted results
# How a value is checked: a kind code, optionally "or None" (_OPTIONAL added), "a list of" or "a dict (str keys)
# of" (_LIST, _DICT added) one of the item kinds
# (Final int literals: compiled, each is a constant, where a module global would be a dict lookup at every use)
_SAME: Final = 0  # item kinds
_INT: Final = 1
_FLOAT: Final = 2
_BOOL: Final = 3
_STR: Final = 4
_MESSAGE: Final = 5
_LITERAL: Final = 6
_MODEL: Final = 7
_OBJECT_DICT: Final = 8
_OPTIONAL: Final = 16  # flags added to an item kind
_LIST: Final = 32
_DICT: Final = 64
_ITEM: Final = 15
_TEXT: Final = Text
_MISSING: Final = object()
_BAD: Final = object()
_MESSAGE_MARK: Final = get_args(Message)[1]  # what marks a message field (estimator.messages._KeepText)


class _Plan:
    """The fields of one response class as :func:`trusted` checks them, in the class's order."""

    names: Final[tuple[str, ...]]
    kinds: Final[tuple[int, ...]]
    required: Final[tuple[bool, ...]]
    defaults: Final[tuple[object, ...]]
    factories: Final[tuple[Any, ...]]
    literals: Final[tuple[frozenset[str] | None, ...]]
    models: Final[tuple[type | None, ...]]
    template: Final[dict[str, object]]  # every field, in order: copied, then filled (no resizing as it grows)

    def __init__(self, names: tuple[str, ...], kinds: tuple[int, ...], required: tuple[bool, ...],
                 defaults: tuple[object, ...], factories: tuple[Any, ...],
                 literals: tuple[frozenset[str] | None, ...], models: tuple[type | None, ...]) -> None:
        self.template = dict.fromkeys(names)
        self.names = names
        self.kinds = kinds
        self.required = required
        self.defaults = defaults
        self.factories = factories
        self.literals = literals
        self.models = models


_PLANS: Final[dict[type, _Plan | None]] = {}


def trusted(cls: type[M], /, **values: Any) -> M:
    """``cls(**values)``: the same instance (the same field values, of the same types; the same set fields),
    without validating values the estimator computed when each already is what validation would make of it: an
    ``int`` for an ``int``; a ``float``, or an ``int`` made a float, for a ``float``; a plain ``str`` (a
    :class:`~estimator.messages.Text` made one) for a ``str``; a ``str`` or ``Text`` for a message; one of a
    literal's values; an instance of a field's model class; lists and dicts (copied) of such. Anything else
    goes through ``cls(**values)``, with its conversions and its errors: another type, a missing or unknown
    field, and every class with constraints, validators, aliases or a configuration this does not cover.
    ``tests/test_construct.py`` compares the two on hand-made values and on every part of the guard's
    responses."""
    plan = _PLANS[cls] if cls in _PLANS else _plan(cls)
    if plan is None:
        return cls(**values)
    built: dict[str, Any] = plan.template.copy()
    found = 0
    names, kinds = plan.names, plan.kinds
    for i in range(len(names)):
        v = values.get(names[i], _MISSING)
        if v is _MISSING:
            if plan.required[i]:
                return cls(**values)
            factory = plan.factories[i]
            built[names[i]] = factory() if factory is not None else plan.defaults[i]
            continue
        found += 1
        c = _checked(plan, i, kinds[i], v)
        if c is _BAD:
            return cls(**values)
        built[names[i]] = c
    if found != len(values):
        return cls(**values)
    new = cls.__new__(cls)
    object.__setattr__(new, "__dict__", built)
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_fields_set__", set(values))
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def _checked(plan: _Plan, i: int, kind: int, v: object) -> object:
    """``v`` as validation leaves it, or ``_BAD`` where validation would convert it otherwise or refuse it."""
    if kind & _OPTIONAL:
        if v is None:
            return None
        kind -= _OPTIONAL
    if kind & _LIST:
        if type(v) is not list:
            return _BAD
        out = []
        for x in v:
            c = _item(plan, i, kind & _ITEM, x)
            if c is _BAD:
                return _BAD
            out.append(c)
        return out
    if kind & _DICT:
        if type(v) is not dict:
            return _BAD
        copied = {}
        for key, x in v.items():
            c = _item(plan, i, kind & _ITEM, x)
            if type(key) is not str or c is _BAD:
                return _BAD
            copied[key] = c
        return copied
    return _item(plan, i, kind, v)


def _item(plan: _Plan, i: int, kind: int, v: object) -> object:
    t = type(v)
    if kind == _INT:
        return v if t is int else _BAD
    if kind == _FLOAT:
        return v if t is float else float(v) if t is int else _BAD  # type: ignore[arg-type]
    if kind == _MESSAGE:
        return v if t is str or t is _TEXT else _BAD
    if kind == _STR:
        return v if t is str else str(v) if t is _TEXT else _BAD
    if kind == _BOOL:
        return v if t is bool else _BAD
    if kind == _LITERAL:
        allowed = plan.literals[i]
        return v if t is str and allowed is not None and v in allowed else _BAD
    if kind == _MODEL:
        model = plan.models[i]
        return v if model is not None and isinstance(v, model) else _BAD
    if kind == _OBJECT_DICT:
        return _object_dict(v)
    return v  # _SAME: ``object``


def _object_dict(v: object) -> object:
    """A ``dict[str, object]`` item, copied as validation copies it."""
    if type(v) is not dict:
        return _BAD
    copied = dict(v)
    return copied if all(type(k) is str for k in copied) else _BAD


class _Unsupported(Exception):
    pass


def _plan(cls: type) -> _Plan | None:
    """The class's :class:`_Plan`, worked out once; ``None``: not covered (always validated)."""
    try:
        plan: _Plan | None = _plan_of(cls)
    except _Unsupported:
        plan = None
    _PLANS[cls] = plan
    return plan


def _plan_of(cls: Any) -> _Plan:
    config = cls.model_config
    d = cls.__pydantic_decorators__
    if (config.get("strict") or config.get("allow_inf_nan", True) is False or config.get("extra") == "allow"
            or config.get("revalidate_instances", "never") != "never" or config.get("populate_by_name")
            or cls.__private_attributes__ or d.validators or d.field_validators or d.root_validators
            or d.model_validators):
        raise _Unsupported
    names, kinds, required, defaults, factories, literals, models = [], [], [], [], [], [], []
    for name, info in cls.model_fields.items():
        if (info.alias is not None and info.alias != name) or [m for m in info.metadata if m is not _MESSAGE_MARK]:
            raise _Unsupported
        if info.default_factory is None and isinstance(info.default, (list, dict, set)):
            raise _Unsupported  # pydantic copies a mutable default
        kind, allowed, model = _kind_of(info.annotation, _MESSAGE_MARK in info.metadata)
        names.append(name)
        kinds.append(kind)
        required.append(info.is_required())
        defaults.append(info.default)
        factories.append(info.default_factory)
        literals.append(allowed)
        models.append(model)
    return _Plan(tuple(names), tuple(kinds), tuple(required), tuple(defaults), tuple(factories),
                 tuple(literals), tuple(models))


def _kind_of(annotation: Any, message: bool) -> tuple[int, frozenset[str] | None, type | None]:
    """(kind, literal values, model class) of a field's annotation."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, UnionType):
        if len(args) != 2 or type(None) not in args:
            raise _Unsupported
        kind, allowed, model = _kind_of(next(a for a in args if a is not type(None)), message)
        if kind & (_OPTIONAL | _LIST | _DICT):
            raise _Unsupported
        return kind + _OPTIONAL, allowed, model
    if origin is list and len(args) == 1:
        kind, allowed, model = _item_kind(args[0], False)
        return kind + _LIST, allowed, model
    if origin is dict and len(args) == 2 and args[0] is str:
        kind, allowed, model = _item_kind(args[1], False)
        return kind + _DICT, allowed, model
    return _item_kind(annotation, message)


def _item_kind(annotation: Any, message: bool) -> tuple[int, frozenset[str] | None, type | None]:
    if message or (get_origin(annotation) is Annotated and list(get_args(annotation)) == [str, _MESSAGE_MARK]):
        return _MESSAGE, None, None
    simple = {int: _INT, float: _FLOAT, bool: _BOOL, str: _STR, object: _SAME}
    if annotation in simple:
        return simple[annotation], None, None
    if get_origin(annotation) is dict and list(get_args(annotation)) == [str, object]:
        return _OBJECT_DICT, None, None
    if get_origin(annotation) is Literal and all(type(a) is str for a in get_args(annotation)):
        return _LITERAL, frozenset(get_args(annotation)), None
    if (isinstance(annotation, type) and issubclass(annotation, BaseModel)
            and annotation.model_config.get("revalidate_instances", "never") == "never"):
        return _MODEL, None, annotation
    raise _Unsupported
