"""write_audit: every change to the knowledge base; an index for listing invocations by level

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "write_audit",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("old_hash", sa.String(64), nullable=True),
        sa.Column("new_hash", sa.String(64), nullable=True),
        sa.Column("size_bytes", sa.Integer(), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
    )
    op.create_index("ix_write_audit_created_at", "write_audit", ["created_at"])
    op.create_index("ix_write_audit_path", "write_audit", ["path"])
    op.create_index("ix_tool_invocations_level_id", "tool_invocations", ["relevance_level", "id"])


def downgrade() -> None:
    op.drop_index("ix_tool_invocations_level_id", "tool_invocations")
    op.drop_table("write_audit")
