"""The review desk: what needs review (staleness, per owner) and what readers reported about the evidence they
were given (``report_evidence``), for the knowledge base that holds it. The knowledge base hands itself and its
feedback store in; the desk reads its documents, index cards, configuration and invocation records through them."""

from __future__ import annotations

from typing import Any, Protocol

from kbseek.lookup.review import count_stale, stale_report


class _Base(Protocol):
    """What the desk reads of the knowledge base (``kbseek.service.KnowledgeBase``)."""

    indexes: Any
    lookup_tool: Any

    def list_documents(self) -> list[Any]: ...


class ReviewDesk:
    def __init__(self, kb: _Base, feedback: Any = None) -> None:
        self._kb = kb
        self._feedback = feedback

    @property
    def review_every(self) -> int | None:
        """The default review period in days (``review_every_default``); ``None``: never stale by default."""
        return self._kb.lookup_tool.config.review_every_default

    def stale(self, owner: str | None = None, *, everything: bool = False) -> list[dict[str, Any]]:
        """Documents past review, or reported outdated, by owner (``kbseek docs stale``)."""
        return stale_report(
            self._kb.list_documents(), default_every=self.review_every, owner=owner, everything=everything
        )

    def count_stale(self) -> int:
        """Documents past review, from the index cards (no database read): the Prometheus gauge."""
        return count_stale(self._kb.indexes.documents.values(), default_every=self.review_every)
