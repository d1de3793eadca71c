"""Flow control: a step's queue priority and fairness key, and an order's priority

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06

A step row carries the priority and fairness key of its queue message, written with
the row so every publish of it (a re-publish by the sweep, a compensation copied from
it) keeps them (docs/adr/0033). ``orders.priority`` is the order's TPC-H priority
(``1-URGENT`` .. ``5-LOW``), from which its steps' priority is mapped.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add workflow_steps.priority and .fairness_key, and orders.priority."""
    with op.batch_alter_table("workflow_steps") as batch_op:
        batch_op.add_column(sa.Column("priority", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("fairness_key", sa.String(length=128), nullable=True))
    with op.batch_alter_table("orders") as batch_op:
        batch_op.add_column(sa.Column("priority", sa.String(length=15), nullable=True))


def downgrade() -> None:
    """Drop them again."""
    with op.batch_alter_table("orders") as batch_op:
        batch_op.drop_column("priority")
    with op.batch_alter_table("workflow_steps") as batch_op:
        batch_op.drop_column("fairness_key")
        batch_op.drop_column("priority")
