"""Compile the estimator with mypyc into ``estimator/_native/`` (docs/native.md).

Usage: ``.venv/bin/python scripts/build_native.py [--jobs N] [--force] [--check]`` from anywhere
(``scripts/build-native`` wraps it). Compiles every module of ``estimator/`` except the package ``__init__`` files and
``estimator.native.PURE_MODULES``, with the mypy configuration of ``pyproject.toml`` (mypyc type-checks first: a
type error stops the build), in one group whose shared library is ``capplan_estimator__mypyc``; writes the
extension modules and a manifest (interpreter, mypy version, SHA-256 of every source) to a temporary directory
and then swaps it in for ``estimator/_native``, so a failed build leaves the previous one as it was. With a
build that already matches the sources it does nothing unless ``--force``; ``--check`` only says whether it
matches (exit 1 if not). Needs a C compiler and the Python headers (Debian: ``gcc``, ``python3-dev``), and mypy
(the ``native`` or ``test`` extra).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["CAPPLAN_NATIVE"] = "0"  # this process imports the sources, never an older build

from estimator import native  # noqa: E402

GROUP = "capplan_estimator"


def compiled_modules() -> dict[str, Path]:
    """Module name -> source path of every module the build compiles."""
    out: dict[str, Path] = {}
    for path in sorted((ROOT / "estimator").rglob("*.py")):
        if path.name == "__init__.py" or native.NATIVE_DIR in path.parents:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if name not in native.PURE_MODULES:
            out[name] = path
    return out


def _build(modules: dict[str, Path], work: Path, jobs: int) -> Path:
    """Run mypyc and the C compiler; the directory holding the built extension modules."""
    from mypyc.build import mypycify
    from setuptools import Distribution

    paths = [str(p.relative_to(ROOT)) for p in modules.values()]
    extensions = mypycify(paths, opt_level="3", multi_file=True, group_name=GROUP, target_dir=str(work / "c"))
    dist = Distribution({"name": "capplan-estimator-native", "ext_modules": extensions})
    build_ext = dist.get_command_obj("build_ext")
    build_ext.build_lib = str(work / "lib")
    build_ext.build_temp = str(work / "obj")
    build_ext.parallel = jobs
    dist.run_command("build_ext")
    return work / "lib"


def _layout(lib: Path, modules: dict[str, Path], out: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Copy the built files into ``out``; (module -> file, support module -> file), paths relative to ``out``."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    files: dict[str, str] = {}
    for name in modules:
        rel = Path(*name.split(".")).with_suffix("").as_posix() + suffix
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib / rel, out / rel)
        files[name] = rel
    support_name = f"{GROUP}__mypyc"
    shutil.copy2(lib / f"{support_name}{suffix}", out / f"{support_name}{suffix}")
    return files, {support_name: f"{support_name}{suffix}"}


def matches() -> bool:
    """Whether ``estimator/_native`` is a build of these sources for this interpreter."""
    manifest = native._read_manifest(native.NATIVE_DIR)
    return not isinstance(manifest, str) and not isinstance(native._check(manifest, native.NATIVE_DIR), str)


def build(jobs: int) -> float:
    """Build and swap in ``estimator/_native``; seconds taken."""
    import mypy.version

    start = time.monotonic()
    sources = native.current_sources()
    modules = compiled_modules()
    with tempfile.TemporaryDirectory(prefix="capplan-native-") as tmp:
        work = Path(tmp)
        lib = _build(modules, work, jobs)
        staged = Path(tempfile.mkdtemp(prefix="_native.", dir=native.PACKAGE_DIR))
        try:
            files, support = _layout(lib, modules, staged)
            manifest = {"ext_suffix": importlib.machinery.EXTENSION_SUFFIXES[0], "mypy": mypy.version.__version__,
                        "group": GROUP, "sources": sources, "modules": files, "support": support}
            (staged / native.MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
            old = native.NATIVE_DIR.with_name("_native.old")
            shutil.rmtree(old, ignore_errors=True)
            if native.NATIVE_DIR.exists():
                native.NATIVE_DIR.rename(old)
            staged.rename(native.NATIVE_DIR)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
    if native.current_sources() != sources:
        print("build-native: sources changed during the build; it will not be used until rebuilt", file=sys.stderr)
    return time.monotonic() - start


def main() -> int:
    os.chdir(ROOT)  # mypyc reads the mypy configuration (pydantic plugin, strictness) from pyproject.toml
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="C compiler processes")
    parser.add_argument("--force", action="store_true", help="rebuild even when the build matches the sources")
    parser.add_argument("--check", action="store_true", help="only say whether the build matches (exit 1 if not)")
    args = parser.parse_args()
    if args.check or (matches() and not args.force):
        ok = matches()
        print(f"build-native: estimator/_native {'matches' if ok else 'does not match'} the sources")
        return 0 if ok else 1
    n = len(compiled_modules())
    print(f"build-native: compiling {n} modules with mypyc ({args.jobs} C compiler jobs) ...", flush=True)
    seconds = build(args.jobs)
    print(f"build-native: estimator/_native built in {seconds:.0f} s ({n} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
