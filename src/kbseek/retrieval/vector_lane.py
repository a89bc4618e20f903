"""The dense lane as the indexes drive it: which vector index serves, which documents still lack their vectors,
and who makes them.

After each refresh the documents added or changed get their vectors, in the refreshing thread or, once
:meth:`VectorLane.in_background` was called (a serving process), in the vector worker thread (``vector_worker``).
An embedding or vector-store failure leaves the lexical lanes serving those documents; they are retried with a
growing delay (``pending``). An embedding server that was down at start-up gives a ``DeferredDense``, replaced by
the connected ``DenseIndex`` on the first sync that reaches it (one reference assignment: a reader sees one or
the other).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kbseek.core.models import StoredDocument
from kbseek.errors import EmbeddingStopped, KbseekError
from kbseek.ports import IndexSource
from kbseek.retrieval.pending import PendingVectors
from kbseek.retrieval.vector_worker import DenseWorker
from kbseek.retrieval.vectors import DeferredDense, DenseIndex

log = logging.getLogger("kbseek")

DENSE_RETRY_S = 5.0  # after a failed embedding, the first wait before a retry; it doubles on each failure
DENSE_RETRY_MAX_S = 300.0


class VectorLane:
    """``documents()`` names the documents the lexical lanes serve now (a consistent read of the indexes)."""

    def __init__(
        self,
        dense: DenseIndex | DeferredDense | None,
        source: IndexSource,
        documents: Callable[[], set[str]],
        *,
        retry_s: float = DENSE_RETRY_S,
        retry_max_s: float = DENSE_RETRY_MAX_S,
    ) -> None:
        self.dense = dense
        self._source, self._documents = source, documents
        self.pending = PendingVectors(retry_s, retry_max_s)
        self._worker: DenseWorker | None = None

    def after_refresh(
        self, first_load: bool, loaded: list[StoredDocument], removed_chunks: list[str], gone: list[str]
    ) -> None:
        """Vectors for one refresh: queued for the worker when there is one (after the first load), else made now."""
        if self.dense is None:
            return
        if self._worker is not None and not first_load:
            self._worker.submit(loaded, removed_chunks, gone)
        else:
            self.sync(loaded, removed_chunks, gone, first_load)

    def sync(
        self, loaded: Sequence[StoredDocument], removed_chunks: Sequence[str], gone: Sequence[str], first_load: bool
    ) -> None:
        """Vectors for this refresh, plus any left pending by a failed one; a failure leaves the lexical lanes serving
        the documents and retries later (the records say so). An embedding server that was down at start-up is
        connected here. One thread at a time calls it: the worker, or the refresh holding the build lock."""
        if self.dense is None:
            return
        ids = {d.id for d in loaded}
        known = self._documents()
        retry_ids, synced, resync = self.pending.to_retry()
        if resync:  # after a failed sync every document is compared with the store again (cached vectors, no model)
            retry_ids = retry_ids | known
        try:
            dense = self._connected()
            dense.probe()  # a vector server that went away: fail fast, or reconnect when due, before any work
            retry = [d for d in self._source.load(sorted(retry_ids - ids)) if d.id in known] if retry_ids - ids else []
            new_ids = {c.id for d in loaded for c in d.chunks}
            dense.sync(
                [*loaded, *retry],
                [c for c in removed_chunks if c not in new_ids],
                first=first_load or not synced or resync,
                removed_documents=gone,
            )
        except KbseekError as exc:
            stopped = isinstance(exc, EmbeddingStopped)
            due_in = self.dense.reconnect_in() if isinstance(self.dense, DenseIndex) else None
            waiting, delay = self.pending.failed(ids, known=known, retry=not stopped, due_in=due_in)
            if stopped:
                log.info("dense lane: stopped with %d document(s) pending; the next start embeds them", waiting)
            else:
                log.warning(
                    "dense lane: %d document(s) not indexed (%s); the lexical lanes serve them, retrying in %.0fs",
                    waiting,
                    exc,
                    delay,
                )
            return
        self.pending.succeeded(retry_ids | ids)

    def _connected(self) -> DenseIndex:
        dense = self.dense
        if isinstance(dense, DeferredDense):
            connected = dense.connect()
            if dense.stopping.is_set():
                connected.stopping.set()
            self.dense = dense = connected
        assert dense is not None
        return dense

    def retry_in(self) -> float | None:
        """Seconds until failed vectors are due for a retry; ``None`` when nothing waits."""
        return self.pending.retry_in(available=self.dense is None or self.dense.available)

    def retry_due(self) -> bool:
        """Vectors left pending by a failure are due for a retry by a refresh (the worker, when there is one,
        retries by itself)."""
        return self._worker is None and (due := self.retry_in()) is not None and due <= 0

    def in_background(self) -> None:
        """From now on, changed documents get their vectors from a worker thread, which also retries failed ones
        when they are due."""
        if self.dense is not None and self._worker is None:
            self._worker = DenseWorker(
                lambda loaded, removed, gone: self.sync(loaded, removed, gone, False),
                pending=self.pending,
                retry_in=self.retry_in,
            )

    def wait(self, timeout: float = 60.0) -> bool:
        return self._worker.wait(timeout) if self._worker is not None else True

    def close(self) -> None:
        """Stop the vector worker between two model calls; what it has not embedded stays pending."""
        if self.dense is not None:
            self.dense.stopping.set()
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    @property
    def available(self) -> bool:
        """Whether the dense lane can answer (an embedding server down since start-up cannot)."""
        return self.dense is not None and self.dense.available

    def pending_ids(self) -> set[str]:
        """Documents the lexical lanes serve but the dense lane does not yet (queued, or embedding failed); a
        document deleted meanwhile waits for nothing."""
        return self.pending.ids() & self._documents()

    def status(self) -> dict[str, Any]:
        """The dense lane for ``/ready``: ``ok`` is false while its embedding server has not answered since
        start-up or its vector server is away (the lexical lanes answer meanwhile), with the reason and when it is
        tried again."""
        dense = self.dense
        if dense is None:
            return {"ok": True, "kind": "none (lexical only)"}
        status: dict[str, Any] = {
            "ok": dense.available,
            "store": None if isinstance(dense, DeferredDense) else dense.store.name,
            "model": dense.model_id,
            "fallback": dense.fallback,
            "documents_pending": len(self.pending_ids()),
        }
        if isinstance(dense, DenseIndex):  # by this process since it started: with several workers, made once
            status |= {"embedded": dense.counters["embedded"], "from_cache": dense.counters["from_cache"]}
            status |= {"engine": getattr(dense.embedder, "engine", None)}
        if not dense.available:
            due = dense.reconnect_in() if isinstance(dense, DenseIndex) else self.retry_in()
            status |= {"reason": dense.reason, "retry_in_s": round(due, 1) if due is not None else 0}
        return status
