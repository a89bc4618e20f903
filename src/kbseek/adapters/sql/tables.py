"""SQLAlchemy 2 models: the system of record. Migrations in ``migrations/`` must match them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    pass


class DocumentRow(Base):
    __tablename__ = "documents"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    path: Mapped[str] = mapped_column(String(512), unique=True)
    category: Mapped[str] = mapped_column(String(200), index=True)
    file_name: Mapped[str] = mapped_column(String(255))
    title: Mapped[str] = mapped_column(Text)
    summary: Mapped[str] = mapped_column(Text)
    keywords: Mapped[list[str]] = mapped_column(JSON)
    frontmatter: Mapped[dict[str, Any]] = mapped_column(JSON)
    title_source: Mapped[str] = mapped_column(String(16))
    summary_source: Mapped[str] = mapped_column(String(16))
    warnings: Mapped[list[str]] = mapped_column(JSON)
    outline: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    content: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(Integer)
    chunk_count: Mapped[int] = mapped_column(Integer)
    origin: Mapped[str | None] = mapped_column(Text, nullable=True, index=False)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class ChunkRow(Base):
    __tablename__ = "chunks"
    __table_args__ = (UniqueConstraint("document_id", "chunk_index", name="uq_chunks_position"),)

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    document_id: Mapped[str] = mapped_column(String(16), ForeignKey("documents.id", ondelete="CASCADE"), index=True)
    chunk_index: Mapped[int] = mapped_column(Integer)
    total_chunks: Mapped[int] = mapped_column(Integer)
    breadcrumb: Mapped[str] = mapped_column(Text)
    headings: Mapped[list[list[Any]]] = mapped_column(JSON)
    heading_h1: Mapped[str | None] = mapped_column(Text, nullable=True)
    heading_h2: Mapped[str | None] = mapped_column(Text, nullable=True)
    heading_h3: Mapped[str | None] = mapped_column(Text, nullable=True)
    heading_h4: Mapped[str | None] = mapped_column(Text, nullable=True)
    heading_h5: Mapped[str | None] = mapped_column(Text, nullable=True)
    heading_h6: Mapped[str | None] = mapped_column(Text, nullable=True)
    anchor: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    char_start: Mapped[int] = mapped_column(Integer)
    char_end: Mapped[int] = mapped_column(Integer)
    line_start: Mapped[int] = mapped_column(Integer)
    line_end: Mapped[int] = mapped_column(Integer)
    overlap: Mapped[int] = mapped_column(Integer)


class ChunkTokensRow(Base):
    """The lexical index's analysed tokens of a chunk, valid while ``analyzer_version`` is current."""

    __tablename__ = "chunk_tokens"

    chunk_id: Mapped[str] = mapped_column(String(16), ForeignKey("chunks.id", ondelete="CASCADE"), primary_key=True)
    analyzer_version: Mapped[str] = mapped_column(String(64), index=True)
    tokens: Mapped[str] = mapped_column(Text)  # joined by TOKEN_SEPARATOR


class StateRow(Base):
    """Counters every process can read, e.g. ``version``: bumped by every change to documents."""

    __tablename__ = "kb_state"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer)


class EmbeddingRow(Base):
    """A cached vector: the same input text under the same model is never embedded twice."""

    __tablename__ = "embeddings"

    model_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    text_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    dim: Mapped[int] = mapped_column(Integer)
    vector: Mapped[bytes] = mapped_column(LargeBinary)  # float32, little-endian


