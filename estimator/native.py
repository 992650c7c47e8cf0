"""The compiled estimator: modules of this package built with mypyc (docs/native.md), used when they match the sources.

``scripts/build-native`` compiles the estimator's modules (all but those listed in :data:`PURE_MODULES`) with
mypyc, the compiler that ships with mypy and turns type-annotated Python into C extension modules, into
``estimator/_native/`` with a manifest of the SHA-256 of every source it compiled. At import, :func:`install`
reads that manifest and, when no source of the package (or of the hardware catalog, whose objects the compiled
code type-checks) changed and the build is for this interpreter, puts an
import finder first in ``sys.meta_path`` that loads those modules from the build: same code, same numbers (the
request guard is byte-identical; ``tests/test_native.py``), a few times faster. Otherwise (no build, an edited
source, another Python) nothing is installed and the package runs as plain Python. All or nothing: the compiled
modules call each other directly, so one plain module among them would be a second copy of that module.

``CAPPLAN_NATIVE`` chooses: ``auto`` (default: the build when it matches), ``0`` (never), ``1`` (the build, or an
``ImportError`` saying why not: for benchmarks and the test that compares the two).

This module runs before any other of the package and is never compiled itself; it imports only the standard library.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = ["MANIFEST_NAME", "NATIVE_DIR", "PURE_MODULES", "NativeStatus", "current_sources", "describe", "install",
           "source_digest", "status"]

PACKAGE_DIR = Path(__file__).resolve().parent
NATIVE_DIR = PACKAGE_DIR / "_native"
MANIFEST_NAME = "manifest.json"

# Modules that stay plain Python: the pydantic models (their metaclass and validators are Python's), the ``str``
# subclass of the messages (mypyc compiles no subclass of a built-in type), and this loader.
PURE_MODULES = frozenset({
    "estimator.native",
    "estimator.request",
    "estimator.response",
    "estimator.messages",
    "estimator.tco.run_cost_models",
    "estimator.host_options",
    "estimator.facility.rack",
    "estimator.planner.contract",
    "estimator.cluster.contract",
    "estimator.planner.reverse",
    "estimator.tco.assumptions",
    "estimator.tco.results",
    "estimator.tco.upgrade",
    "estimator.inference.request",
    "estimator.inference.response",
})


@dataclass(frozen=True)
class NativeStatus:
    """Whether the compiled modules are in use, and if not, why."""

    active: bool
    reason: str
    modules: int = 0


def source_digest(path: Path) -> str:
    """SHA-256 of a source file's bytes: what the manifest records and :func:`install` compares."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _NativeFinder(importlib.abc.MetaPathFinder):
    """Finds the listed modules in the build; every other import goes on to the next finder."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(fullname, file)


def _read_manifest(native_dir: Path) -> dict[str, object] | str:
    try:
        data = json.loads((native_dir / MANIFEST_NAME).read_text())
    except FileNotFoundError:
        return "no compiled build (scripts/build-native makes one)"
    except (OSError, ValueError) as exc:
        return f"unreadable manifest: {exc}"
    return data if isinstance(data, dict) else "unreadable manifest: not an object"


def _check(manifest: dict[str, object], native_dir: Path) -> dict[str, Path] | str:
    """The module files to load, or why the build does not match these sources and this interpreter."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    if manifest.get("ext_suffix") != suffix:
        return f"built for {manifest.get('ext_suffix')}, this interpreter loads {suffix}"
    sources, modules, support = (manifest.get(k) for k in ("sources", "modules", "support"))
    if not (isinstance(sources, dict) and isinstance(modules, dict) and isinstance(support, dict) and modules):
        return "unreadable manifest"
    current = current_sources()
    if current.keys() != sources.keys():
        added = sorted(current.keys() - sources.keys()) or sorted(sources.keys() - current.keys())
        return f"{added[0]} added or removed since the build (scripts/build-native rebuilds)"
    for rel, digest in current.items():
        if sources[rel] != digest:
            return f"{rel} changed since the build (scripts/build-native rebuilds)"
    files = {str(name): native_dir / str(rel) for name, rel in {**modules, **support}.items()}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        return f"missing from the build: {missing[0]}"
    return files


def current_sources() -> dict[str, str]:
    """SHA-256 of every source the compiled modules were checked against: this package's and the hardware
    catalog's Python files (a compiled module checks the types of what it gets from the plain ones), by path
    relative to the repository root."""
    root = PACKAGE_DIR.parent
    out: dict[str, str] = {}
    for package in ("estimator", "hardware_catalog"):
        for path in sorted((root / package).rglob("*.py")):
            if NATIVE_DIR not in path.parents:
                out[path.relative_to(root).as_posix()] = source_digest(path)
    return out


_STATUS = NativeStatus(False, "not checked")


def install(native_dir: Path = NATIVE_DIR) -> NativeStatus:
    """Put the build's finder in front of the import system if the build matches (see the module docstring)."""
    global _STATUS
    mode = os.environ.get("CAPPLAN_NATIVE", "auto").strip().lower()
    if mode in ("0", "off", "false", "no"):
        _STATUS = NativeStatus(False, "turned off (CAPPLAN_NATIVE=0)")
        return _STATUS
    manifest = _read_manifest(native_dir)
    files = manifest if isinstance(manifest, str) else _check(manifest, native_dir)
    if isinstance(files, str):
        _STATUS = NativeStatus(False, files)
        if mode in ("1", "on", "true", "yes", "require"):
            raise ImportError(f"CAPPLAN_NATIVE=1 but the compiled estimator cannot be used: {files}")
        return _STATUS
    if not any(isinstance(f, _NativeFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _NativeFinder(files))
    _STATUS = NativeStatus(True, f"compiled build in {native_dir}", len(files))
    return _STATUS


def status() -> NativeStatus:
    """What :func:`install` found when the package was imported."""
    return _STATUS


def describe() -> str:
    """One line for benchmark output: which estimator runs (timings differ a few times between the two)."""
    s = _STATUS
    return f"compiled ({s.modules} modules; {s.reason})" if s.active else f"plain Python ({s.reason})"
