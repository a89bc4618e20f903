"""The replaceable backends, one small Protocol each; contracts live in the docstrings.

Every implementation passes the shared conformance suite in ``tests/test_vector_stores.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from kbseek.core.models import StoredDocument


@runtime_checkable
class Embedder(Protocol):
    """Text → unit-length float32 vectors, offline.

    ``model_id`` names the model *and* its build (vectors of different ids are never mixed);
    ``dim`` is the vector size. Documents and queries may be embedded differently (e5 prefixes
    ``passage:``/``query:``), so callers use the matching method. Both return ``(len(texts), dim)``.
    """

    model_id: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores passages against a query with a model recall does not have (a cross-encoder behind an endpoint).

    ``rerank`` returns one score per passage, in the passages' order, higher meaning more relevant, or raises
    :class:`~kbseek.errors.RerankError` when it cannot: recall then keeps its own ranking and says so. ``depth``
    is how many of the fused hits it reorders; ``name`` says which endpoint in notes (credentials masked).
    """

    name: str
    depth: int

    def rerank(self, query: str, passages: Sequence[str]) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class VectorRecord:
    """One chunk's vector with the metadata a vector store filters and shows (``_source``, ``_file_name``,
    category, …)."""

    chunk_id: str
    vector: np.ndarray
    document_id: str
    category: str
    source: str  # document path
    file_name: str
    chunk_index: int
    total_chunks: int
    title: str
    breadcrumb: str


@dataclass(frozen=True, slots=True)
class VectorHit:
    """``similarity`` is cosine similarity, higher is closer (what both stores compute)."""

    chunk_id: str
    similarity: float


@runtime_checkable
class VectorStore(Protocol):
    """Vectors of one embedding model, searchable by cosine similarity.

    * ``upsert`` replaces records with the same chunk id; it is durable and searchable once it returns.
    * ``delete`` ignores unknown ids.
    * ``search`` returns at most ``top_k`` hits, best first, only those with ``similarity >=
      threshold`` when a threshold is given, and only of ``categories`` when given. Category values
      are data, never code: a store must not let one change the query.
    * ``ids`` lists every stored chunk id (drift repair compares them with the database).
    """

    name: str

    def upsert(self, records: Sequence[VectorRecord]) -> None: ...

    def delete(self, chunk_ids: Sequence[str]) -> None: ...

    def search(
        self,
        vector: np.ndarray,
        *,
        top_k: int,
        categories: Sequence[str] | None = None,
        threshold: float | None = None,
    ) -> list[VectorHit]: ...

    def ids(self) -> set[str]: ...

    def count(self) -> int: ...

    def close(self) -> None: ...


class IndexSource(Protocol):
    """What the in-memory indexes read from the database, the system of record (``kbseek.retrieval.indexes``).

    * ``version`` is a change counter every document write bumps: equal counters mean equal documents.
    * ``states`` maps every document id to its content hash; ``load`` returns documents with their chunks, those
      of ``document_ids`` or all of them.
    * ``tokens`` returns the analysed tokens cached for the chunks of ``document_ids`` (all when ``None``) as
      ``{chunk id: (analyser version, tokens)}``; ``save_tokens`` and ``retag_tokens`` keep that cache, and may
      skip writing (a read-only opening does): it only saves analysing again.
    """

    def version(self) -> int: ...

    def states(self) -> dict[str, str]: ...

    def load(self, document_ids: list[str] | None = None) -> list[StoredDocument]: ...

    def tokens(self, document_ids: list[str] | None = None) -> dict[str, tuple[str, list[str]]]: ...

    def save_tokens(self, rows: list[tuple[str, str, list[str]]]) -> None: ...

    def retag_tokens(self, old_version: str, new_version: str) -> None: ...


class EmbeddingCache(Protocol):
    """Vectors already computed, kept in the database so that no text is embedded twice (``retrieval.vectors``).

    * ``vectors`` returns the float32 bytes cached for ``model_id`` by input-text hash, for the hashes it has; a hash
      it lacks is looked up under the ``fallback`` ids, in their order (another input of the same model).
    * ``save_vectors`` caches more; it may skip writing (a cache), never raise for a storage failure.
    * ``meta``/``set_meta`` hold small notes, such as the embedding model the knowledge base last used.
    """

    def vectors(self, model_id: str, hashes: list[str], fallback: tuple[str, ...] = ()) -> dict[str, bytes]: ...

    def save_vectors(self, model_id: str, dim: int, rows: dict[str, bytes]) -> None: ...

    def meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...


class SessionLedger(Protocol):
    """What a diagnosis session has been given, for dedup across its ``lookup_knowledge`` calls.

    * ``begin_call`` counts one more call of the session (creating it) and returns its number, from 1; concurrent
      calls of one session get distinct numbers.
    * ``seen`` maps each dedup key given so far to the call that first gave it.
    * ``remember`` records ``(key, document_id, anchor)`` as given in ``call``; a key already known keeps its
      first call.
    """

    def begin_call(self, session_id: str) -> int: ...

    def seen(self, session_id: str) -> dict[str, int]: ...

    def remember(
        self, session_id: str, call: int, query: str, given: Iterable[tuple[str, str, str | None]]
    ) -> None: ...


class InvocationRecorder(Protocol):
    """Where each ``lookup_knowledge`` call leaves its ``tool_invocation`` row (``kbseek.lookup.records``).
    ``record`` never raises and never waits for storage: a failing store must not fail the lookup."""

    def record(self, row: dict[str, Any]) -> None: ...
