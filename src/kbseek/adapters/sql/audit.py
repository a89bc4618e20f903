"""The write audit: every added, updated, deleted or refused document, listable by path and time.

Changes are written by :class:`~kbseek.adapters.sql.repository.SqlRepository` in the same transaction as the
change itself, so the audit and the knowledge base cannot disagree; refusals are written here.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import sessionmaker

from kbseek.adapters.sql.tables import WriteAuditRow, utcnow

log = logging.getLogger("kbseek")
COLUMNS = [c.name for c in WriteAuditRow.__table__.columns]


class AuditStore:
    """
    >>> from kbseek.adapters.sql.engine import make_engine
    >>> from kbseek.adapters.sql.migrate import upgrade
    >>> engine = make_engine("sqlite://"); _ = upgrade(engine)
    >>> AuditStore(engine).record_rejection("api/x.md", "bad frontmatter", actor="cli:ops", request_id="r1")
    >>> [(e["action"], e["path"], e["detail"]) for e in AuditStore(engine).list()]
    [('rejected', 'api/x.md', 'bad frontmatter')]
    """

    def __init__(self, engine: Engine) -> None:
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def record_rejection(
        self,
        path: str,
        reason: str,
        *,
        actor: str,
        request_id: str,
        key_id: str | None = None,
        size_bytes: int | None = None,
    ) -> None:
        """A refused write; like an invocation record it must not turn into a second failure."""
        try:
            with self._sessions() as session, session.begin():
                session.execute(
                    insert(WriteAuditRow).values(
                        created_at=utcnow(),
                        action="rejected",
                        path=path[:1024],
                        actor=actor,
                        key_id=key_id,
                        request_id=request_id,
                        size_bytes=size_bytes,
                        detail=reason[:2000],
                    )
                )
        except SQLAlchemyError as exc:
            log.warning("write audit not recorded: %s", exc)

    def list(
        self, *, path: str | None = None, since: dt.datetime | None = None, action: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Newest last, at most ``limit``."""
        query = select(WriteAuditRow).order_by(WriteAuditRow.id.desc()).limit(limit)
        if path is not None:
            query = query.where(WriteAuditRow.path == path)
        if since is not None:
            query = query.where(WriteAuditRow.created_at >= since)
        if action is not None:
            query = query.where(WriteAuditRow.action == action)
        with self._sessions() as session:
            rows = session.scalars(query).all()
        return [{c: getattr(r, c) for c in COLUMNS} for r in reversed(rows)]
