"""Database identity: one id created with the schema, to bind a Redis namespace to

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create database_identity and give this database its id."""
    table = op.create_table(
        "database_identity",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_database_identity")),
    )
    op.bulk_insert(table, [{"id": str(uuid.uuid4()), "created_at": datetime.now(UTC)}])


def downgrade() -> None:
    """Drop database_identity."""
    op.drop_table("database_identity")
