"""Safe reading of untrusted config text: a size cap, PyYAML's safe loader only (no custom tags, no alias bombs,
no deep nesting), ``tomllib`` for TOML, ``json`` with a depth limit.

Every refusal is an :class:`ImportProblem` naming the file and, where there is one, the key or line; each check
runs before the text is turned into objects, so a hostile file costs at most a scan of its (capped) bytes:
- the size cap (``MAX_BYTES``) before any parsing;
- YAML: the event stream (libyaml's C parser where present) is scanned for nesting depth (``MAX_DEPTH``), explicit
  tags outside YAML's core schema (``!!python/object``, ``!custom``) and the number of aliases before the
  composer (which recurses) or the constructor run; then the composed node graph is counted with memoised
  sub-counts, so a "billion laughs" document (aliases of aliases) is refused by its expanded size
  (``MAX_NODES``) without being expanded;
- JSON and TOML: the parsers' own recursion guard plus a depth check of the result.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from typing import Any, Final

import yaml

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "ImportProblem", "check_size", "load_json", "load_toml",
           "load_yaml"]

#: the largest config file read (1 MiB: the largest published example configs are a few KiB)
MAX_BYTES: Final = 1 << 20
#: the deepest nesting accepted (real configs nest 3-5 levels)
MAX_DEPTH: Final = 64
#: the most values a document may expand to once its aliases are followed
MAX_NODES: Final = 100_000
MAX_ALIASES: Final = 1_000

_CORE_TAGS: Final = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map",
                                                                 "seq", "merge"))


@dataclass
class ImportProblem(Exception):
    """A file that cannot be read: ``key`` is the dotted key (or ``line N``) the problem is at, "" for the file."""

    file: str
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else self.file
        return f"{where}: {self.message}"


def check_size(name: str, text: str) -> None:
    # characters <= UTF-8 bytes <= 4 x characters: encode (a copy) only when the length alone cannot tell
    size = len(text) if len(text) > MAX_BYTES or 4 * len(text) <= MAX_BYTES else len(
        text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise ImportProblem(name, "", f"{size:,} bytes is over the {MAX_BYTES:,}-byte limit for a config file")


def _depth(value: Any, name: str) -> None:
    """Iterative depth check of a loaded document (no recursion: a deep document cannot exhaust the stack)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ImportProblem(name, "", f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


_Parser: Any
try:  # libyaml's C parser (PyYAML's ``yaml._yaml``): linear in the text; the pure-Python one is a fallback
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML without libyaml
    _Parser = None


def _events(text: str) -> Any:
    if _Parser is not None:
        parser = _Parser(text)
        try:
            while (event := parser.get_event()) is not None:
                yield event
        finally:
            parser.dispose()
    else:  # pragma: no cover - PyYAML without libyaml
        yield from yaml.parse(text, Loader=yaml.SafeLoader)


def _scan_events(name: str, text: str) -> None:
    depth = aliases = 0
    for event in _events(text):
        line = event.start_mark.line + 1 if event.start_mark else 0
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _CORE_TAGS and tag != "!":
            raise ImportProblem(name, f"line {line}", f"the tag {tag!r} is refused: only plain YAML values "
                                "(strings, numbers, booleans, null, lists, mappings) are read")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ImportProblem(name, f"line {line}", f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise ImportProblem(name, f"line {line}", f"more than {MAX_ALIASES} aliases")


def _expanded_size(root: yaml.Node) -> int:
    """Values the node graph expands to with every alias followed, counted once per distinct node (memoised,
    iterative): an alias bomb's 10^9 values are counted in a few hundred steps."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # on the current path: meeting one again is a recursive alias (&a [*a])
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        if not done and id(node) in open_nodes:
            line = node.start_mark.line + 1 if node.start_mark else 0
            raise ImportProblem("", f"line {line}", "a recursive alias (a value that contains itself): refused")
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if done or not children:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[id(node)] > MAX_NODES:
                line = node.start_mark.line + 1 if node.start_mark else 0
                raise ImportProblem("", f"line {line}", f"expands to more than {MAX_NODES:,} values "
                                    "(aliases of aliases): refused")
            continue
        stack.append((node, True))
        open_nodes.add(id(node))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader (libyaml-backed where present); nothing else constructs objects here."""


def load_yaml(name: str, text: str) -> Any:
    check_size(name, text)
    try:
        _scan_events(name, text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            try:
                _expanded_size(node)
            except ImportProblem as exc:
                exc.file = name
                raise
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}" if mark else ""
        raise ImportProblem(name, where, f"not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ImportProblem(name, "", f"not valid YAML: {exc}") from None
    except RecursionError:
        raise ImportProblem(name, "", "nested too deeply") from None


def load_json(name: str, text: str) -> Any:
    check_size(name, text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportProblem(name, f"line {exc.lineno}", f"not valid JSON: column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ImportProblem(name, "", "nested too deeply") from None
    except ValueError as exc:
        raise ImportProblem(name, "", f"not valid JSON: {exc}") from None
    _depth(value, name)
    return value


def load_toml(name: str, text: str) -> Any:
    check_size(name, text)
    try:
        value = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ImportProblem(name, "", f"not valid TOML: {exc}") from None
    except RecursionError:
        raise ImportProblem(name, "", "nested too deeply") from None
    _depth(value, name)
    return value
