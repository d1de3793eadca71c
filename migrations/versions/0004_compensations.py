"""Compensations: stock returns, and the step a compensating step row undoes

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

A cancelled order's stock comes back through ``stock_returns`` (unique per
order and part); its points are reversed by an ordinary ``points_ledger`` entry
(reason ``order_cancelled``), so the ledger needs no change.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create stock_returns; add workflow_steps.compensates."""
    op.create_table(
        "stock_returns",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("order_id", sa.Integer(), nullable=False),
        sa.Column("part_id", sa.Integer(), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["order_id"], ["orders.id"], name=op.f("fk_stock_returns_order_id_orders")
        ),
        sa.ForeignKeyConstraint(
            ["part_id"], ["products.id"], name=op.f("fk_stock_returns_part_id_products")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stock_returns")),
    )
    op.create_index(
        "uq_stock_returns_order_id_part_id",
        "stock_returns",
        ["order_id", "part_id"],
        unique=True,
    )
    with op.batch_alter_table("workflow_steps") as batch_op:
        batch_op.add_column(sa.Column("compensates", sa.String(length=50), nullable=True))


def downgrade() -> None:
    """Drop workflow_steps.compensates and stock_returns."""
    with op.batch_alter_table("workflow_steps") as batch_op:
        batch_op.drop_column("compensates")
    op.drop_index("uq_stock_returns_order_id_part_id", table_name="stock_returns")
    op.drop_table("stock_returns")
