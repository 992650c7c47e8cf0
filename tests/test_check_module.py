"""``python -m app.check``: ``capplan check`` without the web dependencies, for a bare GPU machine (torch,
transformers, peft, pydantic, PyYAML; no FastAPI, Starlette, SQLAlchemy, Alembic). Run in a subprocess whose
imports of those packages fail, as they would there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.schemas.measurement import MeasurementCreate

ROOT = Path(__file__).resolve().parents[1]
TINY = {"model": {"name": "tiny llama", "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                  "num_kv_heads": 2, "ffn_hidden_size": 512, "vocab_size": 1000},
        "training": {"method": "lora", "seq_len": 128, "attention": "sdpa"},
        "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": 1}}
#: what the GPU machine's image lacks of capplan's dependencies (/work/.library/device/KINDS.md's package list)
ABSENT = ("fastapi", "starlette", "sqlalchemy", "alembic", "mako", "limits", "pydantic_settings", "babel",
          "uvicorn", "opentelemetry", "python_multipart", "dotenv")
BLOCKER = f"""
import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not on the GPU machine)")
        return None
sys.meta_path.insert(0, _Absent())
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "CAPPLAN_NATIVE": "0"}
    return subprocess.run([sys.executable, "-m", "app.check", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_trace_writes_a_record_without_the_web_packages(tmp_path: Path) -> None:
    for name in ("torch", "transformers", "peft"):
        pytest.importorskip(name)
    req, out = tmp_path / "job.json", tmp_path / "record.json"
    req.write_text(json.dumps(TINY))
    p = _run(tmp_path, str(req), "--trace", "--json", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "peak_allocated" in p.stdout and "not traced: CUDA context" in p.stdout
    body = MeasurementCreate.model_validate(json.loads(out.read_text()))
    assert body.kind == "trace" and body.measured.peak_allocated_bytes and body.measured.peak_allocated_bytes > 0


@pytest.mark.parametrize(("change", "field"), [
    ({"training": {**TINY["training"], "seq_len": "4096"}}, "training.seq_len"),  # strict JSON: no numeric strings
    ({"hardware": {"gpu": "no-such-gpu", "gpus_per_node": 1}}, "hardware.gpu"),
])
def test_bad_input_exits_2_naming_the_field(tmp_path: Path, change: dict[str, object], field: str) -> None:
    req = tmp_path / "job.json"
    req.write_text(json.dumps({**TINY, **change}))
    p = _run(tmp_path, str(req), "--trace")
    assert p.returncode == 2, p.stderr[-2000:]
    assert field in p.stderr and "Traceback" not in p.stderr


def test_run_without_cuda_exits_2_saying_so(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    req = tmp_path / "job.json"
    req.write_text(json.dumps(TINY))
    p = _run(tmp_path, str(req), "--run")
    assert p.returncode == 2 and "CUDA" in p.stderr
