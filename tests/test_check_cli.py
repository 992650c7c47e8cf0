"""``capplan check`` and ``capplan measurements load`` through typer's CliRunner: the trace's table and record,
the record is what the API stores (posted through the app), --run without CUDA, the missing extra, bad input
(exit 2, one line naming the field), and our calibration measurements loaded as records."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.check import cli as check_cli
from app.check.record import calibration_records, measured_figures
from app.cli import cli
from app.core.startup import load_source_catalog
from app.schemas.measurement import MeasurementCreate
from tests.conftest import write_input

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("cli_database")
DATA = Path(__file__).parent / "data"
TINY = {"model": {"name": "tiny llama", "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                  "num_kv_heads": 2, "ffn_hidden_size": 512, "vocab_size": 1000},
        "training": {"method": "lora", "seq_len": 256, "attention": "sdpa"},
        "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": 1}}


def _torch() -> None:
    for name in ("torch", "transformers", "peft"):
        pytest.importorskip(name)


def test_trace_prints_the_parts_and_writes_a_record_the_api_accepts(tmp_path: Path) -> None:
    _torch()
    out = tmp_path / "record.json"
    result = runner.invoke(cli, ["check", write_input(tmp_path, json.dumps(TINY)), "--trace", "--json", str(out)])
    assert result.exit_code == 0, result.output
    for part in ("peak_allocated", "parameters", "gradients", "optimizer_states", "activations", "overhead"):
        assert part in result.stdout
    assert "not traced: CUDA context" in result.stdout
    rec = json.loads(out.read_text())
    body = MeasurementCreate.model_validate(rec)
    assert body.kind == "trace" and body.gpu_name is None
    assert body.versions.torch and body.versions.transformers and body.versions.peft
    assert body.measured.peak_allocated_bytes and body.measured.peak_allocated_bytes > 0
    assert set(body.estimated.parts_bytes) >= {"parameters", "activations", "overhead"}
    assert "overhead" in body.measured.unrepresented


def test_post_stores_the_record_through_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--post sends the record to POST /api/v1/measurements with the key (the app's TestClient stands in for
    the server), and says where it is stored."""
    _torch()
    from fastapi.testclient import TestClient

    from app.core.settings import Settings
    from app.main import create_app
    from app.repositories.api_keys import create_key

    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'server.db'}", allowed_hosts="*"))
    with TestClient(app) as client:
        with app.state.sessionmaker() as session:
            _row, key = create_key(session=session, name="check-cli")
            session.commit()

        def post(url: str, api_key: str, record: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
            assert url == "http://capplan.example"
            r = client.post("/api/v1/measurements", json=record, headers={"X-API-Key": api_key})
            assert r.status_code == 201, r.text
            stored: dict[str, Any] = r.json()
            return stored

        monkeypatch.setattr(check_cli, "post_record", post)
        result = runner.invoke(cli, ["check", write_input(tmp_path, json.dumps(TINY)), "--trace", "--post",
                                     "http://capplan.example", "--api-key", key])
        assert result.exit_code == 0, result.output
        said = re.search(r"stored as measurement (\d+): http://capplan.example/measurements/(\d+)", result.stdout)
        assert said and said.group(1) == said.group(2), result.stdout
        stored = client.get(f"/api/v1/measurements/{said.group(1)}").json()
        assert stored["kind"] == "trace" and stored["request"]["training"]["method"] == "lora"
        assert stored["created_by"] == "check-cli"


def test_run_without_cuda_says_so(tmp_path: Path) -> None:
    _torch()
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = runner.invoke(cli, ["check", write_input(tmp_path, json.dumps(TINY)), "--run"])
    assert result.exit_code == 2
    assert "--run needs a CUDA GPU" in result.stderr


def test_without_the_extra_it_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_cli, "missing_packages", lambda: ["peft"])
    result = runner.invoke(cli, ["check", write_input(tmp_path, json.dumps(TINY)), "--trace"])
    assert result.exit_code == 2
    assert "pip install 'capplan[check]'" in result.stderr and "peft" in result.stderr


