"""Messages for people that remember how they were written, so that a page can show them in another language.

The estimator speaks English: its warnings, assumptions, explanations and verdicts are English strings in the
API's JSON (a stable contract). A message written as ``Text(template, **params)`` *is* that English string
(``Text`` is a ``str``: ``template % params``, each parameter shown by its own ``__str__``), and it also keeps
its template and parameters. The app looks the template up in a gettext catalog and formats the parameters in
the reader's locale (``app/core/i18n.py``); the estimator itself knows nothing of locales or catalogs.

- ``Text("Does not fit: %(over)s GiB over ...", over=Num(x, ".1f"))``: the template is a gettext message id
  (``pybabel extract -k Text``, see ``babel.cfg``), with ``%(name)s`` placeholders and ``%%`` for a percent
  sign when it has parameters;
- :class:`Num`: a number and the Python format spec of its English form (``",.0f"``, ``".0%"``, ``"g"``); a
  locale shows the same digits with its own separators;
- :class:`Money`: US dollars (``$9,075``), shown in the locale's currency format (``US$ 9.075``);
- a parameter may be another ``Text`` (a clause), translated in its turn; any other value (a GPU name, an
  option id) is shown as it is;
- :func:`join` strings messages together (a paragraph of sentences) and keeps each one translatable;
  :func:`capitalized` upper-cases the first letter of one, in whatever language it is shown;
- :func:`N_` marks a constant message where it is defined (``gettext_noop``); it is translated where it is shown.

:data:`Message` is the type of a response field that holds one: a ``str`` in the JSON schema and on the wire,
kept as a ``Text`` when a response is built (pydantic would otherwise copy it into a plain ``str``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["N_", "Message", "Money", "Num", "Text", "capitalized", "join"]


def N_(message: str) -> str:
    """Marks a message for extraction (gettext_noop): the English text, translated where it is shown."""
    return message


@dataclass(frozen=True, slots=True)
class Num:
    """A number in a message: ``format(value, spec)`` in English (``1,157``, ``80%``, ``2.5``)."""

    value: float
    spec: str = ""

    def __str__(self) -> str:
        return format(self.value, self.spec)


@dataclass(frozen=True, slots=True)
class Money:
    """US dollars in a message: ``$`` and ``format(value, spec)`` in English (``$9,075``, ``$2.09``)."""

    value: float
    spec: str = ",.0f"

    def __str__(self) -> str:
        return "$" + format(self.value, self.spec)


class Text(str):
    """An English message that keeps its template and parameters (or, from :func:`join`, its parts)."""

    __slots__ = ("params", "parts", "sep", "template", "upper_first")
    template: str
    params: dict[str, Any]
    parts: tuple[str, ...]
    sep: str
    upper_first: bool

    def __new__(cls, template: str, /, **params: Any) -> Text:
        # every placeholder is ``%(name)s``, which formats its value by ``str()``
        self = str.__new__(cls, template % params if params else template)
        self.template = template
        self.params = params
        self.parts = ()
        self.sep = ""
        self.upper_first = False
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.template, self.params, self.parts, self.sep, self.upper_first))


def _rebuild(template: str, params: dict[str, Any], parts: tuple[str, ...], sep: str, upper_first: bool) -> Text:
    if not parts:
        return Text(template, **params)
    return capitalized(join(parts, sep)) if upper_first else join(parts, sep)


def join(parts: Iterable[str], sep: str = " ") -> Text:
    """``sep.join(parts)`` as one message whose parts are each translated."""
    kept = tuple(parts)
    self = str.__new__(Text, sep.join(kept))
    self.template, self.params, self.parts, self.sep, self.upper_first = "", {}, kept, sep, False
    return self


def capitalized(message: str) -> Text:
    """``message`` with its first letter upper-case, in English and in the language it is shown in."""
    self = str.__new__(Text, message[:1].upper() + message[1:])
    self.template, self.params, self.parts, self.sep, self.upper_first = "", {}, (message,), "", True
    return self


class _KeepText:
    """The pydantic schema of :data:`Message`: a :class:`Text` is kept as it is, anything else validated as a
    ``str`` (a failure is the ``str`` error); a ``str`` in the JSON schema and for JSON input. All of it in
    pydantic-core, without a Python call per message."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        plain = core_schema.str_schema()
        keep = core_schema.union_schema([core_schema.is_instance_schema(Text), plain], mode="left_to_right",
                                        custom_error_type="string_type")
        return core_schema.json_or_python_schema(json_schema=plain, python_schema=keep)


#: a response field holding a message: a ``str`` to the schema and the JSON, a :class:`Text` in Python
Message = Annotated[str, _KeepText]
