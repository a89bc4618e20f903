"""tool_invocations: one row per lookup_knowledge call

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_invocations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tool_name", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=True),
        sa.Column("call", sa.Integer(), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("policy", sa.String(32), nullable=False),
        sa.Column("retrieval_layer", sa.String(32), nullable=False),
        sa.Column("l0_match_count", sa.Integer(), nullable=False),
        sa.Column("l1_match_count", sa.Integer(), nullable=False),
        sa.Column("retrieval_details", sa.JSON(), nullable=False),
        sa.Column("relevance_level", sa.String(32), nullable=False),
        sa.Column("dedup_reason", sa.Text(), nullable=True),
        sa.Column("output_preview", sa.Text(), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("timings", sa.JSON(), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_tool_invocations_session_id", "tool_invocations", ["session_id"])
    op.create_index("ix_tool_invocations_created_at", "tool_invocations", ["created_at"])


def downgrade() -> None:
    op.drop_table("tool_invocations")
