"""Issue 29 through the CLI: a stack's request estimates with its defaults echoed in the assumptions, and an
unknown mechanism value or a refused combination is exit 2 naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from tests.conftest import write_input

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("cli_database")


def test_a_stack_request_estimates(tmp_path: Path) -> None:
    body = {"model": "llama-3.2-1b", "training": {"method": "lora", "seq_len": 2048, "stack": "unsloth"},
            "hardware": {"gpus_per_node": 1}}
    result = runner.invoke(cli, ["estimate", "--input", write_input(tmp_path, json.dumps(body))])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert any(a.startswith("Stack unsloth: loss_kernel fused") for a in out["assumptions"])
    plain = {**body, "training": {"method": "qlora", "seq_len": 2048, "activation_checkpointing": "full"}}
    result = runner.invoke(cli, ["estimate", "--input", write_input(tmp_path, json.dumps(plain))])
    assert result.exit_code == 0, result.output
    # the same QLoRA job without Unsloth's fused loss and offloaded checkpoints allocates more
    assert json.loads(result.stdout)["memory"]["peak_allocated_bytes"] > out["memory"]["peak_allocated_bytes"]


@pytest.mark.parametrize(("training", "field"), [
    ({"loss_kernel": "blockwise"}, "training.loss_kernel"),
    ({"activation_offloading": "checkpoints"}, "training.activation_offloading"),
    ({"optimizer": "muon", "optimizer_impl": "foreach"}, "training.optimizer_impl"),
])
def test_bad_values_exit_2_naming_the_field(tmp_path: Path, training: dict, field: str) -> None:
    body = {"model": "llama-3.2-1b", "training": training}
    result = runner.invoke(cli, ["estimate", "--input", write_input(tmp_path, json.dumps(body))])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"capplan: error: {field}:"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