@pytest.mark.parametrize(("args", "request_", "message"), [
    (["--trace", "--run"], TINY, "choose one of --trace"),
    ([], TINY, "choose one of --trace"),
    (["--trace", "--post", "http://x"], TINY, "--post needs --api-key"),
    (["--trace"], {**TINY, "training": {"seq_len": 0}}, "training.seq_len"),
    (["--trace"], [TINY, TINY], "one request, not a list"),
    (["--trace"], {**TINY, "training": {"method": "qlora"}}, "training.method"),
])
def test_bad_input_exits_2_naming_the_field(tmp_path: Path, args: list[str], request_: Any, message: str) -> None:
    if "qlora" in json.dumps(request_):
        _torch()
    result = runner.invoke(cli, ["check", write_input(tmp_path, json.dumps(request_)), *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output


def test_calibration_measurements_load_as_records(tmp_path: Path) -> None:
    """Every measured H200 calibration case becomes a record (the out-of-memory ones are left out, named), with
    the measured figures as measured and today's estimate beside them; loading stores them all."""
    data = json.loads((DATA / "calibration_h200.json").read_text())
    records, skipped = calibration_records(DATA / "calibration_h200.json", load_source_catalog())
    ok = [c for c in data["cases"] if c["status"] == "ok" and not c["measured"].get("oom")]
    assert len(records) == len(ok) and len(skipped) == len(data["cases"]) - len(ok)
    by_label = {r["label"]: r for r in records}
    case = next(c for c in ok if c["id"] == "l8b-full-mixed-fused-b1-s4096-ck")
    rec = by_label[case["id"]]
    assert rec["measured"]["peak_allocated_bytes"] == case["measured"]["peak_allocated_bytes"]
    assert rec["measured"]["step_time_s"] == case["measured"]["step_time_s"]
    assert rec["gpu_name"] == "NVIDIA H200" and rec["versions"]["torch"] == "2.11.0+cu130"
    fake = by_label["l8b-full-mixed-fused-b1-s4096-ck-fsdp8"]
    assert "step_time_s" not in fake["measured"] or fake["measured"]["step_time_s"] is None  # memory only
    result = runner.invoke(cli, ["measurements", "load", str(DATA / "calibration_h200.json")])
    assert result.exit_code == 0, result.output
    assert f"stored {len(ok)} measurement(s)" in result.stdout


def test_a_run_and_a_calibration_case_give_the_same_figures_for_the_same_measurement() -> None:
    """--run's raw measurement has calibration's format; one function turns both into the record's figures."""
    data = json.loads((DATA / "calibration_h200.json").read_text())
    case = next(c for c in data["cases"] if c["id"] == "l1b-full-mixed-fused-b1-s4096-nock")
    records, _ = calibration_records(DATA / "calibration_h200.json", load_source_catalog())
    loaded = next(r for r in records if r["label"] == case["id"])
    figures = MeasurementCreate.model_validate({**loaded, "measured": measured_figures(
        case["measured"], memory_only=False)}).model_dump(mode="json")["measured"]
    assert figures == loaded["measured"]


def test_the_app_and_the_cli_never_import_the_check_extra() -> None:
    """The server and every other command run without torch, transformers and peft (the base install does not
    grow): importing them loads none of the three."""
    import subprocess
    import sys

    code = ("import sys, app.main, app.cli, app.web.measurements_page, app.check.record, app.check.compare; "
            "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True,
                          text=True, check=True, env={"PATH": "/usr/bin:/bin", "CAPPLAN_NATIVE": "0"})
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_loading_the_shipped_records_stores_none_twice(tmp_path: Path) -> None:
    """The shipped --run records are in the database once the command has prepared it (seeded as at start-up):
    loading their file stores none again, says so, and one changed record is stored; a record the catalog
    cannot estimate fails the load before anything is stored, naming the record and the field."""
    from app.services.measurements import SHIPPED_DIR

    shipped = SHIPPED_DIR / "check_run_h100.json"
    records = json.loads(shipped.read_text())
    result = runner.invoke(cli, ["measurements", "load", str(shipped)])
    assert result.exit_code == 0, result.output
    assert f"stored 0 measurement(s); {len(records)} already stored (the same record)" in result.stdout
    changed = [*records, {**records[0], "label": "mine"}]
    result = runner.invoke(cli, ["measurements", "load", write_input(tmp_path, json.dumps(changed))])
    assert result.exit_code == 0, result.output
    said = re.search(rf"stored 1 measurement\(s\) \(ids (\d+)-\1\); {len(records)} already stored", result.stdout)
    assert said, result.stdout
    bad = {**records[1], "request": {**records[1]["request"], "hardware": {"gpu": "no-such-gpu"}}}
    result = runner.invoke(cli, ["measurements", "load", write_input(tmp_path, json.dumps([{**records[0],
                                 "label": "other"}, bad]), "bad.json")])
    assert result.exit_code == 2, result.output
    assert "record 1: request.hardware.gpu: unknown GPU 'no-such-gpu'" in result.stderr
    assert "Traceback" not in result.output
    result = runner.invoke(cli, ["measurements", "load", str(shipped)])
    assert f"stored 0 measurement(s); {len(records)} already stored" in result.stdout  # "other" was not stored
