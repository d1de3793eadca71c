"""The front door: API tokens, orders placed over HTTP with their idempotency keys, the
operator audit log, and the indexes of the search filters

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06

Tables ``api_tokens``, ``api_orders`` and ``operator_actions`` (ADR 0039, 0040);
indexes on ``orders`` (customer, placement time) and ``workflow_steps`` (step and
state) for the search (ADR 0041).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the three tables and the search indexes."""
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
    )
    op.create_index("uq_api_tokens_name", "api_tokens", ["name"], unique=True)
    op.create_index("uq_api_tokens_token_hash", "api_tokens", ["token_hash"], unique=True)
    op.create_table(
        "api_orders",
        sa.Column("order_id", sa.Integer(), nullable=False),
        sa.Column("placed_by", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response_body", sa.Text(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["order_id"], ["orders.id"], name=op.f("fk_api_orders_order_id_orders")
        ),
        sa.PrimaryKeyConstraint("order_id", name=op.f("pk_api_orders")),
    )
    op.create_index(
        "uq_api_orders_placed_by_idempotency_key",
        "api_orders",
        ["placed_by", "idempotency_key"],
        unique=True,
    )
    op.create_index("ix_api_orders_created_at", "api_orders", ["created_at"])
    op.create_table(
        "operator_actions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("source", sa.String(length=10), nullable=False),
        sa.Column("action", sa.String(length=30), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("result", sa.Text(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operator_actions")),
    )
    op.create_index("ix_operator_actions_at", "operator_actions", ["at"])
    op.create_index("ix_orders_customer_id", "orders", ["customer_id"])
    op.create_index("ix_orders_placed_at", "orders", ["placed_at"])
    op.create_index("ix_workflow_steps_step_status", "workflow_steps", ["step", "status"])


def downgrade() -> None:
    """Drop the search indexes and the three tables."""
    op.drop_index("ix_workflow_steps_step_status", table_name="workflow_steps")
    op.drop_index("ix_orders_placed_at", table_name="orders")
    op.drop_index("ix_orders_customer_id", table_name="orders")
    op.drop_index("ix_operator_actions_at", table_name="operator_actions")
    op.drop_table("operator_actions")
    op.drop_index("ix_api_orders_created_at", table_name="api_orders")
    op.drop_index("uq_api_orders_placed_by_idempotency_key", table_name="api_orders")
    op.drop_table("api_orders")
    op.drop_index("uq_api_tokens_token_hash", table_name="api_tokens")
    op.drop_index("uq_api_tokens_name", table_name="api_tokens")
    op.drop_table("api_tokens")
