"""JSON columns keep their text on PostgreSQL; catalog source links are http(s) only

1. PostgreSQL: every JSONB column becomes JSON (``USING col::json``). JSONB stores a parsed form and gives
   keys back sorted by length, then bytes; JSON keeps the text exactly as written, as SQLite does, so a saved
   quote's inputs and result (and with them its CSV export) come back in the same order on both databases.
   Rows already stored as JSONB keep every key and value; only their key order stays JSONB's (it was
   lost when they were written). SQLite stores JSON as text already: nothing to do there.
2. Catalog entries: a source ``url`` that is not an ``http(s)://`` URL (``javascript:``, ``data:``, ...) in
   ``data`` or ``overrides`` is set to null. Each changed row gets a ``sanitize`` audit row naming the paths
   changed, with the values before in ``previous`` (nothing is lost), actor ``migration:0003``, and its
   ``updated_at`` moves so the effective catalog is rebuilt.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 17:30:00
"""
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTOR = 'migration:0003'

#: (table, column, nullable) of every JSON column
JSON_COLUMNS = [
    ('catalog_entries', 'data', False),
    ('catalog_entries', 'overrides', False),
    ('catalog_seeds', 'conflicts', False),
    ('catalog_audit', 'changes', False),
    ('catalog_audit', 'previous', True),
    ('saved_revisions', 'inputs', False),
    ('saved_revisions', 'result', False),
    ('saved_revisions', 'diff', True),
]


def _is_web_url(value: object) -> bool:
    """Frozen copy of hardware_catalog.urls.is_web_url as of this revision (migrations never import app)."""
    if not isinstance(value, str) or not value:
        return False
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return (parts.scheme.lower() in ('http', 'https') and bool(parts.netloc)
            and value.lower().startswith(('http://', 'https://')))


def _clean(value: Any, path: str, found: dict[str, Any]) -> Any:
    """``value`` with every non-web string under a ``url`` key set to None; ``found`` gets path -> old value."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            where = f'{path}.{key}' if path else str(key)
            if key == 'url' and item is not None and not _is_web_url(item):
                found[where] = item
                out[key] = None
            else:
                out[key] = _clean(item, where, found)
        return out
    if isinstance(value, list):
        return [_clean(item, f'{path}.{i}', found) for i, item in enumerate(value)]
    return value


def _sanitize_urls() -> None:
    entries = sa.table('catalog_entries', sa.column('id', sa.Integer()), sa.column('data', sa.JSON()),
                       sa.column('overrides', sa.JSON()), sa.column('updated_at', sa.DateTime(timezone=True)),
                       sa.column('updated_by', sa.String()))
    audit = sa.table('catalog_audit', sa.column('entry_pk', sa.Integer()), sa.column('action', sa.String()),
                     sa.column('changes', sa.JSON()), sa.column('previous', sa.JSON()),
                     sa.column('reason', sa.String()), sa.column('actor', sa.String()),
                     sa.column('created_at', sa.DateTime(timezone=True)))
    bind = op.get_bind()
    now = datetime.now(UTC)
    for row in bind.execute(sa.select(entries.c.id, entries.c.data, entries.c.overrides)
                            .order_by(entries.c.id)).all():
        found_data: dict[str, Any] = {}
        found_overrides: dict[str, Any] = {}
        data = _clean(row.data, '', found_data)
        overrides = _clean(row.overrides, '', found_overrides)
        if not found_data and not found_overrides:
            continue
        bind.execute(entries.update().where(entries.c.id == row.id)
                     .values(data=data, overrides=overrides, updated_at=now, updated_by=ACTOR))
        changes = {'data': {p: None for p in found_data}, 'overrides': {p: None for p in found_overrides}}
        previous = {'data': found_data, 'overrides': found_overrides}
        bind.execute(audit.insert().values(
            entry_pk=row.id, action='sanitize', changes=changes, previous=previous,
            reason='source links must be http(s) URLs (migration 0003)', actor=ACTOR, created_at=now))


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        for table, column, nullable in JSON_COLUMNS:
            op.alter_column(table, column, type_=sa.JSON(), existing_type=postgresql.JSONB(),
                            existing_nullable=nullable, postgresql_using=f'{column}::json')
    _sanitize_urls()


def downgrade() -> None:
    """Back to JSONB on PostgreSQL (key order becomes JSONB's again); sanitized links stay null (the old
    values are in the audit rows)."""
    if op.get_bind().dialect.name == 'postgresql':
        for table, column, nullable in JSON_COLUMNS:
            op.alter_column(table, column, type_=postgresql.JSONB(), existing_type=sa.JSON(),
                            existing_nullable=nullable, postgresql_using=f'{column}::jsonb')
