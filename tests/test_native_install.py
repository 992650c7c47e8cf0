"""A new user's ``./scripts/serve`` runs the compiled estimator (issue 27).

On a fresh clone, ``scripts/serve`` made ``.venv`` with ``pip install -e '.[native]'`` and the mypyc build then
stopped on ``Library stubs not installed for "yaml"`` (types-PyYAML was only in the ``test`` extra), so every user,
and the Docker image, ran the plain-Python estimator while the suite (``.[test]``) passed. Here the README's
command runs on a copy of the tree with no ``.venv``: the ``native`` extra alone, into a fresh virtual
environment, then the build; the server must log the compiled estimator and ``GET /api/v1/version`` report it.
Slow (a pip install and a mypyc build, a few minutes on two cores)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _copy_of_the_tree(dest: Path) -> None:
    """The files a clone has (tracked, or new and not ignored): no .venv, no build, no compiled estimator."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, listed):
        src = ROOT / name.decode()
        if src.is_file():
            (dest / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name.decode())


def test_scripts_serve_on_a_fresh_tree_builds_and_runs_the_compiled_estimator(tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.fail("no C compiler: scripts/test installs gcc and python3-dev, which the compiled build needs")
    tree = tmp_path / "capplan"
    _copy_of_the_tree(tree)
    assert not (tree / ".venv").exists() and not (tree / "estimator" / "_native").exists()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAPPLAN_", "VIRTUAL_ENV", "PYTHON"))}
    env |= {"CAPPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}", "CAPPLAN_PORT": str(port),
            "PATH": os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)}
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(["./scripts/serve"], cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            version = _wait_for_version(f"http://127.0.0.1:{port}", server, log_path, deadline_s=900)
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=60)
    text = log_path.read_text(errors="replace")
    assert "could not be built" not in text, text
    assert version["estimator_build"] == "compiled", (version, text[-3000:])
    assert "capplan serve: estimator " in text and ", compiled (" in text, text[-3000:]
    assert (tree / "estimator" / "_native" / "manifest.json").is_file()
    # the native extra alone: none of the test extra's packages came with it
    listed = subprocess.run([str(tree / ".venv" / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout.lower()
    assert "mypy==" in listed and "pytest==" not in listed and "torch==" not in listed


def _wait_for_version(base: str, server: subprocess.Popen[bytes], log_path: Path, deadline_s: float) -> dict[str, str]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"scripts/serve exited {server.returncode}:\n{log_path.read_text(errors='replace')}")
        try:
            r = httpx.get(f"{base}/api/v1/version", timeout=2)
            if r.status_code == 200:
                body: dict[str, str] = r.json()
                return body
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"no answer in {deadline_s} s:\n{log_path.read_text(errors='replace')}")
