"""measurements: measured records beside the estimate (capplan check --trace / --run, calibration cases)

A new table, nothing else touched. A measurement is a record, never altered once stored (the API has no update
or delete route). ``request_key`` (sha256 of the request's canonical JSON) is indexed: the estimate page looks
up the measurements of its own request by it. JSON columns are plain JSON on both databases (as since 0003).

The downgrade refuses to run while the table holds a record, so going down never drops one silently.

Revision ID: 0005_measurements
Revises: 0004
Create Date: 2026-12-06 02:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005_measurements'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'measurements',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=20), nullable=False, comment='trace | run | calibration'),
        sa.Column('label', sa.String(length=200), nullable=True),
        sa.Column('request', sa.JSON(), nullable=False, comment='the estimate request, defaults filled in'),
        sa.Column('request_key', sa.String(length=64), nullable=False,
                  comment="sha256 of the request's canonical JSON"),
        sa.Column('gpu_name', sa.String(length=200), nullable=True),
        sa.Column('versions', sa.JSON(), nullable=False, comment='torch, transformers, peft, CUDA, driver, ...'),
        sa.Column('measured', sa.JSON(), nullable=False),
        sa.Column('estimated', sa.JSON(), nullable=False),
        sa.Column('notes', sa.String(length=2000), nullable=True),
        sa.Column('estimator_version', sa.String(length=50), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('created_by', sa.String(length=100), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_measurements')),
    )
    op.create_index(op.f('ix_measurements_kind'), 'measurements', ['kind'], unique=False)
    op.create_index(op.f('ix_measurements_request_key'), 'measurements', ['request_key'], unique=False)


def downgrade() -> None:
    held = op.get_bind().execute(sa.text('SELECT COUNT(*) FROM measurements')).scalar()
    if held:
        raise RuntimeError(f'{held} measurement(s) are stored; downgrading past 0005_measurements would drop them. '
                           'Export them first (GET /api/v1/measurements), then delete them.')
    op.drop_index(op.f('ix_measurements_request_key'), table_name='measurements')
    op.drop_index(op.f('ix_measurements_kind'), table_name='measurements')
    op.drop_table('measurements')
