"""The in-process exact vector store: a numpy matrix, searched by one matrix-vector product."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from threadpoolctl import ThreadpoolController

from kbseek.ports import VectorHit, VectorRecord

_BLAS = ThreadpoolController()
ROUGH_ERROR = 1e-5  # far above a float32 cosine's error (~2e-7): rows this close to the k-th are scored again exactly


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
        self._blocks: list[np.ndarray] = []  # rows added since the matrix was last joined (``_joined``)
        self._ids: list[str] = []
        self._row: dict[str, int] = {}
        self._categories: list[str] = []

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        if not records:
            return
        vectors = np.vstack([_unit(r.vector, self.dim) for r in records])
        with self._lock:
            self.delete([r.chunk_id for r in records])
            self._blocks.append(vectors)  # joined once, when next read: a refresh adds a million in blocks
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
            self._matrix = self._joined()[keep]
            self._ids = [self._ids[i] for i in keep]
            self._categories = [self._categories[i] for i in keep]
            self._row = {cid: i for i, cid in enumerate(self._ids)}

    def search(
        self,
        vector: np.ndarray,
        *,
        top_k: int,
        categories: Sequence[str] | None = None,
        threshold: float | None = None,
    ) -> list[VectorHit]:
        query = _unit(vector, self.dim)
        # One BLAS thread: a multi-threaded mat-vec leaves OpenBLAS threads spinning, and on 2 cores they starve
        # the embedder's OpenMP threads in the next query (10k chunks: lookup p50 31.6 -> 14.8 ms, p95 112 -> 26 ms).
        with self._lock, _BLAS.limit(limits=1, user_api="blas"):
            if not self._ids:
                return []
            matrix = self._joined()
            rough = matrix @ query
            if categories is not None:
                allowed = set(categories)
                mask = np.fromiter((c in allowed for c in self._categories), dtype=bool, count=len(self._ids))
                rough = np.where(mask, rough, -np.inf)
            k = min(top_k, len(self._ids))
            kth = _kth_largest(rough, k)
            near = np.flatnonzero(rough >= kth - ROUGH_ERROR if np.isfinite(kth) else np.isfinite(rough))
            # A float32 mat-vec's last bits depend on where a row sits in the matrix (BLAS works on blocks of rows:
            # up to 2.4e-7 on the example knowledge base), so a chunk's cosine would depend on what else is stored
            # and in which order. The candidates are scored again in float64 and rounded to float32: a cosine is
            # then a function of the two vectors alone, and equal vectors rank by id.
            exact = (matrix[near].astype(np.float64) @ query.astype(np.float64)).astype(np.float32)
            if threshold is not None:
                near, exact = near[exact >= threshold], exact[exact >= threshold]
            order = sorted(range(len(near)), key=lambda j: (-exact[j], self._ids[near[j]]))[:k]
            return [VectorHit(self._ids[near[j]], float(exact[j])) for j in order]

    def _joined(self) -> np.ndarray:
        """The matrix with the blocks added since joined to it (called holding the lock)."""
        if self._blocks:
            self._matrix = np.vstack([self._matrix, *self._blocks])
            self._blocks = []
        return self._matrix

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._ids)

    def count(self) -> int:
        return len(self._ids)

    def close(self) -> None:
        pass


def _kth_largest(values: np.ndarray, k: int, sample: int = 1024) -> np.floating:
    """``np.partition(values, n - k)[n - k]``, selecting among fewer values: the k-th largest of the first
    ``sample`` is at most the k-th largest of all, so nothing below it can be the answer (10k rows: 55 -> 15 us)."""
    if len(values) <= 2 * sample or k > sample // 4:
        return np.partition(values, len(values) - k)[len(values) - k]
    bound = np.partition(values[:sample], sample - k)[sample - k]
    kept = values[~(values < bound)]  # NaN is kept, as partition counts it above everything
    return np.partition(kept, len(kept) - k)[len(kept) - k]  # a float32 still: ``kth - ROUGH_ERROR`` is, too


def _unit(vector: np.ndarray, dim: int) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32).reshape(-1)
    if array.shape[0] != dim:
        raise ValueError(f"vector has {array.shape[0]} dimensions, the store holds {dim}")
    wide = array.astype(np.float64)  # a float32 norm's last bits depend on the CPU's vector width
    norm = float(np.sqrt(np.dot(wide, wide)))
    return (wide / norm).astype(np.float32) if norm else array
