"""The in-process exact vector store: a numpy matrix, searched by one matrix-vector product."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from threadpoolctl import ThreadpoolController

from kbseek.ports import VectorHit, VectorRecord


_BLAS = ThreadpoolController()


class LocalVectorStore:
    """Exact cosine search in memory; the fallback, and the fast path for queries.

    >>> store = LocalVectorStore(dim=2)
    >>> store.upsert([VectorRecord("a", np.array([1.0, 0.0]), "d", "api", "p.md", "p.md", 0, 1, "T", "T")])
    >>> [hit.chunk_id for hit in store.search(np.array([1.0, 0.1]), top_k=3)]
    ['a']
    """

    name = "local"

    def __init__(self, *, dim: int) -> None:
        self.dim = dim
        self._lock = threading.RLock()
        self._matrix = np.zeros((0, dim), dtype=np.float32)
        self._ids: list[str] = []
        self._row: dict[str, int] = {}
        self._categories: list[str] = []

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        if not records:
            return
        vectors = np.vstack([_unit(r.vector, self.dim) for r in records])
        with self._lock:
            self.delete([r.chunk_id for r in records])
            self._matrix = np.vstack([self._matrix, vectors])
            for record in records:
                self._row[record.chunk_id] = len(self._ids)
                self._ids.append(record.chunk_id)
                self._categories.append(record.category)

    def delete(self, chunk_ids: Sequence[str]) -> None:
        with self._lock:
            doomed = {self._row[c] for c in chunk_ids if c in self._row}
            if not doomed:
                return
            keep = [i for i in range(len(self._ids)) if i not in doomed]
            self._matrix = self._matrix[keep]
            self._ids = [self._ids[i] for i in keep]
            self._categories = [self._categories[i] for i in keep]
            self._row = {cid: i for i, cid in enumerate(self._ids)}

    def search(
        self, vector: np.ndarray, *, top_k: int, categories: Sequence[str] | None = None,
        threshold: float | None = None,
    ) -> list[VectorHit]:
        query = _unit(vector, self.dim)
        # One BLAS thread: a multi-threaded mat-vec leaves OpenBLAS threads spinning, and on 2 cores they starve
        # the embedder's OpenMP threads in the next query (10k chunks: lookup p50 31.6 -> 14.8 ms, p95 112 -> 26 ms).
        with self._lock, _BLAS.limit(limits=1, user_api="blas"):
            if not self._ids:
                return []
            scores = self._matrix @ query
            if categories is not None:
                allowed = set(categories)
                mask = np.fromiter((c in allowed for c in self._categories), dtype=bool, count=len(self._ids))
                scores = np.where(mask, scores, -np.inf)
            if threshold is not None:
                scores = np.where(scores >= threshold, scores, -np.inf)
            k = min(top_k, len(self._ids))
            top = np.argpartition(-scores, k - 1)[:k]
            order = sorted(top.tolist(), key=lambda i: (-scores[i], self._ids[i]))
            return [VectorHit(self._ids[i], float(scores[i])) for i in order if np.isfinite(scores[i])]

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._ids)

    def count(self) -> int:
        return len(self._ids)

    def close(self) -> None:
        pass


def _unit(vector: np.ndarray, dim: int) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32).reshape(-1)
    if array.shape[0] != dim:
        raise ValueError(f"vector has {array.shape[0]} dimensions, the store holds {dim}")
    norm = float(np.linalg.norm(array))
    return array / norm if norm else array
