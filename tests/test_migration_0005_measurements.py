"""Migration 0005_measurements on SQLite and PostgreSQL: the measurements table arrives empty beside every
stored quote (untouched), a stored record reads back as written, and going down refuses to drop records."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from alembic import command
from sqlalchemy import Engine, MetaData, Table, func, inspect, select
from sqlalchemy.orm import Session

from app.core.migrate import alembic_config, current_revision, head_revision, upgrade
from app.models import Measurement

NOW = datetime(2026, 12, 6, 3, 0, 0, tzinfo=UTC)
ROW = {"kind": "run", "label": "l1b", "request": {"model": "llama-3.2-1b", "training": {"seq_len": 4096}},
       "request_key": "a" * 64, "gpu_name": "NVIDIA H200", "versions": {"torch": "2.11.0+cu130", "peft": None},
       "measured": {"peak_allocated_bytes": 32224218112, "step_time_s": 0.108}, "estimated": {"parts_bytes": {}},
       "notes": None, "estimator_version": "0.1.0", "created_at": NOW, "created_by": "t"}


@pytest.fixture
def engine(blank_database_engine: Engine) -> Engine:
    return blank_database_engine


def _down_to_0004(engine: Engine) -> None:
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0004")


def test_0005_adds_an_empty_table_and_keeps_the_quotes(engine: Engine) -> None:
    upgrade(engine, "0004")
    items = Table("saved_items", MetaData(), autoload_with=engine)
    with engine.begin() as conn:
        conn.execute(items.insert().values(id=1, kind="quote", name="q", name_key="q", latest_revision=1,
                                           created_at=NOW, created_by="t"))
    assert "measurements" not in inspect(engine).get_table_names()
    upgrade(engine, "0005_measurements")
    assert current_revision(engine) == "0005_measurements"
    assert head_revision() is not None
    assert {i["name"] for i in inspect(engine).get_indexes("measurements")} == {
        "ix_measurements_kind", "ix_measurements_request_key"}
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(items)).scalar() == 1
        assert conn.execute(select(func.count()).select_from(Measurement.__table__)).scalar() == 0


def test_0005_a_record_reads_back_and_blocks_the_downgrade(engine: Engine) -> None:
    upgrade(engine, "0005_measurements")
    with Session(engine) as session:
        session.add(Measurement(**ROW))
        session.commit()
    with pytest.raises(RuntimeError, match="measurement"):
        _down_to_0004(engine)
    with Session(engine) as session:
        row = session.scalars(select(Measurement)).one()
        assert (row.request, row.versions, row.measured, row.created_at) == (
            ROW["request"], ROW["versions"], ROW["measured"], NOW)
        session.delete(row)  # removed on purpose: now the way down is open
        session.commit()
    _down_to_0004(engine)
    assert current_revision(engine) == "0004" and "measurements" not in inspect(engine).get_table_names()
