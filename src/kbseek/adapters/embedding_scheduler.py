"""When the model runs what: the scheduling shared by the embedders that run a model in this process.

One query call at a time, holding the host's query turn (``QueryFirstLock``); queries that arrive while the model
is busy ride together in the next call (``QueryBatcher``). Documents are embedded elsewhere, under a budget
(``embedding_budget``): in a thread of their own, at a lower priority, taking turns across the host's processes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kbseek.errors import EmbeddingError

if TYPE_CHECKING:
    from kbseek.adapters.embedding_budget import HostTurns


def unit_rows(vectors: object, dim: int) -> np.ndarray:
    """``vectors`` as unit-length float32 rows of size ``dim`` (an embedder of another size is an error)."""
    array = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    if array.shape[1] != dim:
        raise EmbeddingError(f"embedder returned {array.shape[1]}-d vectors, expected {dim}")
    wide = array.astype(np.float64)  # float32 sums vary in the last bits with the CPU; float64 rounded back does not
    norms = np.sqrt(np.einsum("ij,ij->i", wide, wide))[:, None]
    return (wide / np.where(norms == 0, 1, norms)).astype(np.float32)


class QueryFirstLock:
    """One query model call at a time in this process (a C call threads inside), holding the host's query turn
    while it runs: document slices anywhere on the host do not start meanwhile (``embedding_budget``), and a query
    never waits for a document slice (documents run in a thread of their own, at a lower priority).

    >>> lock = QueryFirstLock()
    >>> with lock.query():
    ...     lock.busy
    True
    """

    def __init__(self, turns: HostTurns | None = None) -> None:
        self._turns = turns
        self._mutex = threading.Lock()
        self.busy = False

    @contextlib.contextmanager
    def query(self) -> Iterator[None]:
        with self._mutex, self._turns.query() if self._turns is not None else contextlib.nullcontext():
            self.busy = True
            try:
                yield
            finally:
                self.busy = False


class QueryBatcher:
    """Queries that arrive while the model is busy are embedded together in a following call.

    One waiting thread leads: it takes the model for a batch of the queue and hands each thread its vectors
    through an event. Once its own query is served it passes the lead to the oldest waiter and returns, so no
    thread serves others for ever and no served thread queues for the model again.

    A batch holds queries of one size class only, short ones (at most ``short_tokens``) before long ones, and
    at most ``call_tokens`` tokens (one query at least): a model call costs about its tokens and cannot be
    interrupted, so a short lookup never rides in a call full of pasted logs and waits behind one at most
    (measured under 8 concurrent 4,000-character lookups: with 1,024 tokens a call, a short lookup waited
    about two long queries' time, with 512 one). Sizes come from
    ``cost`` (the model's token count; characters where there is no tokenizer).

    >>> calls = []
    >>> batcher = QueryBatcher(QueryFirstLock(), lambda texts: calls.append(texts) or [[1.0]] * len(texts), 1,
    ...                        cost=len, short_tokens=5)
    >>> batcher.embed(["short"]).shape, calls
    ((1, 1), [['short']])
    """

    def __init__(
        self,
        lock: QueryFirstLock,
        encode: Any,
        dim: int,
        *,
        cost: Any = len,
        max_batch: int = 32,
        call_tokens: int = 512,
        short_tokens: int = 128,
    ) -> None:
        self._lock, self._encode, self._dim, self._cost = lock, encode, dim, cost
        self._max, self._call_tokens, self._short = max_batch, call_tokens, short_tokens
        self._guard = threading.Lock()
        self._pending: list[_Request] = []
        self._leading = False

    @property
    def waiting(self) -> int:
        """Queries queued for the model (not yet in a call)."""
        with self._guard:
            return len(self._pending)

    def embed(self, texts: list[str]) -> np.ndarray:
        request = _Request(texts, sum(self._cost(t) for t in texts))
        with self._guard:
            self._pending.append(request)
            if not self._leading:
                self._leading = request.leads = True
        while not request.done:
            if request.leads:
                self._serve_one_batch()
            else:
                request.wake.wait()
                request.wake.clear()
        if request.leads:
            self._hand_over()
        if request.error is not None:
            raise request.error
        return request.vectors

    def _next_batch(self) -> list[_Request]:
        """Oldest first within the size class served first; called with the guard held."""
        short = [r for r in self._pending if r.cost <= self._short]
        batch: list[_Request] = []
        tokens = 0
        for r in short or self._pending:
            if batch and (len(batch) >= self._max or tokens + r.cost > self._call_tokens):
                break
            batch.append(r)
            tokens += r.cost
        taken = {id(r) for r in batch}
        self._pending = [r for r in self._pending if id(r) not in taken]
        return batch

    def _serve_one_batch(self) -> None:
        with self._guard:
            batch = self._next_batch()
        try:
            with self._lock.query():
                vectors = unit_rows(self._encode([t for r in batch for t in r.texts]), self._dim)
            start = 0
            for r in batch:
                r.vectors, start = vectors[start : start + len(r.texts)], start + len(r.texts)
        except BaseException as exc:  # every waiter of the batch gets the error, not a hang
            for r in batch:
                r.error = exc
        for r in batch:
            r.done = True
            r.wake.set()

    def _hand_over(self) -> None:
        with self._guard:
            if self._pending:
                successor = self._pending[0]
                successor.leads = True
                successor.wake.set()
            else:
                self._leading = False


@dataclass(slots=True)
class _Request:
    texts: list[str]
    cost: int
    vectors: Any = None
    error: BaseException | None = None
    done: bool = False
    leads: bool = False
    wake: threading.Event = field(default_factory=threading.Event)
