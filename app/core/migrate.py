"""Apply Alembic migrations: on app start (``migrate_on_start``) and from ``capplan db upgrade``."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

__all__ = ["alembic_config", "current_revision", "head_revision", "upgrade"]

_INI = Path(__file__).resolve().parents[1] / "alembic.ini"


def alembic_config() -> Config:
    return Config(str(_INI))


def upgrade(engine: Engine, revision: str = "head") -> None:
    """``alembic upgrade head`` on ``engine`` (works for in-memory SQLite: it reuses the one connection)."""
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()
