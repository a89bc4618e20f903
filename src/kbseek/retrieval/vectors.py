"""The dense lane (L1): chunk vectors in a vector store, kept in step with the database.

Vectors come from the embedding cache when the same input text was embedded by the same model before
(under any ``embedding_input``), so re-ingesting unchanged chunks embeds nothing. Each model and input
has its own collection; when they differ from the ones the knowledge base last used, that is logged and
the new collection is filled (embedding only the texts not cached), never mixed. The embedder and the
stores are chosen by ``kbseek.wiring``: mode ``auto`` uses Milvus and falls back to the in-process store
when Milvus fails (the fallback is reported in every result); with a local Milvus Lite, queries are
answered by an in-process mirror (Milvus Lite is pure Python and slower: ``docs/benchmarks.md``), Milvus
staying the persistent copy and the path to a server.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from kbseek.core.analysis import spell_out
from kbseek.core.ids import sha256_hex
from kbseek.core.models import Chunk, StoredDocument
from kbseek.core.modes import EMBEDDING_INPUTS
from kbseek.errors import EmbeddingError, EmbeddingStopped, KbseekError, StorageError
from kbseek.ports import Embedder, EmbeddingCache, VectorHit, VectorRecord, VectorStore
from kbseek.retrieval.latent_terms import LatentTerms, has_terms

log = logging.getLogger("kbseek")
INPUT_VARIANTS = EMBEDDING_INPUTS
BATCH = 32
SYNC_BLOCK = 10_000  # chunks whose records a refresh holds at once (a first start sends every vector in these)
TEXT_VECTORS_KEPT = 100_000  # passages whose unit vectors a process keeps for the lanes that read them (~150 MB)


DOCUMENT_PREFIX = "D"  # vector ids of document summaries: "D" + document id (chunk ids are 16 hex)


def summary_input(doc: StoredDocument) -> str:
    """What is embedded for a document with an author-written summary: title, summary, keywords."""
    return f"{doc.title}\n{doc.summary}\n{', '.join(doc.keywords)}"


def has_summary_vector(doc: StoredDocument) -> bool:
    """Only summaries an author wrote are embedded; a derived first line repeats the first chunk."""
    return doc.summary_source == "frontmatter" and bool(doc.summary)


def embedding_input(chunk: Chunk, variant: str = "full") -> str:
    """What is embedded for a chunk: path + title + breadcrumb + text (``full``), or less. ``spelled`` is
    ``breadcrumb`` with the breadcrumb's CamelCase names spelled out (``KubeQuotaAlmostFull (Kube Quota Almost
    Full)``): the model reads such a name in sub-word pieces, so an alert runbook's heading path says little to a
    question in plain words. Measured better ranking on English alert runbooks, but the answerability gate, fitted
    on the plain breadcrumb's cosines, refuses more of their answerable questions: off by default
    (docs/evaluation.md). Never in the text: a runbook body naming ``OutOfMemoryError`` would then match any
    question about memory."""
    if variant == "text":
        return chunk.text
    if variant == "breadcrumb":
        return f"{chunk.breadcrumb}\n{chunk.text}"
    if variant == "spelled":
        return f"{spell_out(chunk.breadcrumb)}\n{chunk.text}"
    return f"{chunk.source_path}\n{chunk.title}\n{chunk.breadcrumb}\n{chunk.text}"


@dataclass(frozen=True, slots=True)
class DenseResult:
    hits: list[VectorHit]
    embed_ms: float
    search_ms: float
    served_by: str
    embedded_chars: int | None = None  # set when the query was cut to the model's window: characters kept
    vector: np.ndarray | None = None  # the query's embedding, for lanes that compare it with other vectors


class DenseIndex:
    """Owns the vector store(s) for one embedder and keeps them equal to the database's chunks.

    ``store`` persists the vectors; ``mirror``, when given, is an in-process copy that answers the queries (the
    wiring gives one beside Milvus Lite). Which stores and which embedder is ``kbseek.wiring``'s choice."""

    def __init__(
        self,
        repository: EmbeddingCache,
        embedder: Embedder,
        store: VectorStore,
        *,
        mirror: VectorStore | None = None,
        variant: str = "full",
        fallback: str | None = None,
        summaries: bool = True,
        terms: bool = False,
    ) -> None:
        if variant not in INPUT_VARIANTS:
            raise ValueError(f"embedding input variant {variant!r} is not one of {', '.join(INPUT_VARIANTS)}")
        self.repository, self.embedder, self.store, self.mirror = repository, embedder, store, mirror
        self.variant, self.fallback, self.summaries = variant, fallback, summaries
        self.counters = {"embedded": 0, "from_cache": 0}
        self.model_id = f"{embedder.model_id}|{variant}"  # the cache key and the collection name
        # a vector depends only on the text it embeds: another input's cached vectors of the same model are read
        # too, so switching ``embedding_input`` embeds only the texts that change
        self._other_inputs = tuple(f"{embedder.model_id}|{v}" for v in INPUT_VARIANTS if v != variant)
        self.stopping = threading.Event()  # set at shutdown: document embedding stops between model calls
        self._text_vectors: dict[str, np.ndarray] = {}
        # the embedder's sparse head, when it has one and the settings ask for it: made after the vectors
        self.terms = LatentTerms(repository, embedder, self.stopping) if terms and has_terms(embedder) else None
        if terms and self.terms is None:
            log.warning("latent_terms is on but embedder %s has no sparse head: no terms lane", embedder.model_id)

    @property
    def reason(self) -> str | None:
        """Why the dense lane cannot answer now: its vector store's server went away (``None`` while it answers)."""
        return getattr(self.store, "unreachable", None)

    @property
    def available(self) -> bool:
        return self.reason is None

    def reconnect_in(self) -> float | None:
        """Seconds until the vector store's server that went away is tried again (``None`` while it answers)."""
        retry_in = getattr(self.store, "retry_in", None)
        return retry_in() if retry_in is not None else None

    def probe(self) -> None:
        """Reach the vector store's server again when that is due; ``StorageError`` while it is away."""
        probe = getattr(self.store, "probe", None)
        if probe is not None:
            probe()

    @property
    def query_store(self) -> VectorStore:
        return self.mirror if self.mirror is not None else self.store

    def sync(
        self,
        loaded: Sequence[StoredDocument],
        removed: Sequence[str],
        *,
        first: bool,
        removed_documents: Sequence[str] = (),
    ) -> None:
        """Apply one refresh: ``loaded`` documents were added or changed, ``removed`` chunk ids and
        ``removed_documents`` (ids) went."""
        started = time.perf_counter()
        if first:
            self._note_model()
        chunks = [c for doc in loaded for c in doc.chunks]
        summarised = [d for d in loaded if self.summaries and has_summary_vector(d)]
        keys = {c.id for c in chunks} | {DOCUMENT_PREFIX + d.id for d in summarised}
        stale = list(removed) + [DOCUMENT_PREFIX + d for d in removed_documents]
        stale += [DOCUMENT_PREFIX + d.id for d in loaded if DOCUMENT_PREFIX + d.id not in keys]
        present: set[str] = set()
        if first:  # what a persistent store already holds is not sent again; its orphans go
            present = self.store.ids()
            stale += sorted(present - keys)  # orphans left by a crash
        for store in self._stores():
            store.delete(stale)
        upserted = 0
        # in blocks: a first start against an empty server sends every vector, and a million records with their
        # vectors as the client's lists of floats at once took more than 21 GB (docs/scaling.md)
        for start in range(0, len(chunks), SYNC_BLOCK):
            upserted += self._upsert(self._records(chunks[start : start + SYNC_BLOCK]), present)
        for start in range(0, len(summarised), SYNC_BLOCK):
            upserted += self._upsert(self._summary_records(summarised[start : start + SYNC_BLOCK]), present)
        if self.terms is not None:
            self.terms.make(chunks)
        if chunks or stale:
            log.info(
                "dense lane: %d chunks upserted, %d deleted, embedded=%d cached=%d in %.0f ms",
                upserted,
                len(stale),
                self.counters["embedded"],
                self.counters["from_cache"],
                (time.perf_counter() - started) * 1000,
            )

    def _upsert(self, records: dict[str, VectorRecord], present: set[str]) -> int:
        """``records`` into the mirror, and those the store does not hold yet (``present``) into the store."""
        if self.mirror is not None:
            self.mirror.upsert(list(records.values()))
        missing = [r for key, r in records.items() if key not in present]
        self.store.upsert(missing)
        return len(missing)

    def _stores(self) -> list[VectorStore]:
        return [self.store] if self.mirror is None else [self.store, self.mirror]

    def _summary_records(self, docs: Sequence[StoredDocument]) -> dict[str, VectorRecord]:
        vectors = self._vectors({DOCUMENT_PREFIX + d.id: summary_input(d) for d in docs})
        return {
            DOCUMENT_PREFIX + d.id: VectorRecord(
                DOCUMENT_PREFIX + d.id,
                vectors[DOCUMENT_PREFIX + d.id],
                d.id,
                d.category,
                d.path,
                d.file_name,
                -1,
                d.chunk_count,
                d.title,
                d.title,
            )
            for d in docs
        }

    def _records(self, chunks: Sequence[Chunk]) -> dict[str, VectorRecord]:
        vectors = self._vectors({c.id: embedding_input(c, self.variant) for c in chunks})
        return {
            c.id: VectorRecord(
                c.id,
                vectors[c.id],
                c.document_id,
                c.category,
                c.source_path,
                c.source_path.rsplit("/", 1)[-1],
                c.index,
                c.total,
                c.title,
                c.breadcrumb,
            )
            for c in chunks
        }

    def _vectors(self, texts: dict[str, str]) -> dict[str, np.ndarray]:
        """Vectors for ``{key: input text}``: from the cache by text hash, else embedded (and cached).

        An embedder with a host-wide document turn (``document_turn``) is asked for it per batch, and the cache is
        read again inside it: another process (a second worker, an ingest) may have made the same vectors while
        this one waited, and then they are not made twice."""
        hashes = {key: sha256_hex(text) for key, text in texts.items()}
        cached = self._cached(list(hashes.values()))
        todo = sorted({h for h in hashes.values() if h not in cached})
        by_hash = {hashes[key]: texts[key] for key in texts}
        stop = {"stop": self.stopping} if getattr(self.embedder, "stoppable", False) else {}
        turn = getattr(self.embedder, "document_turn", None)
        embedded = 0
        for start in range(0, len(todo), BATCH):
            if self.stopping.is_set():  # what is cached stays; the next start embeds the rest
                raise EmbeddingStopped("document embedding stopped: the process is shutting down")
            batch = todo[start : start + BATCH]
            with turn(self.stopping) if turn is not None else contextlib.nullcontext():
                if turn is not None:
                    cached.update(self._cached(batch))
                    batch = [h for h in batch if h not in cached]
                if not batch:
                    continue
                vectors = self.embedder.embed_documents([by_hash[h] for h in batch], **stop)
                fresh = {h: v.astype("<f4").tobytes() for h, v in zip(batch, vectors)}
                self.repository.save_vectors(self.model_id, self.embedder.dim, fresh)  # progress survives a crash
                cached.update(fresh)
            embedded += len(batch)
        self.counters["embedded"] += embedded
        self.counters["from_cache"] += len(texts) - embedded
        return {key: np.frombuffer(cached[hashes[key]], dtype="<f4") for key in texts}

    def _cached(self, hashes: list[str]) -> dict[str, bytes]:
        """Cached vectors by text hash: this input's, else another input's of the same model (one read)."""
        return self.repository.vectors(self.model_id, hashes, self._other_inputs)

    def chunk_vectors(self, chunks: Sequence[Chunk]) -> dict[str, np.ndarray]:
        """Unit vectors of stored chunks, read back from the embedding cache (every stored chunk is in it)."""
        inputs = {c.id: embedding_input(c, self.variant) for c in chunks}
        vectors = self.text_vectors(set(inputs.values()))
        return {cid: vectors[text] for cid, text in inputs.items()}

    def text_vectors(self, texts: set[str]) -> dict[str, np.ndarray]:
        """Unit vectors of passages (section breadcrumbs, chunk inputs): from the embedding cache or embedded, then
        kept per process by text (emptied past ``TEXT_VECTORS_KEPT``, like the heading tokens)."""
        missing = {t: t for t in texts if t not in self._text_vectors}
        if missing:
            if len(self._text_vectors) + len(missing) > TEXT_VECTORS_KEPT:
                self._text_vectors.clear()
            for text, vector in self._vectors(missing).items():
                self._text_vectors[text] = vector / (float(np.linalg.norm(vector)) or 1.0)
        return {t: self._text_vectors[t] for t in texts}

    def _note_model(self) -> None:
        previous = self.repository.meta("embedding_model")
        if previous != self.model_id:
            if previous:
                log.warning(
                    "embedding model changed from %s to %s: chunks are written into a new collection "
                    "(vectors cached for this model under any input are reused, the rest embedded)",
                    previous,
                    self.model_id,
                )
            self.repository.set_meta("embedding_model", self.model_id)

    def search(
        self, query: str, *, top_k: int, categories: Sequence[str] | None = None, threshold: float | None = None
    ) -> DenseResult:
        if self.mirror is None and (self.reconnect_in() or 0) > 0:  # not the model's time for a store that is away
            raise StorageError(self.reason or "the vector store is away")
        started = time.perf_counter()
        fit = getattr(self.embedder, "fit_query", None)
        text = fit(query) if fit is not None else query
        vector = self.embedder.embed_queries([text])[0]
        embedded = time.perf_counter()
        served = self.query_store
        try:
            hits = served.search(vector, top_k=top_k, categories=categories, threshold=threshold)
        except KbseekError as exc:
            if self.mirror is None:
                raise
            log.warning("vector store %s failed (%s); answered from the in-process mirror", served.name, exc)
            served = self.mirror
            hits = served.search(vector, top_k=top_k, categories=categories, threshold=threshold)
        done = time.perf_counter()
        return DenseResult(
            hits,
            round((embedded - started) * 1000, 3),
            round((done - embedded) * 1000, 3),
            served.name,
            len(text) if len(text) < len(query) else None,
            vector,
        )

    def close(self) -> None:
        for store in self._stores():
            store.close()


