"""The in-memory indexes (L0 keywords, BM25), derived from the database and kept in step with it.

Every change to documents bumps a version counter in the database; ``refresh`` compares it with the
version the indexes were built from and applies only the difference (documents added, changed or
removed), so several processes sharing one database stay fresh too. When the user dictionary
(keywords and titles) changes, only chunks that contain an added or removed word are re-analysed.
Analysed tokens are cached in ``chunk_tokens`` under the analyser version (rules + dictionary), so a
restart or a second evaluation run on the same corpus analyses nothing again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kbseek.adapters.sql.repository import SqlRepository
from kbseek.core.analysis import Analyzer, normalize
from kbseek.core.keywords import KeywordEntry, KeywordIndex
from kbseek.core.lexical import BM25Index
from kbseek.core.models import Chunk, StoredDocument
from kbseek.dense import DenseIndex
from kbseek.dense_worker import DenseWorker
from kbseek.errors import KbseekError
from kbseek.rwlock import ReadWriteLock

log = logging.getLogger("kbseek")


@dataclass(frozen=True, slots=True)
class IndexedDocument:
    """What search results need of a document, held in memory."""

    id: str
    path: str
    title: str
    summary: str
    category: str
    keywords: tuple[str, ...]
    content_hash: str
    chunk_ids: tuple[str, ...]
    outline: tuple[dict[str, Any], ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)  # the frontmatter as written


MAX_TERM_CHARS = 40
WARM_LIMIT = 50  # changed documents embedded ahead of the write lock; more is a bulk load
DENSE_RETRY_S = 30  # after a failed embedding, how long the lexical lanes alone serve new documents


def dictionary_words(doc: StoredDocument | IndexedDocument) -> list[str]:
    """User-dictionary terms a document contributes: its keywords, and its title when the title
    is one term (no spaces, at most 20 characters, e.g. ``支付网关``); sentences are not terms."""
    terms = [k for k in doc.keywords if len(k) <= MAX_TERM_CHARS]
    title = doc.title.strip()
    if title and len(title) <= 20 and not any(ch.isspace() for ch in title):
        terms.append(title)
    return terms


def lexical_text(chunk: Chunk) -> str:
    """What BM25 indexes for a chunk: its breadcrumb, path stem and text."""
    stem = chunk.source_path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return f"{chunk.breadcrumb}\n{stem}\n{chunk.text}"


class Indexes:
    """L0 + BM25 over one repository; ``refresh`` is cheap when nothing changed (one query)."""

    def __init__(self, repository: SqlRepository, *, k1: float = 1.2, b: float = 0.75,
                 dense: DenseIndex | None = None) -> None:
        self.repository = repository
        self.dense = dense
        self.analyzer = Analyzer()
        self.keywords = KeywordIndex(self.analyzer)
        self.bm25 = BM25Index(k1=k1, b=b)
        self.documents: dict[str, IndexedDocument] = {}
        self.chunks: dict[str, Chunk] = {}
        self.version = -1
        self.counters = {"analysed": 0, "from_cache": 0}  # chunks, since start
        self._lock = ReadWriteLock()
        self._dense_pending: set[str] = set()
        self._worker: DenseWorker | None = None
        self._dense_retry_at = 0.0

    @property
    def index_version(self) -> str:
        """Database change counter + analyser rules and dictionary: names what was indexed."""
        return f"{self.version}:{self.analyzer.version}"

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Refresh, then read: the block sees one consistent version while other readers run beside it."""
        if not self._lock.reading_here():
            self.refresh()
        with self._lock.read():
            yield

    def refresh(self, *, force: bool = False) -> bool:
        """Bring the indexes up to the database's version; returns whether anything changed.

        Inside a :meth:`snapshot` it does nothing: a reader keeps the version it started with."""
        if self._lock.reading_here():
            return False
        retry_dense = bool(self._dense_pending) and time.monotonic() >= self._dense_retry_at
        if self.repository.version() == self.version and not force and not retry_dense:
            return False  # the common case, without waiting for readers to leave
        if self._worker is None:
            self._warm_vectors()
        with self._lock.write():
            version = self.repository.version()
            if version == self.version and not force and not self._dense_pending:
                return False
            started = time.perf_counter()
            stored = self.repository.states()
            gone = [doc_id for doc_id in self.documents if doc_id not in stored]
            changed = [d for d, digest in stored.items()
                       if d not in self.documents or self.documents[d].content_hash != digest]
            removed_gone = [c for d in gone for c in self._chunk_ids(d)]
            for doc_id in gone:
                self._remove(doc_id)
            first_load = self.version < 0
            loaded = self.repository.load(changed) if changed else []
            cached = self.repository.tokens(None if first_load else changed) if loaded else {}
            removed_chunks = removed_gone + [c for d in loaded for c in self._chunk_ids(d.id)]
            for doc in loaded:
                self._remove(doc.id)
            words = [w for d in self.documents.values() for w in dictionary_words(d)]
            words += [w for d in loaded for w in dictionary_words(d)]
            old_version = self.analyzer.version
            changed_words = self.analyzer.set_words(words)
            fresh: list[tuple[str, str, list[str]]] = []
            if changed_words and self.documents:
                self.repository.retag_tokens(old_version, self.analyzer.version)
                fresh += self._reanalyse(changed_words)
            for doc in loaded:
                fresh += self._add(doc, cached)
            self.repository.save_tokens(fresh)
            if self.dense is not None and self._worker is not None and not first_load:
                self._worker.submit(loaded, removed_chunks, gone)
            elif self.dense is not None:
                self._sync_dense(loaded, removed_chunks, gone, first_load)
            self.version = version
            log.info(
                "indexes refreshed: version=%d added/changed=%d removed=%d dictionary_changes=%d "
                "documents=%d chunks=%d time=%.0fms",
                version, len(loaded), len(gone), len(changed_words), len(self.documents),
                len(self.chunks), (time.perf_counter() - started) * 1000,
            )
            return True

    def _warm_vectors(self) -> None:
        """Embed changed documents before taking the write lock (vectors land in the cache), so lookups keep
        running while an upload is embedded; the refresh itself then finds every vector cached."""
        if self.dense is None or self.version < 0:  # the first load happens before anyone can ask
            return
        with self._lock.read():
            known = {d: doc.content_hash for d, doc in self.documents.items()}
        changed = [d for d, digest in self.repository.states().items() if known.get(d) != digest]
        if changed and len(changed) <= WARM_LIMIT:  # a first load or a bulk import embeds under the lock
            try:
                self.dense.warm(self.repository.load(changed))
            except KbseekError as exc:
                log.warning("dense lane: could not embed %d changed document(s) ahead: %s", len(changed), exc)

    def _sync_dense(self, loaded: list[StoredDocument], removed_chunks: list[str], gone: list[str],
                    first_load: bool) -> None:
        """Vectors for this refresh, plus any left pending by a failed one; an embedding or vector-store failure
        leaves the lexical lanes serving the documents and retries later (the records say so)."""
        assert self.dense is not None
        ids = {d.id for d in loaded}
        with self._lock.read():  # the worker thread calls this too
            current = set(self.documents)
        retry = [d for d in self.repository.load(sorted(self._dense_pending - ids)) if d.id in current] \
            if self._dense_pending else []
        new_ids = {c.id for d in loaded for c in d.chunks}
        try:
            self.dense.sync([*loaded, *retry], [c for c in removed_chunks if c not in new_ids], first=first_load,
                            removed_documents=gone)
        except KbseekError as exc:
            self._dense_pending |= ids | {d.id for d in retry}
            self._dense_retry_at = time.monotonic() + DENSE_RETRY_S
            log.warning("dense lane: %d document(s) not indexed (%s); the lexical lanes serve them, retrying in %ds",
                        len(self._dense_pending), exc, DENSE_RETRY_S)
            return
        self._dense_pending.clear()

    def vectors_in_background(self) -> None:
        """From now on, changed documents get their vectors from a worker thread (see ``dense_worker``)."""
        if self.dense is not None and self._worker is None:
            self._worker = DenseWorker(lambda loaded, removed, gone: self._sync_dense(loaded, removed, gone, False))

    def wait_for_vectors(self, timeout: float = 60.0) -> bool:
        return self._worker.wait(timeout) if self._worker is not None else True

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    @property
    def dense_pending(self) -> int:
        """Documents the lexical lanes serve but the dense lane does not yet (queued, or embedding failed)."""
        return len(self._pending_ids())

    def _pending_ids(self) -> set[str]:
        pending = self._dense_pending | (self._worker.pending() if self._worker is not None else set())
        with self._lock.read():  # a document deleted meanwhile is no longer waiting for anything
            return pending & set(self.documents)

    def vector_status(self, document_id: str) -> str:
        """``indexed``, ``pending`` (queued or being embedded; retried after a failure) or ``none`` (no dense lane)."""
        if self.dense is None:
            return "none"
        return "pending" if document_id in self._pending_ids() else "indexed"

    def _chunk_ids(self, doc_id: str) -> tuple[str, ...]:
        doc = self.documents.get(doc_id)
        return doc.chunk_ids if doc is not None else ()

    def _add(self, doc: StoredDocument, cached: dict[str, tuple[str, list[str]]]) -> list[tuple[str, str, list[str]]]:
        """Index a document; returns the chunks analysed afresh (for the token cache)."""
        self.documents[doc.id] = IndexedDocument(
            doc.id, doc.path, doc.title, doc.summary, doc.category, doc.keywords,
            doc.content_hash, tuple(c.id for c in doc.chunks), doc.outline, doc.frontmatter,
        )
        self.keywords.upsert(_entry(doc))
        version = self.analyzer.version
        fresh = []
        for chunk in doc.chunks:
            self.chunks[chunk.id] = chunk
            hit = cached.get(chunk.id)
            if hit is not None and hit[0] == version:
                tokens = hit[1]
                self.counters["from_cache"] += 1
            else:
                self.counters["analysed"] += 1
                tokens = self.analyzer.tokens(lexical_text(chunk))
                fresh.append((chunk.id, version, tokens))
            self.bm25.add(chunk.id, tokens, group=doc.category)
        return fresh

    def _remove(self, doc_id: str) -> None:
        doc = self.documents.pop(doc_id, None)
        if doc is None:
            return
        self.keywords.remove(doc_id)
        self.bm25.remove(doc.chunk_ids)
        for chunk_id in doc.chunk_ids:
            self.chunks.pop(chunk_id, None)

    def _reanalyse(self, words: set[str]) -> list[tuple[str, str, list[str]]]:
        """Re-tokenise what the dictionary change can affect: texts containing a changed word."""
        fresh = []
        for doc in self.documents.values():
            entry_text = normalize(" ".join([doc.title, doc.summary, *doc.keywords]))
            if any(w in entry_text for w in words):
                self.keywords.upsert(KeywordEntry(doc.id, doc.path, doc.title, doc.summary, doc.keywords, doc.category))
            for chunk_id in doc.chunk_ids:
                chunk = self.chunks[chunk_id]
                text = lexical_text(chunk)
                if any(w in normalize(text) for w in words):
                    tokens = self.analyzer.tokens(text)
                    self.bm25.add(chunk_id, tokens, group=doc.category)
                    fresh.append((chunk_id, self.analyzer.version, tokens))
        log.info("dictionary changed (%d words): re-analysed %d chunks", len(words), len(fresh))
        return fresh


def _entry(doc: StoredDocument) -> KeywordEntry:
    return KeywordEntry(doc.id, doc.path, doc.title, doc.summary, doc.keywords, doc.category)
