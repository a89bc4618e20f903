"""The records of a data home read straight from its database, without opening a knowledge base.

``kbseek audit``, ``invocations list|prune`` and ``metrics`` need no embedder, no vector store and no index, so
they start in a moment even on a large home and run beside the process that owns it. Reading never creates or
migrates the database (its owner does that); pruning is a write, done by a caller that holds the home.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.engine import Engine

from kbseek.adapters.sql import migrate
from kbseek.adapters.sql.audit import AuditStore
from kbseek.adapters.sql.engine import make_engine
from kbseek.adapters.sql.invocations import InvocationStore
from kbseek.adapters.sql.repository import SqlRepository
from kbseek.home.readonly import require_current_schema, require_database
from kbseek.observability.metrics import from_records
from kbseek.settings import Settings

EVERY_ROW = 10_000_000  # what "all the rows of a period" means for the metrics


class Records:
    """Tool invocations and the write audit of one data home.

    >>> import tempfile
    >>> settings = Settings(home=tempfile.mkdtemp())
    >>> with Records.open(settings, writable=True) as records:  # creates and migrates the database
    ...     records.prune_invocations(keep=10)
    {'removed': 0, 'remaining': 0}
    >>> with Records.open(settings) as records:
    ...     records.invocations(), records.audit()
    ([], [])
    """

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine, self.settings = engine, settings
        self._invocations = InvocationStore(engine)

    @classmethod
    def open(cls, settings: Settings, *, writable: bool = False) -> Records:
        """The records, for reading (the database must exist at the current schema), or ``writable`` by the
        home's holder (the schema is migrated first, as any owner does)."""
        if not writable:
            require_database(settings.database_url, settings.home)  # opening SQLite would create it
        engine = make_engine(settings.database_url)
        try:
            if writable:
                migrate.upgrade(engine)
            else:
                require_current_schema(engine, settings.home)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, settings)

    def close(self) -> None:
        self._invocations.close()
        self.engine.dispose()

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def invocations(
        self,
        *,
        session_id: str | None = None,
        since: dt.datetime | None = None,
        level: str | None = None,
        failed: bool = False,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """Recorded ``lookup_knowledge`` calls that match, the newest ``limit``, oldest first."""
        return self._invocations.list(
            session_id=session_id, since=since, level=level, success=False if failed else None, limit=limit
        )

    def audit(
        self, *, path: str | None = None, since: dt.datetime | None = None, action: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Write audit entries that match (``action``: added, updated, deleted or rejected), newest last."""
        return AuditStore(self.engine).list(path=path, since=since, action=action, limit=limit)

    def prune_invocations(self, *, before: dt.datetime | None = None, keep: int | None = None) -> dict[str, int]:
        """Retention: delete the calls older than ``before`` and/or all but the newest ``keep`` (session dedup
        state is kept); says how many went and how many remain."""
        removed = self._invocations.prune(before=before, keep=keep)
        return {"removed": removed, "remaining": self._invocations.count()}

    def metrics(self, since: dt.datetime) -> str:
        """The Prometheus exposition of the calls and writes recorded after ``since``, counted as a running
        server would have, with the document and chunk counts of now."""
        repository = SqlRepository(self.engine)
        telemetry = from_records(
            self._invocations.list(since=since, limit=EVERY_ROW),
            AuditStore(self.engine).list(since=since, limit=EVERY_ROW),
            slow_lookup_ms=self.settings.slow_lookup_ms,
            documents=repository.count(),
            chunks=repository.chunk_count(),
        )
        return telemetry.exposition().decode("utf-8")
