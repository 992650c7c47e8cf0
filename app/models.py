"""Database tables (SQLAlchemy 2 typed models).

- ``api_keys``: quoting-tool credentials; only a salted hash of each key is kept.
- ``catalog_entries``: one row per GPU, server or cloud offer. ``data`` is the seeded source data (or what a
  user posted for a custom entry); ``overrides`` holds sales overrides, kept apart so the effective value is
  always ``data`` updated by ``overrides`` and the seeded value stays visible.
- ``catalog_audit``: every change to an entry (seed, re-seed, create, override), who made it and when.
- ``catalog_seeds``: each time a catalog version was seeded, with what it added and changed.
- ``saved_items`` + ``saved_revisions``: quotes and saved plans. A revision is immutable; a recompute adds one.
  ``name_key`` and ``customer_key`` are :func:`search_key` of the name and customer, kept in step by the model,
  so that the filters ignore case the same way for every script on SQLite (whose ``lower()`` and ``LIKE`` fold
  ASCII only) and on PostgreSQL.
- ``measurements``: what a check or calibration measured for one estimate request, beside the estimate (issue
  31); a record, never altered once stored. ``request_key`` is the sha256 of the request's canonical JSON, what
  the estimate page looks a request up by.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, ClassVar

from sqlalchemy import JSON, DateTime, ForeignKey, MetaData, Numeric, String, TypeDecorator, UniqueConstraint
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, validates

__all__ = [
    "ApiKey",
    "Base",
    "CatalogAudit",
    "CatalogEntry",
    "CatalogSeed",
    "Measurement",
    "SavedItem",
    "SavedRevision",
    "search_key",
    "utcnow",
]

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


#: longest stored search key, in characters: 4 bytes each at most stays well inside PostgreSQL's btree entry limit
SEARCH_KEY_LENGTH = 400


def search_key(text: str) -> str:
    """``text`` for caseless matching: NFKC, then Unicode full case folding, then NFKC again ("Ácme ☃" and
    "ÁCME ☃" give "ácme ☃"; "Straße" gives "strasse"), cut to :data:`SEARCH_KEY_LENGTH` characters.

    Unicode Standard, ch. 3.13 "Default Caseless Matching" (D145, compatibility caseless match);
    ``str.casefold`` is the full case folding of CaseFolding.txt. The stored keys and the filter terms go
    through this one function, so equal names match however they were typed. Frozen in migration 0002 (which
    backfilled the keys): change both or neither."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return folded[:SEARCH_KEY_LENGTH]


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite drops the offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return value.astimezone(UTC) if value is not None and value.tzinfo else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