class DeferredDense:
    """The dense lane of an embedding server that has not answered yet: every search and sync raises
    :class:`EmbeddingError` (the lexical lanes answer; documents stay pending) until :meth:`connect` succeeds,
    which the dense lane tries again with a growing delay (``vector_lane.VectorLane.sync``)."""

    fallback = None
    available = False

    def __init__(
        self,
        embedder: Embedder,
        opener: Callable[[], DenseIndex],
        failure: str,
        *,
        variant: str,
        summaries: bool = True,
    ) -> None:
        self.embedder, self._opener, self.summaries = embedder, opener, summaries
        self.reason = f"embedding server unreachable since start-up ({failure})"
        self.model_id = f"{embedder.model_id}|{variant}"
        self.stopping = threading.Event()

    def connect(self) -> DenseIndex:
        try:
            dense = self._opener()
        except EmbeddingError as exc:
            self.reason = f"embedding server unreachable since start-up ({exc.message})"
            raise
        log.warning("dense lane available: the embedding server answers (model %s)", self.model_id)
        return dense

    def _unavailable(self, *_: object, **__: object) -> NoReturn:
        raise EmbeddingError(f"{self.reason}; retrying in the background")

    search = sync = _unavailable

    @property
    def store(self) -> VectorStore:
        self._unavailable()

    def close(self) -> None:
        pass
