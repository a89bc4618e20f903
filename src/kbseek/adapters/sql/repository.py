"""The SQL repository: documents and chunks in one database, each change in one transaction."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import logging
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, defer, sessionmaker

from kbseek.adapters.sql import history
from kbseek.adapters.sql.history import Change
from kbseek.adapters.sql.rows import chunk_values, document_values, stored_document
from kbseek.adapters.sql.tables import (
    ChunkRow,
    ChunkTokensRow,
    DocumentRow,
    EmbeddingRow,
    MetaRow,
    StateRow,
    WriteAuditRow,
    utcnow,
)
from kbseek.core.models import ParsedDocument, StoredDocument
from kbseek.errors import StorageError

log = logging.getLogger("kbseek")
VERSION_KEY = "version"
TOKEN_SEPARATOR = "\x1f"


class SqlRepository:
    """Documents and chunks over SQLAlchemy; works on SQLite and PostgreSQL alike.

    >>> from kbseek.adapters.sql.engine import make_engine
    >>> from kbseek.adapters.sql.migrate import upgrade
    >>> engine = make_engine("sqlite://"); _ = upgrade(engine)
    >>> SqlRepository(engine).count()
    0
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        # every lookup reads the counter: compiled once to the dialect's SQL (the key is a constant), it skips the
        # ORM session and the statement cache (SQLite: 145 -> 28 us a read)
        read = select(StateRow.value).where(StateRow.key == VERSION_KEY)
        self._version_sql = str(read.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))

    def _session(self) -> Session:
        return self._sessions()

    @contextlib.contextmanager
    def _write(self, path: str | None = None) -> Iterator[Session]:
        """A write transaction whose first read already sees the latest commit: of the document at ``path``,
        or (``path`` None) of the token cache.

        PostgreSQL (read committed): transaction-scoped advisory locks. A document write holds its path, so
        writes of one path from any process take turns and each one's reads see the previous one's rows (a row
        lock alone cannot hold a path that has no row yet, and lets a delete miss the chunks of an update
        committed meanwhile). It also holds the token cache shared, and a token-cache write holds it alone:
        deleting chunks deletes their cached tokens, and a cache write that locked tokens first and chunks
        second would deadlock with it. SQLite: the database's write lock taken at ``BEGIN IMMEDIATE`` instead
        of at the first change, so the read that decides insert-or-update is not from before another commit.
        """
        with self._session() as session, session.begin():
            connection = session.connection()
            if connection.dialect.name == "postgresql":
                if path is None:
                    session.execute(select(func.pg_advisory_xact_lock(TOKEN_CACHE_KEY)))
                else:
                    session.execute(select(func.pg_advisory_xact_lock_shared(TOKEN_CACHE_KEY)))
                    session.execute(select(func.pg_advisory_xact_lock(_lock_key(path))))
            elif connection.dialect.name == "sqlite" and not _in_transaction(connection):
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            yield session

    # -- reads ---------------------------------------------------------------------------

    def count(self) -> int:
        with self._session() as session:
            return session.scalar(select(func.count()).select_from(DocumentRow)) or 0

    def chunk_count(self) -> int:
        with self._session() as session:
            return session.scalar(select(func.count()).select_from(ChunkRow)) or 0

    def version(self) -> int:
        """The change counter: bumped by every add, update and delete."""
        with self.engine.connect() as connection:  # its own transaction: it sees every commit before it
            return connection.exec_driver_sql(self._version_sql).scalar() or 0

    def hashes(self) -> dict[str, tuple[str, str | None]]:
        """``{path: (content_hash, origin)}`` for every document, in one query."""
        with self._session() as session:
            rows = session.execute(select(DocumentRow.path, DocumentRow.content_hash, DocumentRow.origin))
            return {path: (digest, origin) for path, digest, origin in rows}

    def get(self, path: str, *, with_chunks: bool = False) -> StoredDocument | None:
        with self._session() as session:
            row = session.scalar(
                select(DocumentRow).options(defer(DocumentRow.content)).where(DocumentRow.path == path)
            )
            if row is None:
                row = session.get(DocumentRow, path, options=[defer(DocumentRow.content)])  # or an id
            if row is None:
                return None
            chunks: builtins.list[ChunkRow] = []
            if with_chunks:
                chunks = list(
                    session.scalars(
                        select(ChunkRow).where(ChunkRow.document_id == row.id).order_by(ChunkRow.chunk_index)
                    )
                )
            return stored_document(row, chunks)

    def content(self, path: str) -> str | None:
        with self._session() as session:
            return session.scalar(select(DocumentRow.content).where(DocumentRow.path == path))

    def list(
        self, *, category: str | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[StoredDocument]:
        query = select(DocumentRow).options(defer(DocumentRow.content)).order_by(DocumentRow.path).offset(offset)
        if category:
            query = query.where(DocumentRow.category == category)
        if limit is not None:
            query = query.limit(limit)
        with self._session() as session:
            return [stored_document(row, []) for row in session.scalars(query)]

    def keywords(self) -> dict[str, tuple[str, ...]]:
        with self._session() as session:
            rows = session.execute(select(DocumentRow.path, DocumentRow.keywords))
            return {path: tuple(keywords or ()) for path, keywords in rows}

    def states(self) -> dict[str, str]:
        """``{document id: content hash}``: what the in-memory indexes compare against."""
        with self._session() as session:
            rows = session.execute(select(DocumentRow.id, DocumentRow.content_hash))
            return {doc_id: digest for doc_id, digest in rows}

    def load(self, document_ids: builtins.list[str] | None = None) -> builtins.list[StoredDocument]:
        """Documents with their chunks in two queries (all of them when ``document_ids`` is None)."""
        with self._session() as session:
            docs = select(DocumentRow).options(defer(DocumentRow.content))
            chunks = select(ChunkRow).order_by(ChunkRow.document_id, ChunkRow.chunk_index)
            if document_ids is not None:
                docs = docs.where(DocumentRow.id.in_(document_ids))
                chunks = chunks.where(ChunkRow.document_id.in_(document_ids))
            rows = list(session.scalars(docs))
            by_doc: dict[str, builtins.list[ChunkRow]] = {}
            for chunk in session.scalars(chunks):
                by_doc.setdefault(chunk.document_id, []).append(chunk)
            return [stored_document(row, by_doc.get(row.id, [])) for row in rows]

    def tokens(self, document_ids: builtins.list[str] | None = None) -> dict[str, tuple[str, builtins.list[str]]]:
        """Cached analysed tokens: ``{chunk id: (analyser version, tokens)}``."""
        query = select(ChunkTokensRow.chunk_id, ChunkTokensRow.analyzer_version, ChunkTokensRow.tokens)
        result: dict[str, tuple[str, builtins.list[str]]] = {}
        with self._session() as session:
            for batch in _batches(document_ids) if document_ids is not None else [None]:
                chosen = query
                if batch is not None:
                    chosen = query.join(ChunkRow, ChunkRow.id == ChunkTokensRow.chunk_id).where(
                        ChunkRow.document_id.in_(batch)
                    )
                for cid, version, text in session.execute(chosen):
                    # interned: a start-up holds every chunk's tokens at once, and a word repeats in thousands
                    result[cid] = (version, list(map(sys.intern, text.split(TOKEN_SEPARATOR))) if text else [])
        return result

    def save_tokens(self, rows: builtins.list[tuple[str, str, builtins.list[str]]]) -> None:
        """Upsert ``(chunk id, analyser version, tokens)``; a chunk deleted meanwhile is skipped."""
        if not rows:
            return
        try:
            with self._write() as session:  # no document write runs meanwhile (see _write)
                live: set[str] = set()
                for batch in _batches([r[0] for r in rows]):
                    live.update(session.scalars(select(ChunkRow.id).where(ChunkRow.id.in_(batch))))
                    session.execute(delete(ChunkTokensRow).where(ChunkTokensRow.chunk_id.in_(batch)))
                values = [
                    {"chunk_id": cid, "analyzer_version": version, "tokens": TOKEN_SEPARATOR.join(tokens)}
                    for cid, version, tokens in rows
                    if cid in live
                ]
                if values:
                    session.execute(insert(ChunkTokensRow), values)
        except SQLAlchemyError as exc:  # a cache: losing a write costs re-analysis, nothing else
            log.warning("token cache not written: %s", _reason(exc))

    def retag_tokens(self, old_version: str, new_version: str) -> None:
        """Mark tokens still valid under a new analyser version (the dictionary change missed them)."""
        with self._write() as session:
            session.execute(
                update(ChunkTokensRow)
                .where(ChunkTokensRow.analyzer_version == old_version)
                .values(analyzer_version=new_version)
            )

    def vectors(self, model_id: str, hashes: builtins.list[str], fallback: tuple[str, ...] = ()) -> dict[str, bytes]:
        """Cached vectors (float32 bytes) of ``model_id`` by input-text hash, else of the first ``fallback`` id that
        has the hash: one query per batch whatever the number of ids."""
        ids = list(dict.fromkeys((model_id, *fallback)))  # an id listed twice keeps its first place
        rank = {m: i for i, m in enumerate(ids)}
        found: dict[str, tuple[int, bytes]] = {}
        with self._session() as session:
            for batch in _batches(sorted(set(hashes))):
                rows = session.execute(
                    select(EmbeddingRow.model_id, EmbeddingRow.text_hash, EmbeddingRow.vector).where(
                        EmbeddingRow.model_id.in_(ids), EmbeddingRow.text_hash.in_(batch)
                    )
                )
                for owner, digest, vector in rows:
                    if digest not in found or rank[owner] < found[digest][0]:
                        found[digest] = (rank[owner], vector)
        return {digest: vector for digest, (_, vector) in found.items()}

    def save_vectors(self, model_id: str, dim: int, rows: dict[str, bytes]) -> None:
        if not rows:
            return
        try:
            with self._session() as session, session.begin():
                for batch in _batches(list(rows)):
                    session.execute(
                        delete(EmbeddingRow).where(EmbeddingRow.model_id == model_id, EmbeddingRow.text_hash.in_(batch))
                    )
                    # another process may have cached the same text meanwhile: its vector is the same one
                    session.execute(
                        _insert(session, EmbeddingRow).on_conflict_do_nothing(),
                        [{"model_id": model_id, "text_hash": h, "dim": dim, "vector": rows[h]} for h in batch],
                    )
        except SQLAlchemyError as exc:  # a cache: losing a write costs re-embedding, nothing else
            log.warning("embedding cache not written: %s", _reason(exc))

    def meta(self, key: str) -> str | None:
        with self._session() as session:
            return session.scalar(select(MetaRow.value).where(MetaRow.key == key))

    def set_meta(self, key: str, value: str) -> None:
        with self._session() as session, session.begin():
            session.execute(delete(MetaRow).where(MetaRow.key == key))
            session.execute(insert(MetaRow).values(key=key, value=value))

    def warnings(self) -> dict[str, builtins.list[str]]:
        """``{path: warnings}`` of the documents that have any."""
        with self._session() as session:
            rows = session.execute(select(DocumentRow.path, DocumentRow.warnings))
            return {path: list(warnings) for path, warnings in rows if warnings}

    # -- writes ----------------------------------------------------------------------------

    def save(
        self,
        doc: ParsedDocument,
        *,
        origin: str | None,
        audit: dict[str, Any] | None = None,
        must_exist: bool = False,
        change: Change | None = None,
    ) -> str:
        """Insert or replace ``doc`` and its chunks in one transaction, with its write-audit row when given and
        its new version in the document's history (``change`` says through what; an ingest by default).

        Returns ``"added"``, ``"updated"`` or ``"unchanged"`` (same path, same content hash;
        only a changed origin is written then, and no audit row). With ``must_exist`` (a replace) a path
        without a document changes nothing and returns ``"missing"``, decided inside the same transaction.
        Writes of one path from any thread or process take turns (see ``_write``).
        """
        try:
            with self._write(doc.path) as session:
                existing = session.execute(
                    select(DocumentRow.id, DocumentRow.content_hash, DocumentRow.created_at)
                    .where(DocumentRow.path == doc.path)
                    .with_for_update()
                ).first()
                if existing is None and must_exist:
                    return "missing"
                if existing is not None and existing.content_hash == doc.content_hash:
                    if origin is not None:
                        session.execute(update(DocumentRow).where(DocumentRow.id == existing.id).values(origin=origin))
                    return "unchanged"
                now = utcnow()
                values = document_values(doc, origin)
                status = "added" if existing is None else "updated"
                change = change or Change(via="ingest")
                history.record(  # first: a document stored before its history began keeps the state it replaces
                    session,
                    path=doc.path,
                    document_id=doc.id,
                    action="restored" if change.restored_from is not None else status,
                    change=change,
                    audit=audit or {},
                    values=values,
                    previous_id=existing.id if existing is not None else None,
                    now=now,
                )
                if existing is None:
                    session.execute(insert(DocumentRow).values(**values, created_at=now, updated_at=now))
                else:
                    session.execute(delete(ChunkRow).where(ChunkRow.document_id == existing.id))
                    session.execute(
                        update(DocumentRow).where(DocumentRow.id == existing.id).values(**values, updated_at=now)
                    )
                if doc.chunks:
                    session.execute(insert(ChunkRow), [chunk_values(c) for c in doc.chunks])
                _bump_version(session)
                if audit is not None:
                    session.execute(
                        insert(WriteAuditRow).values(
                            **audit,
                            action=status,
                            path=doc.path,
                            created_at=now,
                            old_hash=existing.content_hash if existing is not None else None,
                            new_hash=doc.content_hash,
                        )
                    )
                return status
        except SQLAlchemyError as exc:
            raise _storage_error(f"could not store {doc.path}", exc) from exc

    def delete(self, path: str, *, audit: dict[str, Any] | None = None, change: Change | None = None) -> bool:
        """Remove a document and its chunks (and write its audit row and its history's tombstone); ``False`` when
        there was none."""
        try:
            with self._write(path) as session:
                found = session.execute(
                    select(DocumentRow.id, DocumentRow.content_hash).where(DocumentRow.path == path)
                ).first()
                if found is None:
                    return False
                session.execute(delete(ChunkRow).where(ChunkRow.document_id == found.id))
                now = utcnow()
                history.record(  # before the row goes: a document without history gets its last state kept
                    session,
                    path=path,
                    document_id=found.id,
                    action="deleted",
                    change=change or Change(via="delete"),
                    audit=audit or {},
                    values=None,
                    previous_id=found.id,
                    now=now,
                )
                session.execute(delete(DocumentRow).where(DocumentRow.id == found.id))
                _bump_version(session)
                if audit is not None:
                    session.execute(
                        insert(WriteAuditRow).values(
                            **audit, action="deleted", path=path, created_at=now, old_hash=found.content_hash
                        )
                    )
                return True
        except SQLAlchemyError as exc:
            raise _storage_error(f"could not delete {path}", exc) from exc


def _in_transaction(connection: Connection) -> bool:
    dbapi = connection.connection.dbapi_connection
    return bool(dbapi is not None and dbapi.in_transaction)


def _lock_key(name: str, kind: bytes = b"kbseek-document") -> int:
    """The advisory-lock key of a document path: a signed 64-bit number, the same in every process."""
    return int.from_bytes(hashlib.sha256(kind + b"\0" + name.encode("utf-8")).digest()[:8], "big", signed=True)


TOKEN_CACHE_KEY = _lock_key("chunk_tokens", b"kbseek-cache")


def _reason(exc: SQLAlchemyError) -> str:
    """The driver's own message (e.g. ``UNIQUE constraint failed: documents.path``) without the statement and
    its parameters, which would copy whole documents into the log."""
    return f"{exc.__class__.__name__}: {getattr(exc, 'orig', None) or exc}".strip()


def _storage_error(what: str, exc: SQLAlchemyError) -> StorageError:
    """A message for callers that says what failed and never carries SQL, parameters or server addresses; the
    driver's reason goes to the log."""
    log.warning("%s: %s", what, _reason(exc))
    return StorageError(
        f"{what}: the database did not take the change ({exc.__class__.__name__}); nothing was changed",
        hint="retry; if it persists, the server log has the database's reason",
    )


def _batches(items: list[str], size: int = 2000) -> Iterable[list[str]]:
    """Keep ``IN (...)`` lists under SQLite's bound-parameter limit."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _bump_version(session: Session) -> None:
    """One statement, so the first writes of two processes on an empty database cannot both insert the row."""
    upsert = _insert(session, StateRow).values(key=VERSION_KEY, value=1)
    session.execute(upsert.on_conflict_do_update(index_elements=[StateRow.key], set_={"value": StateRow.value + 1}))


def _insert(session: Session, table: type) -> Any:
    """The dialect's own INSERT, which knows ``ON CONFLICT`` (SQLite and PostgreSQL spell it alike)."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)
