"""Which documents still lack their vectors, and when a failed embedding is tried again.

The vector worker thread changes this state and request threads read it (``/ready``, a document's vector status),
so all of it sits behind one lock: a reader never sees a set in mid-change, nor a document between two of its
states (a failed document is marked failed before it stops counting as queued, both under the lock, so it reads
``pending`` throughout).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable


class PendingVectors:
    """
    ``queued``: documents handed to the vector worker and not done yet. ``failed``: documents the lexical lanes serve
    but whose embedding failed or was stopped; they are retried after a delay that doubles with each failure, from
    ``retry_s`` up to ``retry_max_s``, or when the vector store's server is tried again (``due_in``). ``synced``: a
    first full sync of the vector store has succeeded. ``resync``: a sync failed after it, so the next one compares
    the whole store with the documents again (deletes of documents gone meanwhile were lost with it).

    >>> pending = PendingVectors(retry_s=5, retry_max_s=300)
    >>> pending.queue(["a"]); pending.failed({"a"}, known=set(), retry=True, now=100.0)
    (1, 5)
    >>> pending.finish(["a"]); pending.ids(), pending.retry_in(available=True, now=102.0)
    ({'a'}, 3.0)
    >>> pending.succeeded({"a"}); pending.ids(), pending.retry_in(available=True)
    (set(), None)
    """

    def __init__(self, retry_s: float = 5.0, retry_max_s: float = 300.0) -> None:
        self._lock = threading.Lock()
        self._queued: set[str] = set()
        self._failed: set[str] = set()
        self._synced = False
        self._resync = False
        self._retry_s, self._retry_max_s = retry_s, retry_max_s
        self._delay = retry_s
        self._retry_at = 0.0

    def ids(self) -> set[str]:
        """Documents queued, being embedded, or waiting for a retry."""
        with self._lock:
            return self._queued | self._failed

    def queue(self, ids: Iterable[str]) -> None:
        with self._lock:
            self._queued.update(ids)

    def finish(self, ids: Iterable[str]) -> None:
        """The worker is done with ``ids``: stored, or marked failed by :meth:`failed` first."""
        with self._lock:
            self._queued.difference_update(ids)

    def to_retry(self) -> tuple[set[str], bool, bool]:
        """The failed documents to embed with the next sync, whether a first full sync has happened, and whether
        the next sync is to compare the whole store again."""
        with self._lock:
            return set(self._failed), self._synced, self._resync

    def failed(
        self, ids: set[str], *, known: set[str], retry: bool, now: float | None = None, due_in: float | None = None
    ) -> tuple[int, float]:
        """A sync of ``ids`` failed: they wait for a retry; before the first full sync succeeded, every ``known``
        document does. With ``retry`` (not a shutdown) the next try is due after ``due_in`` (when the vector
        store's server is tried again) or else the current delay, which then doubles. Returns how many documents
        wait and the delay until the retry."""
        with self._lock:
            self._failed |= ids if self._synced else ids | known
            self._resync = self._resync or (retry and self._synced)
            delay = self._delay if due_in is None else due_in
            if retry:
                self._retry_at = (time.monotonic() if now is None else now) + delay
                if due_in is None:
                    self._delay = min(self._delay * 2, self._retry_max_s)
            return len(self._failed), delay

    def succeeded(self, ids: set[str]) -> None:
        """A sync of ``ids`` (this refresh's and the retried ones) stored their vectors."""
        with self._lock:
            self._failed -= ids
            self._synced, self._resync = True, False
            self._delay = self._retry_s

    def retry_in(self, *, available: bool, now: float | None = None) -> float | None:
        """Seconds until failed documents (or a comparison of the whole store) are due for a retry; ``None`` when
        nothing waits (nothing failed, and the dense lane is ``available``: a server still to be reached waits too)."""
        with self._lock:
            if not self._failed and not self._resync and available:
                return None
            return max(0.0, self._retry_at - (time.monotonic() if now is None else now))
