"""lookup sessions and the evidence each was given (session dedup)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lookup_sessions",
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "session_evidence",
        sa.Column("session_id", sa.String(128), sa.ForeignKey("lookup_sessions.session_id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("key", sa.String(400), primary_key=True),
        sa.Column("document_id", sa.String(16), nullable=False),
        sa.Column("anchor", sa.String(300), nullable=True),
        sa.Column("call", sa.Integer(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("given_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("session_evidence")
    op.drop_table("lookup_sessions")
