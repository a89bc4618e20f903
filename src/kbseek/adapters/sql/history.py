"""Document history: each change to a document leaves a numbered version of it (its Markdown and frontmatter, or
a tombstone for a deletion) with who made it and through what.

Versions are written by :class:`~kbseek.adapters.sql.repository.SqlRepository` inside the change's own
transaction (``record``), so a document and its history cannot disagree; retention is applied there too. Reading
them is :class:`HistoryStore`'s part.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import delete, func, insert, literal, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from kbseek.adapters.sql.tables import DocumentRow, DocumentVersionRow

SUMMARY_COLUMNS = [c.name for c in DocumentVersionRow.__table__.columns if c.name not in ("id", "content")]


@dataclasses.dataclass(frozen=True)
class Change:
    """What a write is, for the history: ``via`` names the operation (``ingest``, ``upload``, ``replace``,
    ``delete``, ``rollback``, ``sync``…), ``keep`` how many versions a path keeps (0: all), ``restored_from`` the
    version a rollback brings back, ``detail`` what else identifies the change (e.g. the commit a sync read)."""

    via: str
    keep: int = 0
    restored_from: int | None = None
    detail: str | None = None


def record(
    session: Session,
    *,
    path: str,
    document_id: str,
    action: str,
    change: Change,
    audit: dict[str, Any],
    values: dict[str, Any] | None,
    previous_id: str | None,
    now: Any,
) -> int:
    """Add the version a change made (``values``: the document's new row values; None for a deletion) and apply
    retention; returns its number. A document stored before its history began (``previous_id`` with no version)
    first gets its state before the change as a version of its own, so a change never loses what it replaced."""
    newest = session.scalar(select(func.max(DocumentVersionRow.version)).where(DocumentVersionRow.path == path))
    if newest is None and previous_id is not None:
        _baseline(session, previous_id, audit)
        newest = 1
    number = (newest or 0) + 1
    fields = {
        "path": path,
        "version": number,
        "action": action,
        "via": change.via,
        "document_id": document_id,
        "restored_from": change.restored_from,
        "detail": change.detail,
        "actor": audit.get("actor") or "local",
        "key_id": audit.get("key_id"),
        "request_id": audit.get("request_id") or "-",
        "created_at": now,
    }
    if values is not None:
        fields |= {
            "content": values["content"],
            "content_hash": values["content_hash"],
            "title": values["title"],
            "frontmatter": values["frontmatter"],
            "size_bytes": values["size_bytes"],
            "origin": values["origin"],
        }
    session.execute(insert(DocumentVersionRow).values(**fields))
    if 0 < change.keep < number:  # only a path with more versions than it keeps has any to drop
        session.execute(
            delete(DocumentVersionRow).where(
                DocumentVersionRow.path == path, DocumentVersionRow.version <= number - change.keep
            )
        )
    return number


def _baseline(session: Session, document_id: str, audit: dict[str, Any]) -> None:
    """Version 1 of a document that has none yet: its stored row as it stands (what migration 0007 does for a
    whole home, done here for a document that arrived without history, e.g. from an older backup)."""
    rows = select(
        DocumentRow.path,
        literal(1),
        literal("added"),
        literal("baseline"),
        DocumentRow.id,
        DocumentRow.content,
        DocumentRow.content_hash,
        DocumentRow.title,
        DocumentRow.frontmatter,
        DocumentRow.size_bytes,
        DocumentRow.origin,
        literal("baseline"),
        literal(audit.get("request_id") or "-"),
        DocumentRow.updated_at,
    ).where(DocumentRow.id == document_id)
    columns = ["path", "version", "action", "via", "document_id", "content", "content_hash", "title"]
    columns += ["frontmatter", "size_bytes", "origin", "actor", "request_id", "created_at"]
    session.execute(insert(DocumentVersionRow).from_select(columns, rows))


class HistoryStore:
    """Reads the versions of documents.

    >>> from kbseek.adapters.sql.engine import make_engine
    >>> from kbseek.adapters.sql.migrate import upgrade
    >>> engine = make_engine("sqlite://"); _ = upgrade(engine)
    >>> HistoryStore(engine).versions("api/x.md")
    []
    """

    def __init__(self, engine: Engine) -> None:
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def versions(self, path: str) -> list[dict[str, Any]]:
        """Every kept version of ``path``, oldest first, without their text."""
        columns = [getattr(DocumentVersionRow, c) for c in SUMMARY_COLUMNS]
        query = select(*columns).where(DocumentVersionRow.path == path).order_by(DocumentVersionRow.version)
        with self._sessions() as session:
            return [dict(row._mapping) for row in session.execute(query)]

    def version(self, path: str, number: int) -> dict[str, Any] | None:
        """One version with its text (``content`` None for a deletion); None when it is not kept."""
        query = select(DocumentVersionRow).where(DocumentVersionRow.path == path, DocumentVersionRow.version == number)
        with self._sessions() as session:
            row = session.scalar(query)
        if row is None:
            return None
        return {c: getattr(row, c) for c in [*SUMMARY_COLUMNS, "content"]}
