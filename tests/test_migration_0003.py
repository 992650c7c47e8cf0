"""Migration 0003 on SQLite and PostgreSQL: JSON columns become ``json`` (not ``jsonb``) keeping every stored
value, and non-http(s) catalog source links are set to null with an audit row holding the old value."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Engine, MetaData, Table, inspect, select, text
from sqlalchemy.orm import Session

from app.core.migrate import alembic_config, current_revision, head_revision, upgrade
from app.models import CatalogAudit, CatalogEntry, SavedRevision

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
GOOD = "https://vendor.example/datasheet.pdf"
PLANTED_DATA = {
    "id": "x1", "name": "X1", "memory_bytes": 1,
    "sources": [{"citation": "ok", "url": GOOD, "date": "2026"},
                {"citation": "bad", "url": "javascript:alert(1)", "date": "2026"}],
    "field_sources": {"memory_bytes": [{"citation": "bad too", "url": "data:text/html,x", "date": "2026"}]},
}
PLANTED_OVERRIDES = {"sources": [{"citation": "sales", "url": " vbscript:msgbox(1)", "date": "2026"}]}
CLEAN_DATA = {"id": "x2", "name": "X2", "sources": [{"citation": "ok", "url": GOOD, "date": "2026"}]}
INPUTS = {"model": "llama-3.2-1b", "training": {"seq_len": 4096, "micro_batch_size": 1}, "hardware": {"gpu": "a"}}
RESULT = {"memory": {"fits": True, "peak_bytes": 123}, "warnings": ["w"], "z": 1.5, "a": None}


@pytest.fixture
def engine(blank_database_engine: Engine) -> Engine:
    return blank_database_engine


def _rows_at_0002(engine: Engine) -> None:
    meta = MetaData()
    entries = Table("catalog_entries", meta, autoload_with=engine)
    revisions = Table("saved_revisions", meta, autoload_with=engine)
    items = Table("saved_items", meta, autoload_with=engine)
    with engine.begin() as conn:
        for pk, (data, overrides) in enumerate([(PLANTED_DATA, PLANTED_OVERRIDES), (CLEAN_DATA, {})], start=1):
            conn.execute(entries.insert().values(
                id=pk, kind="gpu", entry_id=data["id"], origin="custom", data=data, overrides=overrides,
                catalog_version=None, created_at=NOW, created_by="t", updated_at=NOW, updated_by="t"))
        conn.execute(items.insert().values(id=1, kind="quote", name="q", name_key="q", customer=None,
                                           latest_revision=1, created_at=NOW, created_by="t"))
        conn.execute(revisions.insert().values(
            item_id=1, number=1, reason="created", input_kind="estimate", inputs=INPUTS, result=RESULT,
            price=Decimal("1.00"), currency="USD", estimator_version="1", catalog_version="v",
            diff=[{"path": "a", "before": 1, "after": 2}], created_at=NOW, created_by="t"))


def _column_types(engine: Engine) -> set[str]:
    return {str(c["type"]).upper() for t in ("catalog_entries", "catalog_audit", "saved_revisions", "catalog_seeds")
            for c in inspect(engine).get_columns(t) if "JSON" in str(c["type"]).upper()}


def test_0003_keeps_every_value_and_nulls_only_bad_links(engine: Engine) -> None:
    upgrade(engine, "0002")
    _rows_at_0002(engine)
    if engine.dialect.name == "postgresql":
        assert _column_types(engine) == {"JSONB"}
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    if engine.dialect.name == "postgresql":
        assert _column_types(engine) == {"JSON"}
    with Session(engine) as session:
        planted, clean = session.scalars(select(CatalogEntry).order_by(CatalogEntry.id)).all()
        assert planted.data["sources"] == [PLANTED_DATA["sources"][0], {**PLANTED_DATA["sources"][1], "url": None}]
        assert planted.data["field_sources"]["memory_bytes"][0] == {"citation": "bad too", "url": None, "date": "2026"}
        assert planted.overrides == {"sources": [{"citation": "sales", "url": None, "date": "2026"}]}
        assert {k: v for k, v in planted.data.items() if k not in ("sources", "field_sources")} == {
            "id": "x1", "name": "X1", "memory_bytes": 1}
        assert (planted.updated_by, planted.updated_at > NOW) == ("migration:0003", True)
        audit = session.scalars(select(CatalogAudit)).all()
        assert [(a.entry_pk, a.action, a.actor) for a in audit] == [(1, "sanitize", "migration:0003")]
        assert audit[0].previous == {
            "data": {"sources.1.url": "javascript:alert(1)", "field_sources.memory_bytes.0.url": "data:text/html,x"},
            "overrides": {"sources.0.url": " vbscript:msgbox(1)"}}
        assert (clean.data, clean.overrides, clean.updated_by) == (CLEAN_DATA, {}, "t")
        rev = session.scalars(select(SavedRevision)).one()
        assert (rev.inputs, rev.result, rev.diff) == (INPUTS, RESULT, [{"path": "a", "before": 1, "after": 2}])


def test_0003_new_rows_keep_their_text_and_go_down_and_up(engine: Engine) -> None:
    upgrade(engine)
    _rows_at_0002(engine)
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT CAST(result AS TEXT), CAST(inputs AS TEXT) FROM saved_revisions")).one()
    assert [json.loads(s, object_pairs_hook=lambda p: [k for k, _ in p]) for s in stored] == [
        ["memory", "warnings", "z", "a"], ["model", "training", "hardware"]], "key order as written"
    assert json.loads(stored[0]) == RESULT
    from alembic import command

    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0002")
    with Session(engine) as session:  # the columns of 0002 only: later revisions add more (0004)
        assert tuple(session.execute(select(SavedRevision.inputs, SavedRevision.result)).one()) == (INPUTS, RESULT)
    upgrade(engine)
    with Session(engine) as session:
        rev: Any = session.scalars(select(SavedRevision)).one()
        assert (rev.inputs, rev.result) == (INPUTS, RESULT)
