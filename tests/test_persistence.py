"""Migrations, seeding and round trips on SQLite and on a real PostgreSQL (marker ``postgres``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy import Engine, MetaData, Table, inspect, select, text
from sqlalchemy.orm import Session

from app.core.db import make_engine
from app.core.migrate import current_revision, head_revision, upgrade
from app.core.settings import Settings
from app.core.startup import prepare_database
from app.main import create_app
from app.models import (
    SEARCH_KEY_LENGTH,
    Base,
    CatalogAudit,
    CatalogEntry,
    CatalogSeed,
    SavedItem,
    SavedRevision,
    search_key,
)
from app.repositories.catalog import apply_override, get_entry, seed_catalog
from app.repositories.saved import create_item, list_items
from tests.api.fake_catalog import Server, fake_catalog


@pytest.fixture
def db_url(blank_database_url: str) -> str:
    """An empty database: a SQLite file, or a fresh PostgreSQL database (tests/conftest.py)."""
    return blank_database_url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url)
    yield engine
    engine.dispose()


def test_migrations_reach_head_and_match_the_models(engine: Engine) -> None:
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diffs == []
    assert set(inspect(engine).get_table_names()) >= {t.name for t in Base.metadata.sorted_tables}


def test_migrations_go_down_and_up_again(engine: Engine) -> None:
    upgrade(engine)
    upgrade(engine, "head")  # idempotent
    from alembic import command

    from app.core.migrate import alembic_config

    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "base")
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == head_revision()


def test_seeding_twice_changes_nothing(engine: Engine) -> None:
    first = prepare_database(engine, fake_catalog())
    second = prepare_database(engine, fake_catalog())
    assert first is not None and second is not None
    assert (first.added, second.added, second.changed, second.unchanged) == (6, 0, 0, 6)
    with Session(engine) as session:
        assert session.scalar(select(CatalogSeed.catalog_version)) == "test-1"
        assert len(session.scalars(select(CatalogSeed)).all()) == 1
        assert len(session.scalars(select(CatalogAudit)).all()) == 6


def _catalog_with_server_price(price: float, version: str) -> Any:
    catalog = fake_catalog(version)
    server = catalog.servers["dgx-a100-80gb"].model_copy(update={"price_usd": price})
    return catalog.model_copy(update={"servers": {**catalog.servers, "dgx-a100-80gb": server}})


def test_a_new_catalog_version_updates_seeded_data_but_keeps_overrides(engine: Engine) -> None:
    prepare_database(engine, fake_catalog())
    with Session(engine) as session:
        entry = get_entry(session=session, kind="server", entry_id="dgx-a100-80gb")
        assert entry is not None
        apply_override(entry=entry, set_fields={"name": "DGX A100 (sales name)"}, unset=[], actor="sales",
                       reason="naming")
        session.commit()
    report = prepare_database(engine, _catalog_with_server_price(150000, "test-2"), migrate=False)
    assert report is not None and (report.changed, report.added) == (1, 0)
    with Session(engine) as session:
        entry = get_entry(session=session, kind="server", entry_id="dgx-a100-80gb")
        assert entry is not None
        assert entry.data["price_usd"] == 150000
        assert entry.effective["name"] == "DGX A100 (sales name)"
        assert entry.catalog_version == "test-2"
        reseed = entry.audit[-1]
        assert (reseed.action, reseed.actor) == ("reseed", "catalog:test-2")
        assert reseed.previous is not None and reseed.previous["price_usd"] == 200000


def test_a_custom_entry_is_never_replaced_by_a_seeded_one(engine: Engine) -> None:
    prepare_database(engine, fake_catalog())
    with Session(engine) as session:
        from app.repositories.catalog import add_custom

        custom = Server(id="new-box", name="Ours", gpu_id="h100-sxm5-80gb", gpu_count=4).model_dump(mode="json")
        add_custom(session=session, kind="server", data=custom, actor="sales")
        session.commit()
    catalog = fake_catalog("test-2")
    theirs = Server(id="new-box", name="Theirs", gpu_id="a100-sxm4-80gb", gpu_count=8)
    catalog = catalog.model_copy(update={"servers": {**catalog.servers, "new-box": theirs}})
    report = prepare_database(engine, catalog, migrate=False)
    assert report is not None and report.conflicts == ["server:new-box"]
    with Session(engine) as session:
        entry = get_entry(session=session, kind="server", entry_id="new-box")
        assert entry is not None and (entry.origin, entry.data["name"]) == ("custom", "Ours")
        assert session.scalars(select(CatalogSeed.conflicts).order_by(CatalogSeed.id.desc())).first() == [
            "server:new-box"]


def test_revisions_round_trip_json_money_and_time(engine: Engine) -> None:
    upgrade(engine)
    nested = {"memory": {"total_bytes": 2**45, "breakdown_bytes": {"parameters": 1}}, "warnings": ["ü", "✓"]}
    with Session(engine) as session:
        create_item(session=session, kind="quote", name="q", customer="c", actor="t", revision={
            "input_kind": "estimate", "inputs": {"model": "x"}, "result": nested, "price": Decimal("1234567.89"),
            "currency": "USD", "estimator_version": "1", "catalog_version": "v", "chosen_option": None,
            "server_count": 3, "notes": None})
        session.commit()
    with Session(engine) as session:
        rev = session.scalars(select(SavedRevision)).one()
        item = session.scalars(select(SavedItem)).one()
        assert rev.result == nested
        assert rev.price == Decimal("1234567.89")
        assert item.created_at.tzinfo is not None and item.created_at.utcoffset() == UTC.utcoffset(None)


def test_the_app_migrates_and_seeds_on_start(db_url: str) -> None:
    settings = Settings(database_url=db_url)
    for _ in range(2):  # the second start finds everything in place
        with TestClient(create_app(settings, catalog=fake_catalog())) as client:
            assert client.get("/readyz").json() == {"status": "ok"}
            assert len(client.get("/api/v1/catalog/gpus").json()["items"]) == 3
    engine = make_engine(db_url)
    try:
        assert current_revision(engine) == head_revision()
        with Session(engine) as session:
            assert len(session.scalars(select(CatalogEntry)).all()) == 6
    finally:
        engine.dispose()


def test_seed_catalog_records_the_version_on_each_row(engine: Engine) -> None:
    upgrade(engine)
    with Session(engine) as session:
        seed_catalog(session=session, catalog=fake_catalog("v-42"))
        session.commit()
        versions = set(session.scalars(select(CatalogEntry.catalog_version)))
    assert versions == {"v-42"}


def test_the_shipped_catalog_seeds_every_entry(tmp_path: Path) -> None:
    from hardware_catalog import load_catalog

    catalog = load_catalog()
    with TestClient(create_app(Settings(database_url=f"sqlite:///{tmp_path / 'real.db'}"))) as client:
        servers = client.get("/api/v1/catalog/servers").json()
        offers = client.get("/api/v1/catalog/cloud-offers").json()
    assert servers["catalog_version"] == catalog.version
    assert {e["id"] for e in servers["items"]} == set(catalog.servers)
    assert len(offers["items"]) == len(catalog.cloud_offers)


_NAMES = [("Ácme ☃ quote", "Ácme ☃"), ("STRASSE", "Straße AG"), ("no customer", None), ("deleted one", "ΣΊΣΥΦΟΣ")]


def _rows_at_0001(engine: Engine) -> None:
    """Quotes written by the 0001 schema (no search keys), one of them soft-deleted, each with two revisions."""
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    meta = MetaData()
    items = Table("saved_items", meta, autoload_with=engine)
    revisions = Table("saved_revisions", meta, autoload_with=engine)
    with engine.begin() as conn:
        for i, (name, customer) in enumerate(_NAMES, start=1):
            conn.execute(items.insert().values(
                id=i, kind="quote", name=name, customer=customer, latest_revision=2, created_at=now,
                created_by="t", deleted_at=now if name == "deleted one" else None))
            for number in (1, 2):
                conn.execute(revisions.insert().values(
                    item_id=i, number=number, reason="created" if number == 1 else "recomputed",
                    input_kind="estimate", inputs={"model": "x"}, result={"n": number, "name": name},
                    price=Decimal("12.34"), currency="USD", estimator_version="1", catalog_version="v",
                    created_at=now, created_by="t"))


def _saved(engine: Engine) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with engine.connect() as conn:
        items = conn.execute(text("SELECT id, kind, name, customer, latest_revision, created_by, deleted_at IS NULL "
                                  "FROM saved_items ORDER BY id")).all()
        revisions = conn.execute(text("SELECT item_id, number, reason, price, currency FROM saved_revisions "
                                      "ORDER BY item_id, number")).all()
    return [tuple(r) for r in items], [tuple(r) for r in revisions]


def test_migration_0002_backfills_search_keys_and_loses_nothing(engine: Engine) -> None:
    upgrade(engine, "0001")
    _rows_at_0001(engine)
    before = _saved(engine)
    assert len(before[1]) == 8
    upgrade(engine)
    assert _saved(engine) == before, "names, customers and revisions are exactly as they were"
    with Session(engine) as session:
        items = session.scalars(select(SavedItem).order_by(SavedItem.id)).all()
        assert [(i.name_key, i.customer_key) for i in items] == [
            (search_key(n), None if c is None else search_key(c)) for n, c in _NAMES]
        assert items[0].customer_key == "ácme ☃" and items[1].customer_key == "straße ag".replace("ß", "ss")
        found, _ = list_items(session=session, kind="quote", customer="ÁCME ☃", name=None, limit=10, offset=0)
        assert [i.id for i in found] == [1]
        found, _ = list_items(session=session, kind="quote", customer=None, name="strasse", limit=10, offset=0)
        assert [i.id for i in found] == [2]
        found, _ = list_items(session=session, kind="quote", customer="σίσυφος", name=None, limit=10, offset=0)
        assert found == [], "a deleted quote stays hidden"
    downgrade_to_0001(engine)
    assert _saved(engine) == before, "going back to 0001 keeps every row too (no table rebuild on SQLite)"


def downgrade_to_0001(engine: Engine) -> None:
    from alembic import command

    from app.core.migrate import alembic_config

    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0001")
    assert current_revision(engine) == "0001"


def test_the_search_key_folds_case_and_unicode_forms() -> None:
    assert search_key("Ácme ☃") == search_key("A\u0301CME ☃") == "ácme ☃"
    assert search_key("Straße") == search_key("STRASSE") == "strasse"
    assert search_key("ﬁnance") == "finance"
    assert len(search_key("\ufdfa" * 200)) == SEARCH_KEY_LENGTH
