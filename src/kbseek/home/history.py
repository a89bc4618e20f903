"""A document's history as the edges show it: its versions, one version's text, the diff of two, and a rollback.

The versions are written by the write path itself (``SqlRepository.save``/``delete``, in each change's own
transaction); a rollback goes through the same path (``DocumentWriter.rollback``), so it is a new version and the
indexes and vectors follow it as they follow any other write. Reads work for a deleted document too: its history
stays, ending in the deletion.
"""

from __future__ import annotations

import datetime as dt
import difflib
from typing import Any

from kbseek.adapters.sql.history import HistoryStore
from kbseek.errors import InvalidRequest, NotFoundError
from kbseek.home.writer import DocumentWriter, no_version


class DocumentHistory:
    """Versions of the documents of one data home, in plain JSON-ready dicts."""

    def __init__(self, writer: DocumentWriter) -> None:
        self.store = HistoryStore(writer.repository.engine)
        self.writer = writer

    def versions(self, path: str) -> dict[str, Any]:
        """Every kept version of ``path``, oldest first; ``NotFoundError`` when the path never had a document."""
        versions = [_shown(v) for v in self.store.versions(path)]
        exists = self.writer.repository.get(path) is not None
        if not versions and not exists:
            raise NotFoundError(f"no document and no history at path {path!r}", hint="see 'kbseek docs list'")
        return {
            "path": path,
            "current": versions[-1]["version"] if exists and versions else None,
            "deleted": not exists,
            "versions": versions,
        }

    def version(self, path: str, number: int, name: str | None = None) -> dict[str, Any]:
        """One version with its stored Markdown (``content`` None for the deletion)."""
        _positive("version" if name is None else name, number)
        found = self.store.version(path, number)
        if found is None:
            raise self._missing(path, number)
        return _shown(found)

    def diff(self, path: str, a: int, b: int) -> dict[str, Any]:
        """The unified diff of the stored Markdown of versions ``a`` and ``b`` (a deletion reads as no text)."""
        old, new = self.version(path, a, "a"), self.version(path, b, "b")
        lines = difflib.unified_diff(
            (old["content"] or "").splitlines(),
            (new["content"] or "").splitlines(),
            fromfile=f"{path}@{a}",
            tofile=f"{path}@{b}",
            lineterm="",
        )
        text = "\n".join(lines)
        return {"path": path, "a": a, "b": b, "changed": bool(text), "diff": f"{text}\n" if text else ""}

    def rollback(self, path: str, to: int) -> dict[str, Any]:
        """Version ``to`` brought back as the newest version (nothing new when it is the current text already)."""
        _positive("to", to)
        report = self.writer.rollback(path, to, self.store.version)
        versions = self.store.versions(path)
        newest = versions[-1]["version"] if versions else None
        return report.to_dict() | {"restored_from": to, "version": newest}

    def _missing(self, path: str, number: int) -> NotFoundError:
        if not self.store.versions(path) and self.writer.repository.get(path) is None:
            return NotFoundError(f"no document and no history at path {path!r}", hint="see 'kbseek docs list'")
        return no_version(path, number)


MAX_VERSION = 2**31 - 1  # the column is a 32-bit integer on PostgreSQL and no document gets near it


def _positive(name: str, number: int) -> None:
    if not 1 <= number <= MAX_VERSION:
        raise InvalidRequest(
            f"{name}: versions are numbered from 1 to {MAX_VERSION}, not {number}", hint="see 'kbseek docs history'"
        )


def _shown(version: dict[str, Any]) -> dict[str, Any]:
    created = version["created_at"]
    if isinstance(created, dt.datetime):
        if created.tzinfo is None:  # SQLite gives back naive datetimes; they were written in UTC
            created = created.replace(tzinfo=dt.UTC)
        created = created.isoformat()
    return version | {"created_at": created}
