"""Outbox rows: publish attempts, backoff and a terminal unpublishable state

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add publish_attempts, next_publish_at and publish_error to workflow_steps."""
    with op.batch_alter_table("workflow_steps") as batch:
        batch.add_column(
            sa.Column("publish_attempts", sa.Integer(), server_default="0", nullable=False)
        )
        batch.add_column(sa.Column("next_publish_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("publish_error", sa.Text(), nullable=True))


def downgrade() -> None:
    """Drop the three columns (unpublishable rows go back to pending)."""
    op.execute("UPDATE workflow_steps SET status = 'pending' WHERE status = 'unpublishable'")
    with op.batch_alter_table("workflow_steps") as batch:
        batch.drop_column("publish_error")
        batch.drop_column("next_publish_at")
        batch.drop_column("publish_attempts")
