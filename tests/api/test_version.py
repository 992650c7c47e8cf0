"""``GET /api/v1/version`` says which estimator build answers (issue 27: users ran plain Python without knowing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from estimator import ESTIMATOR_VERSION, native

ROOT = Path(__file__).resolve().parents[2]


def test_version_reports_the_estimator_and_its_build(client: TestClient) -> None:
    body = client.get("/api/v1/version").json()
    build = native.status()
    assert body["estimator_version"] == ESTIMATOR_VERSION
    assert body["estimator_build"] == ("compiled" if build.active else "python")
    assert body["estimator_build_detail"] == build.reason and body["compiled_modules"] == build.modules


def test_version_says_python_when_the_build_is_turned_off() -> None:
    """A process with CAPPLAN_NATIVE=0 runs the plain sources and says so, with the reason."""
    code = ("from fastapi.testclient import TestClient; from app.main import create_app; import json; "
            "print(json.dumps(TestClient(create_app()).get('/api/v1/version').json()))")
    env = {**os.environ, "CAPPLAN_NATIVE": "0", "CAPPLAN_DATABASE_URL": "sqlite://", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert '"estimator_build": "python"' in out and "CAPPLAN_NATIVE=0" in out
