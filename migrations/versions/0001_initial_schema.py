"""Initial schema: workflow tables and order-domain tables

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "customers",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("nation_key", sa.Integer(), nullable=False),
        sa.Column("market_segment", sa.String(length=20), nullable=False),
        sa.Column("account_balance", sa.Numeric(precision=12, scale=2), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_customers")),
    )
    op.create_table(
        "products",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=60), nullable=False),
        sa.Column("brand", sa.String(length=20), nullable=False),
        sa.Column("type", sa.String(length=30), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("container", sa.String(length=20), nullable=False),
        sa.Column("retail_price", sa.Numeric(precision=12, scale=2), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_products")),
    )
    op.create_table(
        "stream_cursors",
        sa.Column("name", sa.String(length=20), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("scale", sa.String(length=20), nullable=False),
        sa.Column("loaded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_stream_cursors")),
    )
    op.create_table(
        "tpch_orders",
        sa.Column("order_key", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("customer_id", sa.Integer(), nullable=False),
        sa.Column("total_price", sa.Numeric(precision=15, scale=2), nullable=False),
        sa.Column("order_date", sa.Date(), nullable=False),
        sa.Column("priority", sa.String(length=15), nullable=False),
        sa.PrimaryKeyConstraint("order_key", name=op.f("pk_tpch_orders")),
    )
    op.create_index("uq_tpch_orders_seq", "tpch_orders", ["seq"], unique=True)
    op.create_table(
        "workflows",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=50), nullable=False),
        sa.Column("subject_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("blocked_step", sa.String(length=50), nullable=True),
        sa.Column("blocked_reason", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflows")),
    )
    op.create_index("ix_workflows_status", "workflows", ["status"], unique=False)
    op.create_index(
        "uq_workflows_kind_subject_id", "workflows", ["kind", "subject_id"], unique=True
    )
    op.create_table(
        "inventory",
        sa.Column("part_id", sa.Integer(), nullable=False),
        sa.Column("on_hand", sa.Integer(), nullable=False),
        sa.Column("initial_on_hand", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["part_id"], ["products.id"], name=op.f("fk_inventory_part_id_products")
        ),
        sa.PrimaryKeyConstraint("part_id", name=op.f("pk_inventory")),
    )
    op.create_table(
        "orders",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("customer_id", sa.Integer(), nullable=False),
        sa.Column("total_price", sa.Numeric(precision=15, scale=2), nullable=False),
        sa.Column("order_date", sa.Date(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("source", sa.String(length=10), nullable=False),
        sa.Column("source_key", sa.Integer(), nullable=True),
        sa.Column("placed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["customer_id"], ["customers.id"], name=op.f("fk_orders_customer_id_customers")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_orders")),
    )
    op.create_index("ix_orders_status", "orders", ["status"], unique=False)
    op.create_table(
        "tpch_lineitems",
        sa.Column("order_key", sa.Integer(), nullable=False),
        sa.Column("line_number", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("part_id", sa.Integer(), nullable=False),
        sa.Column("supplier_key", sa.Integer(), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("extended_price", sa.Numeric(precision=15, scale=2), nullable=False),
        sa.Column("discount", sa.Numeric(precision=4, scale=2), nullable=False),
        sa.Column("ship_date", sa.Date(), nullable=False),
        sa.Column("ship_mode", sa.String(length=10), nullable=False),
        sa.ForeignKeyConstraint(
            ["order_key"],
            ["tpch_orders.order_key"],
            name=op.f("fk_tpch_lineitems_order_key_tpch_orders"),
        ),
        sa.PrimaryKeyConstraint("order_key", "line_number", name=op.f("pk_tpch_lineitems")),
    )
    op.create_table(
        "workflow_steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workflow_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.String(length=50), nullable=False),
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column("task", sa.String(length=100), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("outcome", sa.String(length=50), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["workflow_id"], ["workflows.id"], name=op.f("fk_workflow_steps_workflow_id_workflows")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflow_steps")),
    )
    op.create_index("ix_workflow_steps_status", "workflow_steps", ["status"], unique=False)
    op.create_index(
        "uq_workflow_steps_workflow_id_step", "workflow_steps", ["workflow_id", "step"], unique=True
    )
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("order_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("customer_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["customer_id"], ["customers.id"], name=op.f("fk_notifications_customer_id_customers")
        ),
        sa.ForeignKeyConstraint(
            ["order_id"], ["orders.id"], name=op.f("fk_notifications_order_id_orders")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
    )
    op.create_index(
        "uq_notifications_order_id_kind", "notifications", ["order_id", "kind"], unique=True
    )
    op.create_table(
        "order_lines",
        sa.Column("order_id", sa.Integer(), nullable=False),
        sa.Column("line_number", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("part_id", sa.Integer(), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("extended_price", sa.Numeric(precision=15, scale=2), nullable=False),
        sa.Column("discount", sa.Numeric(precision=4, scale=2), nullable=False),
        sa.Column("ship_mode", sa.String(length=10), nullable=False),
        sa.ForeignKeyConstraint(
            ["order_id"], ["orders.id"], name=op.f("fk_order_lines_order_id_orders")
        ),
        sa.ForeignKeyConstraint(
            ["part_id"], ["products.id"], name=op.f("fk_order_lines_part_id_products")
        ),
        sa.PrimaryKeyConstraint("order_id", "line_number", name=op.f("pk_order_lines")),
    )
    op.create_table(
        "points_ledger",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("order_id", sa.Integer(), nullable=False),
        sa.Column("customer_id", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(length=40), nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["customer_id"], ["customers.id"], name=op.f("fk_points_ledger_customer_id_customers")
        ),
        sa.ForeignKeyConstraint(
            ["order_id"], ["orders.id"], name=op.f("fk_points_ledger_order_id_orders")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_points_ledger")),
    )
    op.create_index(
        "uq_points_ledger_order_id_reason", "points_ledger", ["order_id", "reason"], unique=True
    )
    op.create_table(
        "shipments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("order_id", sa.Integer(), nullable=False),
        sa.Column("ship_mode", sa.String(length=10), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["order_id"], ["orders.id"], name=op.f("fk_shipments_order_id_orders")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shipments")),
    )
    op.create_index("uq_shipments_order_id", "shipments", ["order_id"], unique=True)
    op.create_table(
        "stock_deductions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("order_id", sa.Integer(), nullable=False),
        sa.Column("part_id", sa.Integer(), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["order_id"], ["orders.id"], name=op.f("fk_stock_deductions_order_id_orders")
        ),
        sa.ForeignKeyConstraint(
            ["part_id"], ["products.id"], name=op.f("fk_stock_deductions_part_id_products")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stock_deductions")),
    )
    op.create_index(
        "uq_stock_deductions_order_id_part_id",
        "stock_deductions",
        ["order_id", "part_id"],
        unique=True,
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("uq_stock_deductions_order_id_part_id", table_name="stock_deductions")
    op.drop_table("stock_deductions")
    op.drop_index("uq_shipments_order_id", table_name="shipments")
    op.drop_table("shipments")
    op.drop_index("uq_points_ledger_order_id_reason", table_name="points_ledger")
    op.drop_table("points_ledger")
    op.drop_table("order_lines")
    op.drop_index("uq_notifications_order_id_kind", table_name="notifications")
    op.drop_table("notifications")
    op.drop_index("uq_workflow_steps_workflow_id_step", table_name="workflow_steps")
    op.drop_index("ix_workflow_steps_status", table_name="workflow_steps")
    op.drop_table("workflow_steps")
    op.drop_table("tpch_lineitems")
    op.drop_index("ix_orders_status", table_name="orders")
    op.drop_table("orders")
    op.drop_table("inventory")
    op.drop_index("uq_workflows_kind_subject_id", table_name="workflows")
    op.drop_index("ix_workflows_status", table_name="workflows")
    op.drop_table("workflows")
    op.drop_index("uq_tpch_orders_seq", table_name="tpch_orders")
    op.drop_table("tpch_orders")
    op.drop_table("stream_cursors")
    op.drop_table("products")
    op.drop_table("customers")
