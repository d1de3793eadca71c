"""The W3C trace context of a workflow, on each of its step rows

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

``workflow_steps.traceparent`` / ``tracestate`` are written with the row in its
writer's transaction (placement, a release, a cancellation's compensations) and
copied into the job record when the relay publishes the row (docs/adr/0036).
Both are nullable: rows written before, or with tracing off and no caller's
context, have none.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add workflow_steps.traceparent and workflow_steps.tracestate."""
    with op.batch_alter_table("workflow_steps") as batch_op:
        batch_op.add_column(sa.Column("traceparent", sa.String(length=55), nullable=True))
        batch_op.add_column(sa.Column("tracestate", sa.String(length=512), nullable=True))


def downgrade() -> None:
    """Drop workflow_steps.tracestate and workflow_steps.traceparent."""
    with op.batch_alter_table("workflow_steps") as batch_op:
        batch_op.drop_column("tracestate")
        batch_op.drop_column("traceparent")
