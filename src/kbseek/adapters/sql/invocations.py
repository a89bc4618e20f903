"""The ``tool_invocations`` table: every ``lookup_knowledge`` call, written so that it never fails the call."""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import delete, func, insert, select
from sqlalchemy.engine import CursorResult, Engine
from sqlalchemy.orm import sessionmaker

from kbseek.adapters.sql.tables import ToolInvocationRow, utcnow

log = logging.getLogger("kbseek")
COLUMNS = [c.name for c in ToolInvocationRow.__table__.columns if c.name != "id" and c.name != "created_at"]
BATCH = 500
PRUNE_EVERY_S = 3600.0  # the writer applies the retention this often, and sooner when many rows came in
_OPEN: weakref.WeakSet[InvocationStore] = weakref.WeakSet()


@atexit.register
def _flush_open_stores() -> None:
    """A CLI process that never closed its knowledge base still leaves its records behind."""
    for store in list(_OPEN):
        store.flush(timeout=5.0)


def storable(value: Any) -> Any:
    """What every database takes: a lone surrogate becomes '?', NUL U+FFFD (an agent can send both).

    >>> storable({"query": "a\\ud800b\\x00"})
    {'query': 'a?b�'}
    """
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value


class InvocationStore:
    """Appends invocation rows from a background writer, so a lookup pays for a queue put, not a commit.

    Rows are written in batches by one thread (which also spares SQLite's single writer from lock contention
    under concurrent lookups). A failed write is logged, counted through ``on_failure`` and dropped: the
    record must never cost the answer. Reads (``list``, ``count``, ``prune``) flush first, so a process always
    sees its own calls; ``close`` and interpreter exit flush what is queued.

    Retention: rows older than ``retention_days`` and all but the newest ``max_rows`` are deleted by the writer
    itself, hourly and after every ``max_rows // 10`` rows written (0 turns either bound off), so the table
    stays bounded under any rate of lookups without a second writer competing with the inserts.

    >>> from kbseek.adapters.sql.engine import make_engine
    >>> from kbseek.adapters.sql.migrate import upgrade
    >>> import tempfile  # a file: an in-memory SQLite database is one per thread
    >>> engine = make_engine(f"sqlite:///{tempfile.mkdtemp()}/kb.db"); _ = upgrade(engine)
    >>> store = InvocationStore(engine)
    >>> store.record({"tool_name": "lookup_knowledge", "request_id": "r1", "query": "q", "policy": "hybrid",
    ...     "retrieval_layer": "L0+L1", "l0_match_count": 0, "l1_match_count": 2, "retrieval_details": {},
    ...     "relevance_level": "REFERENCE", "output_preview": "", "duration_ms": 1.0, "timings": {},
    ...     "success": True})
    >>> [row["query"] for row in store.list()]
    ['q']
    >>> store.close()
    """

    def __init__(
        self,
        engine: Engine,
        *,
        on_failure: Callable[[int], None] | None = None,
        retention_days: int = 0,
        max_rows: int = 0,
    ) -> None:
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._on_failure = on_failure
        self.retention_days, self.max_rows = retention_days, max_rows
        self._written_since_prune = 0
        self._pruned_at = time.monotonic()
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._lock = threading.Lock()
        _OPEN.add(self)

    def record(self, row: dict[str, Any]) -> None:
        """Queue one row (stamped now); the writer thread starts on first use."""
        self._queue.put({name: storable(row.get(name)) for name in COLUMNS} | {"created_at": utcnow()})
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = threading.Thread(target=self._run, name="kbseek-invocations", daemon=True)
                    self._writer.start()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued row is written (or dropped after a failure); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.all_tasks_done.wait(remaining)
        return True

    def close(self) -> None:
        self.flush()
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join(timeout=5)
            self._writer = None
        _OPEN.discard(self)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                self._queue.task_done()
                return
            batch = [first]
            while len(batch) < BATCH:
                try:
                    row = self._queue.get_nowait()
                except queue.Empty:
                    break
                if row is None:  # close() asked to stop: write what we have, then stop
                    self._queue.task_done()
                    self._write(batch)
                    return
                batch.append(row)
            self._write(batch)

    def _write(self, batch: list[dict[str, Any]]) -> None:
        """Insert, then apply the retention when due; only then are the rows done (``flush`` sees both)."""
        try:
            self._insert_each(batch)
            self._written_since_prune += len(batch)
            if self._prune_due():
                self._retain()
        finally:
            for _ in batch:
                self._queue.task_done()

    def _prune_due(self) -> bool:
        if not self.retention_days and not self.max_rows:
            return False
        many = self.max_rows and self._written_since_prune >= max(100, self.max_rows // 10)
        return bool(many) or time.monotonic() - self._pruned_at >= PRUNE_EVERY_S

    def _retain(self) -> int:
        """Apply the retention now (in whichever thread calls it); a failure is logged, never raised."""
        self._written_since_prune, self._pruned_at = 0, time.monotonic()
        before = utcnow() - dt.timedelta(days=self.retention_days) if self.retention_days else None
        try:
            removed = self._delete(before=before, keep=self.max_rows or None)
        except Exception as exc:  # the writer must outlive a failed prune; the next one tries again
            log.warning("tool invocation retention failed: %s: %s", type(exc).__name__, str(exc)[:300])
            return 0
        if removed:
            log.info(
                "retention: pruned %d tool invocation(s) (older than %s days or beyond %s rows)",
                removed,
                self.retention_days or "-",
                self.max_rows or "-",
            )
        return removed

    def apply_retention(self) -> int:
        """Apply ``retention_days`` and ``max_rows`` now (start-up does); returns how many rows went."""
        if not self.retention_days and not self.max_rows:
            return 0
        self.flush()
        return self._retain()

    def _insert_each(self, batch: list[dict[str, Any]]) -> None:
        try:
            self._insert(batch)
        except Exception:  # one bad row must not cost the others: write them one by one
            failed = 0
            for row in batch:
                try:
                    self._insert([row])
                except Exception as exc:  # anything at all: this thread must outlive every row
                    failed += 1
                    log.warning("tool invocation not recorded: %s: %s", type(exc).__name__, str(exc)[:300])
            if failed and self._on_failure is not None:
                self._on_failure(failed)

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        with self._sessions() as session, session.begin():
            session.execute(insert(ToolInvocationRow), rows)

    def list(
        self,
        *,
        session_id: str | None = None,
        since: dt.datetime | None = None,
        level: str | None = None,
        success: bool | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """The newest ``limit`` rows that match, oldest first (each filter has an index)."""
        self.flush()
        query = select(ToolInvocationRow).order_by(ToolInvocationRow.id.desc()).limit(limit)
        if session_id is not None:
            query = query.where(ToolInvocationRow.session_id == session_id)
        if since is not None:
            query = query.where(ToolInvocationRow.created_at >= since)
        if level is not None:
            query = query.where(ToolInvocationRow.relevance_level == level)
        if success is not None:
            query = query.where(ToolInvocationRow.success == success)
        with self._sessions() as session:
            rows = session.scalars(query).all()
        return [{c: getattr(r, c) for c in ["id", *COLUMNS, "created_at"]} for r in reversed(rows)]

    def count(self) -> int:
        self.flush()
        with self._sessions() as session:
            return session.scalar(select(func.count()).select_from(ToolInvocationRow)) or 0

    def prune(self, *, before: dt.datetime | None = None, keep: int | None = None) -> int:
        """Delete rows older than ``before`` and/or all but the newest ``keep``; returns how many went."""
        if before is None and keep is None:
            raise ValueError("prune needs an age or a count to keep")
        self.flush()
        return self._delete(before=before, keep=keep)

    def _delete(self, *, before: dt.datetime | None, keep: int | None) -> int:
        removed = 0
        with self._sessions() as session, session.begin():
            if before is not None:
                old = delete(ToolInvocationRow).where(ToolInvocationRow.created_at < before)
                removed += cast("CursorResult[Any]", session.execute(old)).rowcount
            if keep is not None:
                cutoff = session.scalar(
                    select(ToolInvocationRow.id).order_by(ToolInvocationRow.id.desc()).offset(keep).limit(1)
                )
                if cutoff is not None:
                    beyond = delete(ToolInvocationRow).where(ToolInvocationRow.id <= cutoff)
                    removed += cast("CursorResult[Any]", session.execute(beyond)).rowcount
        return removed
