"""`capplan plan --input FILE`: the planner from the command line (issue 6)."""

import json
from pathlib import Path

from typer.testing import CliRunner

from app.cli import cli

runner = CliRunner()


def test_plan_prints_ranked_plans(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"model": "llama-3.1-8b", "training": {"method": "lora", "seq_len": 2048},
                                "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 1},
                                "global_batch_size": 32}))
    result = runner.invoke(cli, ["plan", "--input", str(path)])
    assert result.exit_code == 0, result.output
    plans = json.loads(result.output)["plans"]
    assert plans and all(p["estimate"]["memory"]["fits"] for p in plans)
    assert [p["rank"] for p in plans] == sorted(p["rank"] for p in plans)


def test_plan_bad_input_exits_2_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"constraints": {"max_nodes": "many"}}))
    result = runner.invoke(cli, ["plan", "--input", str(path)])
    assert result.exit_code == 2
    assert "constraints.max_nodes" in result.output
    assert "Traceback" not in result.output


def test_plan_question_fewest_gpus(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": "llama-3.1-70b", "training": {"method": "full"},
                                "constraints": {"servers": ["nvidia-dgx-a100-320gb"], "max_nodes": 4}}))
    result = runner.invoke(cli, ["plan", "--question", "fewest-gpus", "--input", str(path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    (item,) = data["fewest_gpus"]
    # a DGX A100 320GB holds 1 TiB of RAM: one node's ZeRO-3 offload of 70B (16 B per parameter) does not fit it
    assert data["question"] == "fewest-gpus" and item["num_nodes"] >= 2
    assert item["plan"]["host_ram_bytes_per_node"] <= 1024 * 2**30
    assert data["answers"][0].startswith("nvidia-dgx-a100-320gb: ")


def test_plan_question_longest_sequence(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": "llama-3.1-8b", "training": {"method": "lora"}, "global_batch_size": 8,
                                "hardware": {"server": "nvidia-dgx-h100", "num_nodes": 1}, "granularity": 8192}))
    result = runner.invoke(cli, ["plan", "-q", "longest-sequence", "-i", str(path)])
    assert result.exit_code == 0, result.output
    (seq,) = json.loads(result.output)["longest_sequence"]
    assert seq["seq_len"] >= 32768 and seq["seq_len"] % 8192 == 0


def test_plan_unknown_question_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text("{}")
    result = runner.invoke(cli, ["plan", "--question", "cheapest", "--input", str(path)])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "fewest-gpus, largest-model, longest-sequence" in result.output


def test_plan_question_bad_field_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"granularity": 7}))
    result = runner.invoke(cli, ["plan", "--question", "longest-sequence", "--input", str(path)])
    assert result.exit_code == 2 and "granularity" in result.output and "Traceback" not in result.output


def test_plan_vary_mechanisms_from_the_command_line(tmp_path: Path) -> None:
    """Issue 29: --vary lets the planner change the loss kernel; the 8B LoRA at 16k tokens then has one-A100-40GB
    plans, each saying it uses the fused loss; a name that is not a mechanism exits 2 naming the field."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"model": "llama-3.1-8b",
                                "training": {"method": "lora", "seq_len": 16384, "activation_checkpointing": "full"},
                                "hardware": {"gpu": "a100-sxm4-40gb", "num_nodes": 1, "gpus_per_node": 1},
                                "global_batch_size": 8}))
    plain = runner.invoke(cli, ["plan", "--input", str(path)])
    assert plain.exit_code == 0 and json.loads(plain.output)["plans"] == []
    result = runner.invoke(cli, ["plan", "--input", str(path), "--vary", "loss_kernel"])
    assert result.exit_code == 0, result.output
    plans = json.loads(result.output)["plans"]
    assert plans and all(p["mechanism_changes"]["changes"] == {"training.loss_kernel": "fused"} for p in plans)
    bad = runner.invoke(cli, ["plan", "--input", str(path), "--vary", "lossy"])
    assert bad.exit_code == 2 and "vary_mechanisms" in bad.output
