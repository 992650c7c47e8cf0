"""``capplan estimate`` on malformed model inputs: exit 2 and one line naming the key, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("cli_database")
HEAD = {"num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000}



@pytest.mark.parametrize(("hf_config", "message"), [
    ({**HEAD, "model_type": "mixtral", "hidden_size": 4096, "num_local_experts": "x"},
     "model.hf_config.num_local_experts: config.json: num_local_experts must be an integer, not 'x'"),
    ({**HEAD, "hidden_size": "abc"}, "model.hf_config.hidden_size: config.json: hidden_size must be an integer"),
    ({**HEAD, "hidden_size": 4096, "text_config": 3}, "model.hf_config.text_config: config.json: text_config must"),
    ({**HEAD, "hidden_size": 4096, "num_key_value_heads": 5},
     "model.hf_config.num_key_value_heads: config.json is not a model the estimator can read"),
])
def test_malformed_hf_config_exits_2_with_one_line(tmp_path: Path, hf_config: dict, message: str) -> None:
    path = tmp_path / "input.json"
    path.write_text(json.dumps({"model": {"hf_config": hf_config}, "training": {"seq_len": 1024}}))
    result = runner.invoke(cli, ["estimate", "--input", str(path)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
