"""The README documents every command and setting; the Dockerfile keeps its promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from app.cli import cli
from app.core.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _commands(app: typer.Typer, prefix: str = "capplan") -> list[str]:
    names = [f"{prefix} {c.name or c.callback.__name__}" for c in app.registered_commands if c.callback]
    for group in app.registered_groups:
        assert group.typer_instance is not None
        names += _commands(group.typer_instance, f"{prefix} {group.name}")
    return names


@pytest.mark.parametrize("command", _commands(cli))
def test_every_command_is_in_the_readme(command: str) -> None:
    assert f"`{command}" in README


@pytest.mark.parametrize("setting", sorted(Settings.model_fields))
def test_every_setting_is_in_the_readme(setting: str) -> None:
    assert f"CAPPLAN_{setting.upper()}" in README


def test_the_readme_has_exactly_the_two_setup_commands() -> None:
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```sh\n(.*?)\n```", setup, re.S) == ["./scripts/serve", "./scripts/test"]
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("exec ./scripts/test")


def test_the_dockerfile_is_slim_non_root_and_health_checked() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, re.M)
    assert re.search(r"^USER (?!root)\w+", dockerfile, re.M)
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert 'CMD ["capplan", "serve"]' in dockerfile
