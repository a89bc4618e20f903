"""The replaceable backends, one small Protocol each; contracts live in the docstrings.

Every implementation passes the shared conformance suite in ``tests/test_vector_stores.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


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
