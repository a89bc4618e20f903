"""Vectors in the background: a served upload returns once it is stored and lexically indexed; one worker
thread embeds it and updates the vector store right after (the document's status says ``pending`` meanwhile).

One thread does all document embedding, so concurrent uploads never embed the same text twice, and lookups
(queries go first at the embedder) are not stuck behind a queue of uploads. Work lost to a crash or a shutdown
is redone by the next start, which reconciles the vector store with the database. The worker also wakes by
itself when a failed embedding is due for a retry, so vectors come back without waiting for traffic.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kbseek.retrieval.pending import PendingVectors

log = logging.getLogger("kbseek")


class DenseWorker:
    """
    ``sync(loaded documents, removed chunk ids, removed document ids)`` does the work; ``retry_in()`` says in how
    many seconds a retry of failed work is due (``None``: nothing to retry), and an empty ``sync`` runs then.
    ``stop_now`` is set by :meth:`stop` so that ``sync`` can stop between model calls. Submitted documents count
    as queued in ``pending`` until the batch holding them is done (a failing ``sync`` marks them failed there
    first); the queue's lock is taken before the pending lock, never the other way round.
    """

    def __init__(
        self,
        sync: Callable[[list[Any], list[str], list[str]], None],
        *,
        pending: PendingVectors | None = None,
        retry_in: Callable[[], float | None] = lambda: None,
        stop_now: threading.Event | None = None,
    ) -> None:
        self._sync, self._retry_in = sync, retry_in
        self.pending = pending if pending is not None else PendingVectors()
        self.stop_now = stop_now or threading.Event()
        self._cond = threading.Condition()  # the queue and whether a batch is under way
        self._queue: list[tuple[list[Any], list[str], list[str]]] = []
        self._busy = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="kbseek-vectors", daemon=True)
        self._thread.start()

    def submit(self, loaded: Sequence[Any], removed_chunks: Sequence[str], gone: Sequence[str]) -> None:
        with self._cond:
            self._queue.append((list(loaded), list(removed_chunks), list(gone)))
            self.pending.queue(d.id for d in loaded)
            self._cond.notify_all()

    def wait(self, timeout: float = 60.0) -> bool:
        """Until the queue is empty and the worker idle; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def wake(self) -> None:
        """Look again at ``retry_in`` (it changed)."""
        with self._cond:
            self._cond.notify_all()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop now: the model call under way finishes, queued work stays for the next start (its documents are
        still pending in the database's view: the next start embeds what the vector store lacks). Returns whether
        the thread ended within ``timeout``."""
        self.stop_now.set()
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=timeout)
        return not self._thread.is_alive()

    def _next(self) -> list[tuple[list[Any], list[str], list[str]]] | None:
        """The queued work, an empty batch when a retry is due, ``None`` once stopped."""
        with self._cond:
            while not self._queue and not self._stopped:
                due = self._retry_in()
                if due is not None and due <= 0:
                    break
                self._cond.wait(timeout=due)
            if self._stopped:
                return None
            batch, self._queue, self._busy = self._queue, [], True
            return batch or [([], [], [])]

    def _run(self) -> None:
        while (batch := self._next()) is not None:
            loaded: dict[str, Any] = {}
            removed: list[str] = []
            gone: list[str] = []
            for docs, chunks, went in batch:  # in order: a later change of a document wins
                for doc_id in went:
                    loaded.pop(doc_id, None)
                for doc in docs:
                    loaded[doc.id] = doc
                removed += chunks
                gone += went
            try:
                self._sync(list(loaded.values()), removed, gone)
            except Exception:  # the sync logs and keeps failures pending itself; never kill the worker
                log.exception("dense lane: background indexing failed")
            finally:
                with self._cond:  # every document of the batch is done, also one deleted before its turn
                    submitted = {d.id for docs, _, _ in batch for d in docs}
                    self.pending.finish(submitted - {d.id for docs, _, _ in self._queue for d in docs})
                    self._busy = False
                    self._cond.notify_all()
