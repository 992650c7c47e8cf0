"""saved_revisions: an optional serving line (inference request + result) beside the training estimate

Adds two nullable JSON columns, ``serving_inputs`` (the ``POST /api/v1/inference-estimates`` request, defaults
filled in) and ``serving_result`` (its response as computed then). Existing revisions get NULL in both, which
reads back as "no serving line": every stored value, and every export of it, stays as it was.

Plain ALTER TABLE ADD/DROP COLUMN (never a batch "move and copy", which with SQLite's foreign keys on would
cascade-delete the revisions; see 0002). The downgrade refuses to run while any revision holds a serving line,
so going down never drops one silently.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 04:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ('serving_inputs', 'the inference request of the serving line (null: none)'),
    ('serving_result', 'its inference response, as computed then'),
)


def upgrade() -> None:
    for name, comment in COLUMNS:
        op.add_column('saved_revisions', sa.Column(name, sa.JSON(), nullable=True, comment=comment))


def downgrade() -> None:
    bind = op.get_bind()
    held = bind.execute(sa.text("SELECT COUNT(*) FROM saved_revisions WHERE serving_inputs IS NOT NULL "
                                "AND CAST(serving_inputs AS TEXT) <> 'null'")).scalar()
    if held:
        raise RuntimeError(f'{held} saved revision(s) hold a serving line; downgrading past 0004 would drop them. '
                           'Export them first (GET /api/v1/quotes/{id}/export.json), then clear the lines.')
    for name, _comment in reversed(COLUMNS):
        op.drop_column('saved_revisions', name)