#: JSON on every database, never PostgreSQL's JSONB: JSON keeps the text as written (key order included), as
#: SQLite does, so a stored quote reads back, and exports, the same on both (migration 0003 made the change).
#: The ``json`` type has no equality operator on PostgreSQL: compare these columns in Python, never in SQL.
PortableJSON = JSON()
#: the same for optional documents: Python ``None`` is stored as SQL NULL, not as the JSON text ``null``
NullableJSON = JSON(none_as_null=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: PortableJSON,
        list[Any]: PortableJSON,
        datetime: UTCDateTime(),
    }


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    prefix: Mapped[str] = mapped_column(String(16), unique=True, comment="public part of the key, for lookup")
    salt: Mapped[str] = mapped_column(String(64))
    key_hash: Mapped[str] = mapped_column(String(128), comment="sha256(salt + secret), hex")
    rate_limit: Mapped[str | None] = mapped_column(String(50), comment="e.g. 600/minute; null = default")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class CatalogEntry(Base):
    __tablename__ = "catalog_entries"
    __table_args__ = (UniqueConstraint("kind", "entry_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(20), comment="gpu | server | cloud_offer")
    entry_id: Mapped[str] = mapped_column(String(200))
    origin: Mapped[str] = mapped_column(String(20), comment="seeded | custom")
    data: Mapped[dict[str, Any]] = mapped_column(comment="seeded source data, or the posted custom entry")
    overrides: Mapped[dict[str, Any]] = mapped_column(default=dict, comment="sales overrides of fields")
    catalog_version: Mapped[str | None] = mapped_column(String(100), comment="catalog that seeded the row")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_by: Mapped[str] = mapped_column(String(100))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_by: Mapped[str] = mapped_column(String(100))

    audit: Mapped[list[CatalogAudit]] = relationship(
        back_populates="entry", order_by="CatalogAudit.id", cascade="all, delete-orphan"
    )

    @property
    def effective(self) -> dict[str, Any]:
        return {**self.data, **self.overrides}


class CatalogAudit(Base):
    __tablename__ = "catalog_audit"

    id: Mapped[int] = mapped_column(primary_key=True)
    entry_pk: Mapped[int] = mapped_column(ForeignKey("catalog_entries.id", ondelete="CASCADE"), index=True)
    action: Mapped[str] = mapped_column(String(20), comment="seed | reseed | create | override")
    changes: Mapped[dict[str, Any]] = mapped_column(comment="fields set (and unset) by this action")
    previous: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON, comment="values before the action")
    reason: Mapped[str | None] = mapped_column(String(500))
    actor: Mapped[str] = mapped_column(String(100), comment="API key name, or catalog:<version>")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    entry: Mapped[CatalogEntry] = relationship(back_populates="audit")


class CatalogSeed(Base):
    __tablename__ = "catalog_seeds"

    id: Mapped[int] = mapped_column(primary_key=True)
    catalog_version: Mapped[str] = mapped_column(String(100))
    added: Mapped[int]
    changed: Mapped[int]
    unchanged: Mapped[int]
    conflicts: Mapped[list[Any]] = mapped_column(comment="ids seeded but held by custom entries")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SavedItem(Base):
    """A quote (``kind="quote"``) or a saved plan (``kind="plan"``); its content lives in revisions."""

    __tablename__ = "saved_items"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(10), index=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    customer: Mapped[str | None] = mapped_column(String(200), index=True)
    name_key: Mapped[str] = mapped_column(
        String(SEARCH_KEY_LENGTH), server_default="", comment="search_key(name), for the filter"
    )
    customer_key: Mapped[str | None] = mapped_column(
        String(SEARCH_KEY_LENGTH), index=True, comment="search_key(customer), for the filter"
    )
    latest_revision: Mapped[int] = mapped_column(default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_by: Mapped[str] = mapped_column(String(100))
    deleted_at: Mapped[datetime | None]
    deleted_by: Mapped[str | None] = mapped_column(String(100))

    revisions: Mapped[list[SavedRevision]] = relationship(
        back_populates="item", order_by="SavedRevision.number", cascade="all, delete-orphan"
    )

    @validates("name")
    def _keep_name_key(self, _field: str, value: str) -> str:
        self.name_key = search_key(value)
        return value

    @validates("customer")
    def _keep_customer_key(self, _field: str, value: str | None) -> str | None:
        self.customer_key = None if value is None else search_key(value)
        return value


class SavedRevision(Base):
    """One immutable version of a quote or plan: the inputs, the full result and the versions used; a quote's
    revision may also hold a serving line (``serving_inputs`` + ``serving_result``, migration 0004)."""

    __tablename__ = "saved_revisions"
    __table_args__ = (UniqueConstraint("item_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("saved_items.id", ondelete="CASCADE"), index=True)
    number: Mapped[int]
    reason: Mapped[str] = mapped_column(String(20), comment="created | recomputed")
    input_kind: Mapped[str] = mapped_column(String(20), comment="estimate (plan once the planner lands)")
    inputs: Mapped[dict[str, Any]]
    chosen_option: Mapped[str | None] = mapped_column(String(200))
    server_count: Mapped[int | None]
    price: Mapped[Decimal | None] = mapped_column(Numeric(16, 2))
    currency: Mapped[str | None] = mapped_column(String(3))
    notes: Mapped[str | None] = mapped_column(String(2000))
    result: Mapped[dict[str, Any]]
    serving_inputs: Mapped[dict[str, Any] | None] = mapped_column(
        NullableJSON, comment="the inference request of the serving line (null: none)")
    serving_result: Mapped[dict[str, Any] | None] = mapped_column(
        NullableJSON, comment="its inference response, as computed then")
    estimator_version: Mapped[str] = mapped_column(String(50))
    catalog_version: Mapped[str] = mapped_column(String(100))
    diff: Mapped[list[Any] | None] = mapped_column(PortableJSON, comment="changes from the previous revision")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_by: Mapped[str] = mapped_column(String(100))

    item: Mapped[SavedItem] = relationship(back_populates="revisions")


class Measurement(Base):
    """One measured record (``capplan check --trace`` / ``--run``, or a calibration case): never altered."""

    __tablename__ = "measurements"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(20), index=True, comment="trace | run | calibration")
    label: Mapped[str | None] = mapped_column(String(200))
    request: Mapped[dict[str, Any]] = mapped_column(comment="the estimate request, defaults filled in")
    request_key: Mapped[str] = mapped_column(String(64), index=True,
                                             comment="sha256 of the request's canonical JSON")
    gpu_name: Mapped[str | None] = mapped_column(String(200))
    versions: Mapped[dict[str, Any]] = mapped_column(comment="torch, transformers, peft, CUDA, driver, ...")
    measured: Mapped[dict[str, Any]]
    estimated: Mapped[dict[str, Any]]
    notes: Mapped[str | None] = mapped_column(String(2000))
    estimator_version: Mapped[str] = mapped_column(String(50))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_by: Mapped[str] = mapped_column(String(100))