class MetaRow(Base):
    """Text facts about the knowledge base, e.g. the embedding model its vectors came from."""

    __tablename__ = "kb_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class LookupSessionRow(Base):
    """An agent session's call counter (dedup is per session, never global)."""

    __tablename__ = "lookup_sessions"

    session_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    calls: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SessionEvidenceRow(Base):
    """Evidence a session was given, kept in the database so dedup survives restarts and spans processes."""

    __tablename__ = "session_evidence"

    session_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("lookup_sessions.session_id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(400), primary_key=True)  # document id, or document id#anchor
    document_id: Mapped[str] = mapped_column(String(16))
    anchor: Mapped[str | None] = mapped_column(String(300), nullable=True)
    call: Mapped[int] = mapped_column(Integer)
    query: Mapped[str] = mapped_column(Text)
    given_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ToolInvocationRow(Base):
    """One ``lookup_knowledge`` call, successful or not: the ``tool_invocation`` record."""

    __tablename__ = "tool_invocations"
    __table_args__ = (Index("ix_tool_invocations_level_id", "relevance_level", "id"),)  # newest N of a level

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tool_name: Mapped[str] = mapped_column(String(64))
    session_id: Mapped[str | None] = mapped_column(String(128), index=True, nullable=True)
    call: Mapped[int | None] = mapped_column(Integer, nullable=True)
    request_id: Mapped[str] = mapped_column(String(64), index=True)  # feedback names its call by it
    query: Mapped[str] = mapped_column(Text)
    policy: Mapped[str] = mapped_column(String(32))
    retrieval_layer: Mapped[str] = mapped_column(String(32))
    l0_match_count: Mapped[int] = mapped_column(Integer)
    l1_match_count: Mapped[int] = mapped_column(Integer)
    retrieval_details: Mapped[dict[str, Any]] = mapped_column(JSON)
    relevance_level: Mapped[str] = mapped_column(String(32))
    dedup_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    output_preview: Mapped[str] = mapped_column(Text)
    duration_ms: Mapped[float] = mapped_column(Float)
    timings: Mapped[dict[str, Any]] = mapped_column(JSON)
    success: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class WriteAuditRow(Base):
    """One change to the knowledge base (or a refused one): who, when, which path, which content."""

    __tablename__ = "write_audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    action: Mapped[str] = mapped_column(String(16))  # added | updated | deleted | rejected
    path: Mapped[str] = mapped_column(String(1024), index=True)
    actor: Mapped[str] = mapped_column(String(128))
    key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    request_id: Mapped[str] = mapped_column(String(64))
    old_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    new_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    size_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    duration_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)


class DocumentVersionRow(Base):
    """One state of the document at ``path``: its stored Markdown after a change (none after a deletion), who
    made the change and through what. Numbered from 1 per path, the newest being the current document."""

    __tablename__ = "document_versions"
    __table_args__ = (UniqueConstraint("path", "version", name="uq_document_versions_path_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    path: Mapped[str] = mapped_column(String(512))
    version: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(16))  # added | updated | deleted | restored
    via: Mapped[str] = mapped_column(String(32))  # ingest | upload | replace | delete | rollback | sync | migration…
    document_id: Mapped[str] = mapped_column(String(16))
    content: Mapped[str | None] = mapped_column(Text, nullable=True)  # None: the document was deleted
    content_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    title: Mapped[str | None] = mapped_column(Text, nullable=True)
    frontmatter: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    size_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    origin: Mapped[str | None] = mapped_column(Text, nullable=True)
    restored_from: Mapped[int | None] = mapped_column(Integer, nullable=True)  # a rollback's source version
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)  # e.g. the commit and blob a sync read
    actor: Mapped[str] = mapped_column(String(128))
    key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    request_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class EvidenceFeedbackRow(Base):
    """What a reader (agent, verifier, person) said of one ``lookup_knowledge`` call's evidence: it helped, was
    wrong or outdated, or the answer missed something. Tied to the call by its request id; the call's query and
    session are copied so the report outlives the invocation's retention."""

    __tablename__ = "evidence_feedback"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), index=True)
    session_id: Mapped[str | None] = mapped_column(String(128), index=True, nullable=True)
    verdict: Mapped[str] = mapped_column(String(16))  # helped | wrong | outdated | missed
    chunk_ids: Mapped[list[str]] = mapped_column(JSON)
    evidence: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # path and heading path of each chunk (or document)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    query: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))
    key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
