"""Migration 0004 on SQLite and PostgreSQL: saved revisions gain a nullable serving line; every stored quote
reads back unchanged (no serving line), a new one keeps its line, and going down refuses to drop a line."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, MetaData, Table, inspect, select, update
from sqlalchemy.orm import Session

from app.core.migrate import alembic_config, current_revision, upgrade
from app.models import SavedRevision

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
INPUTS = {"model": "llama-3.2-1b", "training": {"seq_len": 4096}, "hardware": {"gpu": "a"}}
RESULT = {"memory": {"fits": True, "peak_bytes": 123}, "warnings": ["w"], "z": 1.5, "a": None}
SERVING_INPUTS = {"model": "llama-3.1-8b", "engine": "vllm", "workload": {"input_tokens": 1024}}
SERVING_RESULT = {"starts": True, "cost": {"usd_per_million_output_tokens": 0.12}}


@pytest.fixture
def engine(blank_database_engine: Engine) -> Engine:
    return blank_database_engine


def _quote_at_0003(engine: Engine) -> None:
    meta = MetaData()
    revisions = Table("saved_revisions", meta, autoload_with=engine)
    items = Table("saved_items", meta, autoload_with=engine)
    with engine.begin() as conn:
        conn.execute(items.insert().values(id=1, kind="quote", name="q", name_key="q", customer="Acme",
                                           customer_key="acme", latest_revision=2, created_at=NOW, created_by="t"))
        for number in (1, 2):
            conn.execute(revisions.insert().values(
                item_id=1, number=number, reason="created" if number == 1 else "recomputed", input_kind="estimate",
                inputs=INPUTS, result=RESULT, price=Decimal("399999.99"), currency="USD", notes="n",
                estimator_version="1", catalog_version="v", diff=None if number == 1 else [],
                created_at=NOW, created_by="t"))


def _columns(engine: Engine) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns("saved_revisions")}


def _rows(engine: Engine) -> list[tuple[Any, ...]]:
    with Session(engine) as session:
        return [(r.number, r.inputs, r.result, r.price, r.notes, r.diff, r.serving_inputs, r.serving_result)
                for r in session.scalars(select(SavedRevision).order_by(SavedRevision.number))]


def _down_to_0003(engine: Engine) -> None:
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0003")


def test_0004_keeps_every_saved_quote_as_it_was(engine: Engine) -> None:
    upgrade(engine, "0003")
    _quote_at_0003(engine)
    assert not {"serving_inputs", "serving_result"} & _columns(engine)
    upgrade(engine, "0004")
    assert current_revision(engine) == "0004"
    assert {"serving_inputs", "serving_result"} <= _columns(engine)
    before = [(n, INPUTS, RESULT, Decimal("399999.99"), "n", d, None, None) for n, d in ((1, None), (2, []))]
    assert _rows(engine) == before


def test_0004_a_serving_line_survives_and_blocks_the_downgrade(engine: Engine) -> None:
    upgrade(engine, "0003")
    _quote_at_0003(engine)
    upgrade(engine, "0004")
    with engine.begin() as conn:
        conn.execute(update(SavedRevision.__table__).where(SavedRevision.__table__.c.number == 2)
                     .values(serving_inputs=SERVING_INPUTS, serving_result=SERVING_RESULT))
    assert _rows(engine)[1][6:] == (SERVING_INPUTS, SERVING_RESULT)
    with pytest.raises(RuntimeError, match="hold a serving line"):
        _down_to_0003(engine)
    assert current_revision(engine) == "0004" and _rows(engine)[1][6:] == (SERVING_INPUTS, SERVING_RESULT)
    with engine.begin() as conn:  # cleared on purpose: now the way down is open, and loses nothing else
        conn.execute(update(SavedRevision.__table__).values(serving_inputs=None, serving_result=None))
    _down_to_0003(engine)
    assert current_revision(engine) == "0003" and not {"serving_inputs"} & _columns(engine)
    upgrade(engine, "0004")
    assert [r[:6] for r in _rows(engine)] == [(1, INPUTS, RESULT, Decimal("399999.99"), "n", None),
                                              (2, INPUTS, RESULT, Decimal("399999.99"), "n", [])]
