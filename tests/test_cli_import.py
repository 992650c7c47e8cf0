"""``capplan import`` and ``capplan estimate --from``: the request on stdout, the report on stderr; a bad file is
exit 2 with one line naming the file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("cli_database")
DATA = Path(__file__).parent / "data" / "configs"


def test_import_prints_the_request_and_reports_on_stderr() -> None:
    result = runner.invoke(cli, ["import", str(DATA / "torchtune/8B_lora.yaml")])
    assert result.exit_code == 0, result.output
    request = json.loads(result.stdout)
    assert request["model"] == "llama-3.1-8b" and request["training"]["method"] == "lora"
    assert "not represented" in result.stderr and "loss._component_" in result.stderr


def test_import_with_report_and_several_files() -> None:
    result = runner.invoke(cli, ["import", "--report", str(DATA / "llama-factory/qwen3_lora_sft_ds3.yaml"),
                                 str(DATA / "llama-factory/ds_z3_config.json")])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["request"]["parallelism"]["sharding"] == "zero3"
    assert [f["format"] for f in body["report"]["files"]] == ["llama-factory", "deepspeed"]


def test_estimate_from_a_config() -> None:
    result = runner.invoke(cli, ["estimate", "--from", str(DATA / "torchtitan/llama3_8b.toml")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model"]["name"] == "Llama 3.1 8B"


def test_estimate_from_a_config_without_a_model_says_so() -> None:
    result = runner.invoke(cli, ["estimate", "--from", str(DATA / "deepspeed/ds_config_z2.json")])
    assert result.exit_code == 2
    assert result.stderr.startswith("capplan: error: model:")


@pytest.mark.parametrize(("content", "where"), [
    ("base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: two\n", "micro_batch_size: must be a whole number"),
    ("a: !!python/object/apply:os.system ['id']\n", "line 1: the tag"),
    ("a: [", "not valid YAML"),
])
def test_bad_files_exit_2_with_one_line(tmp_path: Path, content: str, where: str) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(content)
    result = runner.invoke(cli, ["import", str(path)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and where in result.stderr and str(path) in result.stderr


def test_flags_are_checked(tmp_path: Path) -> None:
    assert runner.invoke(cli, ["import", "--format", "nope", str(DATA / "axolotl/lora.yml")]).exit_code == 2
    both = runner.invoke(cli, ["estimate", "--input", "x.json", "--from", str(DATA / "axolotl/lora.yml")])
    assert both.exit_code == 2 and "not both" in both.stderr
    big = tmp_path / "big.yaml"
    big.write_text("#" + "x" * (2 << 20))
    result = runner.invoke(cli, ["import", str(big)])
    assert result.exit_code == 2 and "limit" in result.stderr
