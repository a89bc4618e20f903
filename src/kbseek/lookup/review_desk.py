"""The review desk: what needs review (staleness, per owner) and what readers reported about the evidence they
were given (``report_evidence``), for the knowledge base that holds it. The knowledge base hands itself and its
feedback store in; the desk reads its documents, index cards, configuration and invocation records through them."""

from __future__ import annotations

import datetime as dt
from typing import Any, Protocol

from kbseek.lookup.feedback import FeedbackRequest, feedback_row, feedback_view, outdated_by_path
from kbseek.lookup.review import count_stale, stale_report
from kbseek.observability.logs import current_actor


class _Base(Protocol):
    """What the desk reads of the knowledge base (``kbseek.service.KnowledgeBase``)."""

    indexes: Any
    lookup_tool: Any
    invocations: Any
    telemetry: Any

    def list_documents(self) -> list[Any]: ...


class ReviewDesk:
    def __init__(self, kb: _Base, feedback: Any) -> None:
        self._kb = kb
        self._feedback = feedback  # kbseek.adapters.sql.feedback.FeedbackStore

    @property
    def review_every(self) -> int | None:
        """The default review period in days (``review_every_default``); ``None``: never stale by default."""
        return self._kb.lookup_tool.config.review_every_default

    def stale(self, owner: str | None = None, *, everything: bool = False) -> list[dict[str, Any]]:
        """Documents past review, or reported outdated, by owner (``kbseek docs stale``)."""
        outdated = outdated_by_path(self._feedback.list(verdicts=("outdated",), limit=100_000))
        return stale_report(
            self._kb.list_documents(),
            default_every=self.review_every,
            outdated=outdated,
            owner=owner,
            everything=everything,
        )

    def count_stale(self) -> int:
        """Documents past review, from the index cards (no database read): the Prometheus gauge."""
        return count_stale(self._kb.indexes.documents.values(), default_every=self.review_every)

    def report(self, arguments: FeedbackRequest | dict[str, Any]) -> dict[str, Any]:
        """Store one reader's report on a recorded call's evidence, checked against that record first."""
        request = FeedbackRequest.parse(arguments)
        self._kb.invocations.flush()  # the call's record is written in the background: it may be just behind
        row = feedback_row(request, self._feedback.invocation(request.request_id), self._kb.indexes.chunks)
        actor, key_id = current_actor()
        stored = self._feedback.add({**row, "actor": actor, "key_id": key_id})
        self._kb.telemetry.feedback.labels(request.verdict).inc()
        return feedback_view(stored)

    def feedback(
        self,
        *,
        session_id: str | None = None,
        verdicts: tuple[str, ...] | None = None,
        since: dt.datetime | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """Stored reports, oldest first."""
        rows = self._feedback.list(session_id=session_id, verdicts=verdicts, since=since, limit=limit)
        return [feedback_view(r) for r in rows]
