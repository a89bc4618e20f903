"""Session memory for dedup: which evidence each agent session was already given, and in which call."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from kbseek.adapters.sql.tables import LookupSessionRow, SessionEvidenceRow, utcnow

MAX_SESSION_ID = 128


class SessionStore:
    """Per-session call counter and given-evidence keys; safe for several processes on one database.

    >>> from kbseek.adapters.sql.engine import make_engine
    >>> from kbseek.adapters.sql.migrate import upgrade
    >>> engine = make_engine("sqlite://"); _ = upgrade(engine)
    >>> store = SessionStore(engine)
    >>> call = store.begin_call("s1"); store.remember("s1", call, "q", [("d1#a", "d1", "a")])
    >>> store.begin_call("s1"), store.seen("s1")
    (2, {'d1#a': 1})
    """

    def __init__(self, engine: Engine) -> None:
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def begin_call(self, session_id: str) -> int:
        """Count one more call in the session (creating it) and return its number, from 1."""
        for _ in range(3):  # two processes may create the same session at once
            with self._sessions() as session, session.begin():
                calls = session.scalar(
                    update(LookupSessionRow)
                    .where(LookupSessionRow.session_id == session_id)
                    .values(calls=LookupSessionRow.calls + 1, updated_at=utcnow())
                    .returning(LookupSessionRow.calls)
                )
                if calls is not None:
                    return calls
            try:
                with self._sessions() as session, session.begin():
                    now = utcnow()
                    session.execute(
                        insert(LookupSessionRow).values(session_id=session_id, calls=1, created_at=now, updated_at=now)
                    )
                return 1
            except IntegrityError:
                continue
        raise RuntimeError(f"could not start a call in session {session_id!r}")

    def seen(self, session_id: str) -> dict[str, int]:
        """Dedup key -> the call that first gave it."""
        with self._sessions() as session:
            rows = session.execute(
                select(SessionEvidenceRow.key, SessionEvidenceRow.call).where(
                    SessionEvidenceRow.session_id == session_id
                )
            )
            return {key: call for key, call in rows}

    def remember(self, session_id: str, call: int, query: str, given: Iterable[tuple[str, str, str | None]]) -> None:
        """Record ``(key, document_id, anchor)`` as given in ``call``; keys already known keep their first call."""
        fresh = {key: (doc, anchor) for key, doc, anchor in given}
        if not fresh:
            return
        try:
            self._insert_new(session_id, call, query, fresh)
        except IntegrityError:  # a concurrent call of the same session gave one of these first
            self._insert_new(session_id, call, query, fresh)

    def _insert_new(self, session_id: str, call: int, query: str, fresh: dict[str, tuple[str, str | None]]) -> None:
        with self._sessions() as session, session.begin():
            known = set(
                session.scalars(
                    select(SessionEvidenceRow.key).where(
                        SessionEvidenceRow.session_id == session_id, SessionEvidenceRow.key.in_(list(fresh))
                    )
                )
            )
            rows = [
                {
                    "session_id": session_id,
                    "key": key,
                    "document_id": doc,
                    "anchor": anchor,
                    "call": call,
                    "query": query,
                    "given_at": utcnow(),
                }
                for key, (doc, anchor) in fresh.items()
                if key not in known
            ]
            if rows:
                session.execute(insert(SessionEvidenceRow), rows)

    def given(self, session_id: str) -> list[dict[str, object]]:
        """What the session was given, in the order it was first given."""
        with self._sessions() as session:
            rows = session.scalars(
                select(SessionEvidenceRow)
                .where(SessionEvidenceRow.session_id == session_id)
                .order_by(SessionEvidenceRow.call, SessionEvidenceRow.key)
            ).all()
        return [
            {"key": r.key, "document_id": r.document_id, "anchor": r.anchor, "call": r.call, "query": r.query}
            for r in rows
        ]

    def forget(self, session_id: str) -> None:
        with self._sessions() as session, session.begin():
            session.execute(delete(SessionEvidenceRow).where(SessionEvidenceRow.session_id == session_id))
            session.execute(delete(LookupSessionRow).where(LookupSessionRow.session_id == session_id))
