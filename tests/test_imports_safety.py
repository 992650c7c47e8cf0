"""Hostile config files are refused quickly and without growing memory: PyYAML's safe loader only, an alias bomb
refused by its expanded size before it is expanded, deep nesting refused before the (recursive) composer runs,
tags that would construct objects refused, files over the size cap refused before parsing. The checks assert the
refusal and the memory it took (tracemalloc's peak), not wall time."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import pytest

from app.imports import ImportProblem, SourceFile, import_files
from app.imports.safe import MAX_BYTES, load_json, load_toml, load_yaml

_BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x, x]"] + [
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(8)])


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(ImportProblem) as exc:
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert exc.value.file == "f"
    return peak


@pytest.mark.parametrize(("text", "match"), [
    (_BOMB, "expands to more than"),                                        # 10^9 values once expanded
    ("a: " + "[" * 10_000 + "]" * 10_000, "nest"),                          # flow style (libyaml's own cap)
    ("- " * 10_000 + "x", "nested more than"),                            # block style
    ("!!python/object/apply:os.system ['echo hi']", "tag"),
    ("a: !!python/name:os.system", "tag"),
    ("a: !custom 1", "tag"),
    ("a: !!binary aGVsbG8=", "tag"),
    ("a: &x [1, {b: *x}]", "recursive alias"),                             # a value that contains itself
])
def test_hostile_yaml_is_refused_in_little_memory(text: str, match: str) -> None:
    peak = _peak(lambda: load_yaml("f", text))
    assert peak < 8 * len(text) + 4_000_000, peak  # a few times the text itself, never the expansion
    with pytest.raises(ImportProblem, match=match):
        load_yaml("f", text)


def test_the_bomb_is_refused_through_the_importer_too() -> None:
    with pytest.raises(ImportProblem, match="expands"):
        import_files([SourceFile("f", "base_model: x/y\n" + _BOMB)])


def test_a_few_aliases_are_fine() -> None:
    doc = load_yaml("f", "base: &b {micro_batch_size: 2}\nother: *b\n")
    assert doc["other"] == {"micro_batch_size": 2}


@pytest.mark.parametrize("loader", [load_json, load_toml, load_yaml])
def test_files_over_the_cap_are_refused_before_parsing(loader: Callable[[str, str], object]) -> None:
    text = "#" + "x" * MAX_BYTES
    peak = _peak(lambda: loader("f", text))
    assert peak < 100_000, peak  # refused by its length: the text is not even copied
    with pytest.raises(ImportProblem, match="limit"):
        loader("f", text)


def test_deep_json_and_toml_are_refused() -> None:
    for loader, text in ((load_json, "[" * 10_000 + "]" * 10_000), (load_json, '{"a":' * 100 + "1" + "}" * 100),
                         (load_toml, "a = " + "[" * 10_000 + "]" * 10_000)):
        peak = _peak(lambda: loader("f", text))  # noqa: B023 - called at once
        assert peak < 4_000_000, peak


@pytest.mark.parametrize("text", ["a: [", "{\"a\": }", "key = ", "\x00\x01", "- - -\n  : :"])
def test_garbage_is_a_named_problem_not_a_crash(text: str) -> None:
    with pytest.raises(ImportProblem):
        import_files([SourceFile("f", text)])


def test_mutated_real_configs_are_read_or_refused_by_name() -> None:
    """The vendored configs with values replaced by ones of the wrong type (None, lists, mappings, huge numbers,
    NaN): each is read or refused with an ImportProblem, never another exception (seeded, 300 cases)."""
    import copy
    import json
    import random
    from pathlib import Path

    import yaml

    rng = random.Random(30)
    weird: list[object] = [None, [], {}, [1, 2], {"a": 1}, "x", -1, 0, 1.5, True, "auto", 10**30, "1e9",
                           float("nan")]
    files = sorted(p for p in (Path(__file__).parent / "data" / "configs").glob("*/*")
                   if p.suffix in (".yaml", ".yml", ".json"))
    for _ in range(300):
        path = rng.choice(files)
        doc = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(list(doc))
            if isinstance(doc[key], dict) and doc[key] and rng.random() < 0.5:
                doc[key][rng.choice(list(doc[key]))] = copy.deepcopy(rng.choice(weird))
            else:
                doc[key] = copy.deepcopy(rng.choice(weird))
        text = json.dumps(doc) if path.suffix == ".json" else yaml.safe_dump(doc)
        try:
            import_files([SourceFile(path.name, text)])
        except ImportProblem as exc:
            assert exc.file == path.name
