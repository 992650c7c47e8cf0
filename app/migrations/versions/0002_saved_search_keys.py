"""saved_items: casefolded search keys for the name and customer filters

SQLite's lower() and LIKE fold ASCII letters only, so "Ácme ☃" was not found as "ácme ☃" (nor, through
lower(), even as itself); the filters now compare stored keys made by one Python function on both databases.

Adds ``name_key`` (not null, default '') and ``customer_key`` (indexed), then fills both for every existing
row, deleted ones included. Nothing else is touched: names, customers and revisions stay as they were.

Plain ALTER TABLE ADD/DROP COLUMN on purpose, never a batch "move and copy": with SQLite's foreign keys on,
dropping the old saved_items table would cascade-delete every saved revision.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03 08:00:00
"""
import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY_LENGTH = 400
BATCH = 1000


def _search_key(text: str) -> str:
    """Frozen copy of app.models.search_key as of this revision (migrations never import app)."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return folded[:KEY_LENGTH]


def _backfill() -> None:
    items = sa.table("saved_items", sa.column("id", sa.Integer()), sa.column("name", sa.String()),
                     sa.column("customer", sa.String()), sa.column("name_key", sa.String()),
                     sa.column("customer_key", sa.String()))
    bind = op.get_bind()
    rows = bind.execute(sa.select(items.c.id, items.c.name, items.c.customer).order_by(items.c.id)).all()
    update = (items.update().where(items.c.id == sa.bindparam("row_id"))
              .values(name_key=sa.bindparam("new_name_key"), customer_key=sa.bindparam("new_customer_key")))
    for start in range(0, len(rows), BATCH):
        bind.execute(update, [
            {"row_id": r.id, "new_name_key": _search_key(r.name),
             "new_customer_key": None if r.customer is None else _search_key(r.customer)}
            for r in rows[start:start + BATCH]
        ])


def upgrade() -> None:
    op.add_column('saved_items', sa.Column('name_key', sa.String(length=KEY_LENGTH), server_default='',
                                           nullable=False, comment='search_key(name), for the filter'))
    op.add_column('saved_items', sa.Column('customer_key', sa.String(length=KEY_LENGTH), nullable=True,
                                           comment='search_key(customer), for the filter'))
    op.create_index(op.f('ix_saved_items_customer_key'), 'saved_items', ['customer_key'], unique=False)
    _backfill()


def downgrade() -> None:
    op.drop_index(op.f('ix_saved_items_customer_key'), table_name='saved_items')
    op.drop_column('saved_items', 'customer_key')
    op.drop_column('saved_items', 'name_key')
