"""evidence_feedback: what readers said of a lookup's evidence; tool_invocations looked up by request id

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "evidence_feedback",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=True),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("chunk_ids", sa.JSON(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_evidence_feedback_request_id", "evidence_feedback", ["request_id"])
    op.create_index("ix_evidence_feedback_session_id", "evidence_feedback", ["session_id"])
    op.create_index("ix_evidence_feedback_created_at", "evidence_feedback", ["created_at"])
    op.create_index("ix_tool_invocations_request_id", "tool_invocations", ["request_id"])


def downgrade() -> None:
    op.drop_index("ix_tool_invocations_request_id", table_name="tool_invocations")
    op.drop_table("evidence_feedback")
