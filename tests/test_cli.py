"""``capplan`` through typer's CliRunner (and one real subprocess): output, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.core.settings import get_settings
from tests.conftest import write_input

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("cli_database")
SMALL = {"model": "llama-3.2-1b", "training": {"seq_len": 1024}}



def test_estimate_one_request(tmp_path: Path) -> None:
    result = runner.invoke(cli, ["estimate", "--input", write_input(tmp_path, json.dumps(SMALL))])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["memory"]["fits"] is True


def test_estimate_a_list(tmp_path: Path) -> None:
    result = runner.invoke(cli, ["estimate", "-i", write_input(tmp_path, json.dumps([SMALL, SMALL]))])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 2


def test_estimate_from_stdin() -> None:
    result = runner.invoke(cli, ["estimate", "--input", "-"], input=json.dumps(SMALL))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "is not valid JSON: line 1 column 2"),
    (json.dumps({"training": {"seq_len": 0}}), "training.seq_len: Input should be greater than or equal to 1"),
    (json.dumps([SMALL, {"hardware": {"gpu": "nope"}}]), "1.hardware.gpu: unknown GPU 'nope'"),
    (json.dumps({"model": "no-such-model"}), "model: unknown model preset"),
    (json.dumps({"training": {"allocator": "cudaMallocAsync"}}), "training.allocator: Input should be 'default' or "
                                                                   "'expandable_segments'"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, content: str, message: str) -> None:
    result = runner.invoke(cli, ["estimate", "--input", write_input(tmp_path, content)])
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_an_unreadable_file_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(cli, ["estimate", "--input", str(tmp_path / "missing.json")])
    assert result.exit_code == 2
    assert "cannot read" in result.stderr and "No such file" in result.stderr


def test_api_keys_create_list_revoke() -> None:
    created = runner.invoke(cli, ["api-keys", "create", "--name", "quoting-tool", "--rate-limit", "50/minute"])
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert key.startswith("cpk_")
    listed = runner.invoke(cli, ["api-keys", "list"]).stdout
    assert "quoting-tool" in listed and "50/minute" in listed and "active" in listed
    assert key.split("_", 2)[2] not in listed
    revoked = runner.invoke(cli, ["api-keys", "revoke", "quoting-tool"])
    assert revoked.exit_code == 0 and "revoked quoting-tool" in revoked.stdout
    assert "revoked 20" in runner.invoke(cli, ["api-keys", "list"]).stdout


def test_api_keys_errors() -> None:
    runner.invoke(cli, ["api-keys", "create", "--name", "dup"])
    duplicate = runner.invoke(cli, ["api-keys", "create", "--name", "dup"])
    assert duplicate.exit_code == 2 and "already exists" in duplicate.stderr
    assert runner.invoke(cli, ["api-keys", "create", "--name", "x", "--rate-limit", "fast"]).exit_code == 2
    unknown = runner.invoke(cli, ["api-keys", "revoke", "nobody"])
    assert unknown.exit_code == 2
    assert unknown.stderr == "capplan: error: no API key with the name or prefix 'nobody'\n"
    assert unknown.stdout == ""


def test_db_upgrade_and_catalog_show(cli_database: Path) -> None:
    upgraded = runner.invoke(cli, ["db", "upgrade"])
    assert upgraded.exit_code == 0, upgraded.output
    assert "database at revision" in upgraded.stdout and "added" in upgraded.stdout
    again = runner.invoke(cli, ["db", "upgrade"])
    assert " 0 added, 0 changed" in again.stdout
    shown = runner.invoke(cli, ["catalog", "show", "--kind", "gpu"])
    assert "h100-sxm5-80gb" in shown.stdout
    entries = json.loads(runner.invoke(cli, ["catalog", "show", "--kind", "server", "--json"]).stdout)
    assert {e["kind"] for e in entries} == {"server"}
    assert runner.invoke(cli, ["catalog", "show", "--kind", "tpu"]).exit_code == 2


def test_bad_settings_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_RATE_LIMIT_PER_KEY", "lots")
    get_settings.cache_clear()
    result = subprocess.run([sys.executable, "-m", "app", "api-keys", "list"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert "rate_limit_per_key" in result.stderr and "Traceback" not in result.stderr


def test_the_installed_command_runs_in_a_subprocess(tmp_path: Path) -> None:
    capplan = Path(sys.executable).with_name("capplan")
    good = subprocess.run([str(capplan), "estimate", "--input", write_input(tmp_path, json.dumps(SMALL))],
                          capture_output=True, text=True, timeout=120, check=False)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["model"]["name"]
    bad = subprocess.run([str(capplan), "estimate", "--input", str(tmp_path / "nope.json")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2
    assert bad.stderr.startswith("capplan: error: cannot read") and "Traceback" not in bad.stderr
