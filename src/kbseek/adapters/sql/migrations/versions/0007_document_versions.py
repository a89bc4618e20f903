"""document_versions: every change to a document keeps its state; existing documents become their version 1

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "document_versions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("path", sa.String(512), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("via", sa.String(32), nullable=False),
        sa.Column("document_id", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("content_hash", sa.String(64), nullable=True),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("frontmatter", sa.JSON(), nullable=True),
        sa.Column("size_bytes", sa.Integer(), nullable=True),
        sa.Column("origin", sa.Text(), nullable=True),
        sa.Column("restored_from", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("path", "version", name="uq_document_versions_path_version"),
    )
    # A home made before history had none: each document's current state is where its history starts, dated
    # by its last change and attributed to the migration (who made it was never recorded).
    op.execute(
        "INSERT INTO document_versions (path, version, action, via, document_id, content, content_hash, title,"
        " frontmatter, size_bytes, origin, actor, request_id, created_at)"
        " SELECT path, 1, 'added', 'migration', id, content, content_hash, title, frontmatter, size_bytes, origin,"
        " 'migration', 'migration', updated_at FROM documents"
    )


def downgrade() -> None:
    op.drop_table("document_versions")
