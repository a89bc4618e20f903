"""chunk_tokens: analysed tokens cached per chunk, tagged with the analyser version

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chunk_tokens",
        sa.Column("chunk_id", sa.String(16), sa.ForeignKey("chunks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("analyzer_version", sa.String(64), nullable=False),
        sa.Column("tokens", sa.Text(), nullable=False),
    )
    op.create_index("ix_chunk_tokens_analyzer_version", "chunk_tokens", ["analyzer_version"])


def downgrade() -> None:
    op.drop_index("ix_chunk_tokens_analyzer_version", table_name="chunk_tokens")
    op.drop_table("chunk_tokens")
