"""The reading context every format module writes into: which request field each key set, which keys change
memory or time but have no request field (named, effect ignored), which keys were read and do not change the
estimate, which were not recognised, and the defaults capplan filled.

A format module never builds the request itself: it calls :meth:`Reader.set` with a dotted request path
(``training.seq_len``) and the key it read; :func:`build` assembles the request once every file is read, resolves
conflicts between files (an explicit value in one file that disagrees with another's is refused, as the Hugging
Face DeepSpeed integration refuses a mismatch) and locates a validation error at the key that set the field.

Stack fields (issue 29): :meth:`Reader.stack` sets a field when the request has it and accepts the value, else
reports the key as "not represented" with the field it maps to. When those fields land in
``estimator.request.Training``, the same calls set them: nothing here changes.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from app.imports.safe import ImportProblem
from estimator.request import EstimateRequest, Hardware, Parallelism, Training

__all__ = ["Origin", "Reader", "Report", "accepts"]

_SECTIONS: dict[str, type[BaseModel]] = {"training": Training, "parallelism": Parallelism, "hardware": Hardware}


def accepts(path: str, value: Any) -> bool:
    """Whether the request has the field ``path`` (``training.loss_kernel``) and its type admits ``value``
    (a Literal's choices are checked; other types are left to validation)."""
    section, _, name = path.partition(".")
    model = _SECTIONS.get(section)
    if model is None or name not in model.model_fields:
        return False
    annotation = model.model_fields[name].annotation
    choices = _literal_choices(annotation)
    return choices is None or value in choices


def _literal_choices(annotation: Any) -> set[Any] | None:
    if typing.get_origin(annotation) is typing.Literal:
        return set(typing.get_args(annotation))
    args = typing.get_args(annotation)
    found: set[Any] = set()
    literal = False
    for arg in args:
        sub = _literal_choices(arg)
        if sub is not None:
            literal = True
            found |= sub
        elif arg is type(None):
            found.add(None)
    return found if literal else None


@dataclass(frozen=True)
class Origin:
    file: str
    key: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}"


@dataclass
class Report:
    """What the files said and what capplan made of it (JSON-ready via :meth:`as_dict`)."""

    files: list[dict[str, str]] = field(default_factory=list)
    read: list[dict[str, Any]] = field(default_factory=list)
    not_represented: list[dict[str, Any]] = field(default_factory=list)
    defaults: list[dict[str, Any]] = field(default_factory=list)
    no_effect: list[dict[str, Any]] = field(default_factory=list)
    unrecognized: list[dict[str, Any]] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"files": self.files, "read": self.read, "not_represented": self.not_represented,
                "defaults": self.defaults, "no_effect": self.no_effect, "unrecognized": self.unrecognized,
                "needs": self.needs}

    def text(self) -> str:
        """The report as plain lines (the CLI's ``--report``)."""
        lines = [f"read {f['name']} as {f['format']}" for f in self.files]
        lines += [f"  {r['file']}: {r['key']} = {_show(r['value'])} -> {r['field']} = {_show(r['set'])}"
                  + (f" ({r['note']})" if r.get("note") else "") for r in self.read]
        if self.not_represented:
            lines.append("not represented (changes memory or time; effect ignored):")
            lines += [f"  {r['file']}: {r['key']} = {_show(r['value'])}: {r['effect']}"
                      + (f" [maps to {r['maps_to']}]" if r.get("maps_to") else "") for r in self.not_represented]
        if self.defaults:
            lines.append("defaults filled:")
            lines += [f"  {d['field']} = {_show(d['value'])}: {d['why']}" for d in self.defaults]
        if self.unrecognized:
            lines.append("not recognised (effect unknown): " + ", ".join(
                f"{u['file']}: {u['key']}" for u in self.unrecognized))
        lines += [f"needs: {n}" for n in self.needs]
        return "\n".join(lines)


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class _Value:
    value: Any
    origin: Origin
    explicit: bool  # False: derived or resolved ("auto"), yields to an explicit value elsewhere


