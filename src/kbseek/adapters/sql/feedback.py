"""Readers' feedback on evidence (``evidence_feedback``), and the recorded call each report names."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from kbseek.adapters.sql.tables import EvidenceFeedbackRow, ToolInvocationRow, utcnow

COLUMNS = [c.name for c in EvidenceFeedbackRow.__table__.columns]


class FeedbackStore:
    """
    >>> from kbseek.adapters.sql.engine import make_engine
    >>> from kbseek.adapters.sql.migrate import upgrade
    >>> engine = make_engine("sqlite://"); _ = upgrade(engine)
    >>> store = FeedbackStore(engine)
    >>> store.invocation("r-none") is None
    True
    >>> row = store.add({"request_id": "r1", "session_id": None, "verdict": "outdated", "chunk_ids": [], "note": None,
    ...                  "evidence": [{"path": "ops/a.md"}], "query": "q", "actor": "cli", "key_id": None})
    >>> [(r["verdict"], r["evidence"]) for r in store.list(verdicts=("outdated",))]
    [('outdated', [{'path': 'ops/a.md'}])]
    """

    def __init__(self, engine: Engine) -> None:
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def invocation(self, request_id: str) -> dict[str, Any] | None:
        """The recorded ``lookup_knowledge`` call of ``request_id`` (the newest, should an id repeat), or ``None``."""
        query = (
            select(ToolInvocationRow)
            .where(ToolInvocationRow.request_id == request_id)
            .order_by(ToolInvocationRow.id.desc())
            .limit(1)
        )
        with self._sessions() as session:
            row = session.scalars(query).first()
        if row is None:
            return None
        return {
            "request_id": row.request_id,
            "session_id": row.session_id,
            "call": row.call,
            "query": row.query,
            "success": row.success,
            "evidence": (row.retrieval_details or {}).get("evidence", []),
        }

    def add(self, row: dict[str, Any]) -> dict[str, Any]:
        """Store one report; returns it as stored (with its id and time)."""
        values = {**row, "created_at": utcnow()}
        with self._sessions() as session, session.begin():
            record = EvidenceFeedbackRow(**values)
            session.add(record)
            session.flush()
            new_id = record.id
        return {"id": new_id, **values}

    def list(
        self,
        *,
        session_id: str | None = None,
        verdicts: Iterable[str] | None = None,
        since: dt.datetime | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """The newest ``limit`` reports that match, oldest first."""
        query = select(EvidenceFeedbackRow).order_by(EvidenceFeedbackRow.id.desc()).limit(limit)
        if session_id is not None:
            query = query.where(EvidenceFeedbackRow.session_id == session_id)
        if verdicts is not None:
            query = query.where(EvidenceFeedbackRow.verdict.in_(list(verdicts)))
        if since is not None:
            query = query.where(EvidenceFeedbackRow.created_at >= since)
        with self._sessions() as session:
            rows = session.scalars(query).all()
        return [{c: getattr(r, c) for c in COLUMNS} for r in reversed(rows)]
