"""``capplan infer --input FILE``: one inference request or a list, JSON out; bad input exits 2 naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from tests.conftest import write_input

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("cli_database")



def test_infer_one_request(tmp_path: Path) -> None:
    body = {"model": "llama-3.1-70b", "serving": {"tensor_parallel_size": 4, "weights": "fp8"}}
    result = runner.invoke(cli, ["infer", "--input", write_input(tmp_path, json.dumps(body))])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["starts"] is True
    assert "--tensor-parallel-size 4" in out["command"] and "--quantization fp8" in out["command"]
    assert out["memory"]["kv_tokens"] > 0 and out["speed"]["tpot_s"] > 0


def test_infer_a_list_from_stdin() -> None:
    result = runner.invoke(cli, ["infer", "-i", "-"], input=json.dumps([{}, {"engine": "sglang"}]))
    assert result.exit_code == 0, result.output
    assert [r["engine"] for r in json.loads(result.stdout)] == ["vllm", "sglang"]


@pytest.mark.parametrize(("content", "message"), [
    ("[{", "is not valid JSON"),
    (json.dumps({"serving": {"tensor_parallel_size": 0}}), "serving.tensor_parallel_size: Input should be"),
    (json.dumps([{}, {"hardware": {"gpu": "nope"}}]), "1.hardware.gpu: unknown GPU 'nope'"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, content: str, message: str) -> None:
    result = runner.invoke(cli, ["infer", "--input", write_input(tmp_path, content)])
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