class Reader:
    """One import: every file's reads go into the same reader (files are read in the order given)."""

    def __init__(self) -> None:
        self.report = Report()
        self.values: dict[str, _Value] = {}
        self.file = ""
        self.context: dict[str, Any] = {}  # facts one format leaves for another (trainer args for DeepSpeed "auto")

    # -- recording --------------------------------------------------------------------------------------------
    def set(self, path: str, value: Any, key: str, raw: Any = None, *, note: str = "", explicit: bool = True,
            overrides: bool = False) -> None:
        """The request field ``path`` takes ``value``, read from ``key`` (whose value in the file was ``raw``);
        ``overrides``: this file decides the field even over another file's explicit value (DeepSpeed's precision
        over the trainer's load dtype), the report saying so."""
        origin = Origin(self.file, key)
        if path == "model" and self.context.get("model_file") and self.file != self.context["model_file"]:
            self._read(key, raw, path, "(config.json)", f"the shape from {self.context['model_file']}", "")
            return
        old = self.values.get(path)
        if old is not None and old.value != value and overrides:
            note = (note + "; " if note else "") + f"replaces {old.origin}'s {_show(old.value)}"
        elif old is not None and old.value != value:
            if old.explicit and explicit:
                raise ImportProblem(self.file, key, f"{_show(raw if raw is not None else value)} sets {path} = "
                                    f"{_show(value)}, but {old.origin} set it to {_show(old.value)}")
            if old.explicit and not explicit:
                self._read(key, raw, path, value, note + "; " if note else "", f"kept {old.origin}'s value")
                return
        self.values[path] = _Value(value, origin, explicit)
        self._read(key, raw, path, value, note, "")

    def _read(self, key: str, raw: Any, path: str, value: Any, note: str, extra: str) -> None:
        self.report.read.append({"file": self.file, "key": key, "value": value if raw is None else raw,
                                 "field": path, "set": value, "note": (note + extra).strip("; ")})

    def stack(self, path: str, value: Any, key: str, raw: Any, effect: str,
              fallback: tuple[str, Any] | None = None) -> None:
        """A stack setting (issue 29): set ``path`` when the request has it and accepts ``value``; else report it as
        not represented, mapping to ``path``, and set ``fallback`` (the nearest represented value) if given."""
        if accepts(path, value):
            self.set(path, value, key, raw)
            return
        self.unrepresented(key, raw, effect + (f"; estimated as {fallback[0]} = {fallback[1]!r}" if fallback else ""),
                           maps_to=f"{path} = {value!r}")
        if fallback is not None:
            self.set(fallback[0], fallback[1], key, raw, note=f"nearest to {path} = {value!r}")

    def unrepresented(self, key: str, raw: Any, effect: str, maps_to: str | None = None) -> None:
        self.report.not_represented.append({"file": self.file, "key": key, "value": raw, "effect": effect,
                                            "maps_to": maps_to})

    def no_effect(self, key: str) -> None:
        self.report.no_effect.append({"file": self.file, "key": key})

    def unknown(self, key: str) -> None:
        self.report.unrecognized.append({"file": self.file, "key": key})

    def default(self, path: str, value: Any, why: str) -> None:
        if path not in self.values:
            self.values[path] = _Value(value, Origin("(default)", path), False)
            self.report.defaults.append({"field": path, "value": value, "why": why})

    def has(self, path: str) -> bool:
        return path in self.values

    def get(self, path: str, default: Any = None) -> Any:
        found = self.values.get(path)
        return default if found is None else found.value

    # -- assembling ---------------------------------------------------------------------------------------------
    def request(self) -> EstimateRequest:
        body: dict[str, Any] = {}
        for path, v in self.values.items():
            parts = path.split(".")
            node = body
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = v.value
        try:
            return EstimateRequest.model_validate(body)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            loc = [str(p) for p in err["loc"] if not _is_union_member(p)]
            path = ".".join(loc)
            found = self.values.get(path) or next(
                (v for p, v in self.values.items() if path.startswith(p + ".") or p.startswith(path + ".")), None)
            origin = found.origin if found else Origin("(request)", path)
            raise ImportProblem(origin.file, origin.key, f"{path}: {err['msg']}") from None


def _is_union_member(part: Any) -> bool:
    text = str(part)
    return text in ("str", "HfConfigModel", "ModelArch") or "[" in text
