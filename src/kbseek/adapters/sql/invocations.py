"""The ``tool_invocations`` table: every ``lookup_knowledge`` call, written so that it never fails the call."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import sessionmaker

from kbseek.adapters.sql.tables import ToolInvocationRow, utcnow

log = logging.getLogger("kbseek")
COLUMNS = [c.name for c in ToolInvocationRow.__table__.columns if c.name != "id"]


class InvocationStore:
    """Appends invocation rows; a failed write is logged and swallowed (the record must never cost the answer).

    >>> from kbseek.adapters.sql.engine import make_engine
    >>> from kbseek.adapters.sql.migrate import upgrade
    >>> engine = make_engine("sqlite://"); _ = upgrade(engine)
    >>> store = InvocationStore(engine)
    >>> store.record({"tool_name": "lookup_knowledge", "request_id": "r1", "query": "q", "policy": "hybrid",
    ...     "retrieval_layer": "L0+L1", "l0_match_count": 0, "l1_match_count": 2, "retrieval_details": {},
    ...     "relevance_level": "REFERENCE", "output_preview": "", "duration_ms": 1.0, "timings": {},
    ...     "success": True})
    True
    >>> [row["query"] for row in store.list()]
    ['q']
    """

    def __init__(self, engine: Engine) -> None:
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def record(self, row: dict[str, Any]) -> bool:
        values = {name: row.get(name) for name in COLUMNS} | {"created_at": utcnow()}
        try:
            with self._sessions() as session, session.begin():
                session.execute(insert(ToolInvocationRow).values(**values))
            return True
        except SQLAlchemyError as exc:
            log.warning("tool invocation not recorded: %s", exc)
            return False

    def list(self, *, session_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Newest last, at most ``limit``; one session's when ``session_id`` is given."""
        query = select(ToolInvocationRow).order_by(ToolInvocationRow.id.desc()).limit(limit)
        if session_id is not None:
            query = query.where(ToolInvocationRow.session_id == session_id)
        with self._sessions() as session:
            rows = session.scalars(query).all()
        return [{c: getattr(r, c) for c in ["id", *COLUMNS]} for r in reversed(rows)]
