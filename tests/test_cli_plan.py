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
