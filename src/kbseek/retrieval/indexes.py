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
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kbseek.adapters.sql.repository import SqlRepository
from kbseek.core.analysis import Analyzer, normalize
from kbseek.core.keywords import KeywordIndex
from kbseek.core.lexical import BM25Index
from kbseek.core.models import Chunk, DocumentCard, StoredDocument
from kbseek.errors import EmbeddingStopped, KbseekError
from kbseek.retrieval.rwlock import TwoCopies
from kbseek.retrieval.vector_worker import DenseWorker
from kbseek.retrieval.vectors import DeferredDense, DenseIndex

log = logging.getLogger("kbseek")


MAX_TERM_CHARS = 40
DENSE_RETRY_S = 5.0  # after a failed embedding, the first wait before a retry; it doubles on each failure
DENSE_RETRY_MAX_S = 300.0


def dictionary_words(doc: StoredDocument | DocumentCard) -> list[str]:
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


@dataclass(slots=True)
class _Change:
    """One refresh, computed once and applied to each copy of the indexes."""

    version: int
    gone: list[str]  # document ids
    loaded: list[StoredDocument]  # added or changed
    removed_chunks: list[str]  # of the documents gone or changed
    words: list[str]  # the whole user dictionary
    tokens: dict[str, list[str]]  # chunk id -> tokens, for every chunk of ``loaded``
    retokenised: dict[str, list[str]] = field(default_factory=dict)  # kept chunks the dictionary change affects
    reentries: list[str] = field(default_factory=list)  # kept documents whose L0 entry contains a changed word
    retag_from: str | None = None  # the analyser version whose cached tokens stay valid under the new one


class _GiveWay(Exception):
    """A reader's build yields to a writer of this process (see ``Indexes._prepare``)."""


class _Copy:
    """One complete copy of the in-memory indexes (see ``rwlock.TwoCopies``)."""

    def __init__(self, k1: float, b: float) -> None:
        self.analyzer = Analyzer()
        self.keywords = KeywordIndex(self.analyzer)
        self.bm25 = BM25Index(k1=k1, b=b)
        self.documents: dict[str, DocumentCard] = {}
        self.chunks: dict[str, Chunk] = {}
        self.version = -1

    def apply(self, change: _Change) -> None:
        for doc_id in [*change.gone, *(d.id for d in change.loaded)]:
            self._remove(doc_id)
        self.analyzer.set_words(change.words)
        for doc_id in change.reentries:
            self.keywords.upsert(self.documents[doc_id])
        for chunk_id, tokens in change.retokenised.items():
            self.bm25.add(chunk_id, tokens, group=self.chunks[chunk_id].category)
        for doc in change.loaded:
            card = self.documents[doc.id] = DocumentCard(
                id=doc.id,
                path=doc.path,
                title=doc.title,
                summary=doc.summary,
                keywords=doc.keywords,
                category=doc.category,
                outline=doc.outline,
                fields=doc.frontmatter,
                content_hash=doc.content_hash,
                chunk_ids=tuple(c.id for c in doc.chunks),
            )
            self.keywords.upsert(card)
            for chunk in doc.chunks:
                self.chunks[chunk.id] = chunk
                self.bm25.add(chunk.id, change.tokens[chunk.id], group=doc.category)
        self.version = change.version

    def _remove(self, doc_id: str) -> None:
        doc = self.documents.pop(doc_id, None)
        if doc is None:
            return
        self.keywords.remove(doc_id)
        self.bm25.remove(doc.chunk_ids)
        for chunk_id in doc.chunk_ids:
            self.chunks.pop(chunk_id, None)


class Indexes:
    """L0 + BM25 over one repository; ``refresh`` is cheap when nothing changed (one query).

    Two copies are kept: lookups read the active one while a refresh builds the other (loading, analysing,
    indexing), so a refresh never blocks a lookup; the new version goes live with a pointer swap, and the old
    copy catches up at the start of the next refresh (``rwlock.TwoCopies``). The cost is a second copy of the
    lexical indexes in memory (about 3 KB per chunk) and applying each change twice.
    """

    def __init__(
        self,
        repository: SqlRepository,
        *,
        k1: float = 1.2,
        b: float = 0.75,
        dense: DenseIndex | DeferredDense | None = None,
        retry_s: float = DENSE_RETRY_S,
        retry_max_s: float = DENSE_RETRY_MAX_S,
    ) -> None:
        self.repository = repository
        self.dense = dense
        self.counters = {"analysed": 0, "from_cache": 0}  # chunks, since start
        self._copies = TwoCopies(_Copy(k1, b), _Copy(k1, b))
        self._behind: list[_Change] = []  # applied to the active copy, not yet to the standby one
        self._building = threading.Lock()  # one refresh at a time
        self._writers, self._writers_lock = 0, threading.Lock()  # threads in refresh(wait=True)
        # observes a refresh, in the thread doing it: "analysing" (database read), "prepared" (built, not yet live)
        self.on_stage: Callable[[str], None] | None = None
        self._dense_pending: set[str] = set()
        self._dense_synced = False  # a first full sync of the vector store has happened
        self._worker: DenseWorker | None = None
        self._retry_s, self._retry_max_s = retry_s, retry_max_s
        self._dense_delay = retry_s
        self._dense_retry_at = 0.0

    # -- what readers see: the copy they pinned (inside a snapshot), else the active one -----------------

    @property
    def analyzer(self) -> Analyzer:
        return self._copies.current().analyzer

    @property
    def keywords(self) -> KeywordIndex:
        return self._copies.current().keywords

    @property
    def bm25(self) -> BM25Index:
        return self._copies.current().bm25

    @property
    def documents(self) -> dict[str, DocumentCard]:
        return self._copies.current().documents

    @property
    def chunks(self) -> dict[str, Chunk]:
        return self._copies.current().chunks

    @property
    def version(self) -> int:
        return self._copies.current().version

    @property
    def index_version(self) -> str:
        """Database change counter + analyser rules and dictionary: names what was indexed."""
        current = self._copies.current()
        return f"{current.version}:{current.analyzer.version}"

    def set_bm25(self, *, k1: float, b: float) -> None:
        """New BM25 parameters (they apply at query time) in both copies."""
        for copy in self._copies.both:
            copy.bm25.k1, copy.bm25.b = k1, b

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Refresh unless another thread is refreshing already, then read: the block sees one consistent
        version, and never waits for a refresh under way (it reads the version before it)."""
        if not self._copies.reading_here():
            self.refresh(wait=False)
        with self._copies.read():
            yield

    # -- refresh -------------------------------------------------------------------------------------

    def refresh(self, *, force: bool = False, wait: bool = True) -> bool:
        """Bring the indexes up to the database's version; returns whether anything changed.

        Inside a :meth:`snapshot` it does nothing: a reader keeps the version it started with. With
        ``wait=False`` it also does nothing while another thread refreshes (that one publishes soon)."""
        if self._copies.reading_here():
            return False
        if self.repository.version() == self.version and not force and not self._retry_due():
            return False  # the common case, without waiting for anyone
        if not wait:  # a reader: it builds only what no writer of this process is about to build
            if self._writers or not self._building.acquire(blocking=False):
                return False
            try:
                return self._refresh(force, reader=True)
            except _GiveWay:
                return False
            finally:
                self._building.release()
        with self._writers_lock:
            self._writers += 1
        try:
            with self._building:
                return self._refresh(force)
        finally:
            with self._writers_lock:
                self._writers -= 1

    def _retry_due(self) -> bool:
        """Vectors left pending by a failure are due for a retry here (the worker, when there is one, retries)."""
        return self._worker is None and (due := self._retry_in()) is not None and due <= 0

    def _refresh(self, force: bool, reader: bool = False) -> bool:
        version = self.repository.version()
        if version == self.version and not force and not self._retry_due():
            return False
        started = time.perf_counter()
        first_load = self.version < 0
        build = self._copies.standby()  # waits for the last readers of the version before, never for new ones
        for change in self._behind:
            build.apply(change)
        self._behind.clear()
        change, fresh = self._prepare(build, version, first_load, reader)
        if change is None:  # nothing new: only vectors left pending are retried
            self._sync_after(first_load, [], [], [])
            return False
        if self.on_stage is not None:
            self.on_stage("prepared")
        build.apply(change)
        self._copies.publish()
        if first_load:  # nobody reads yet: bring the other copy along now rather than at the first upload
            self._copies.standby().apply(change)
        else:
            self._behind.append(change)
        if change.retag_from is not None:
            self.repository.retag_tokens(change.retag_from, build.analyzer.version)
        self.repository.save_tokens(fresh)
        self._sync_after(first_load, change.loaded, change.removed_chunks, change.gone)
        log.info(
            "indexes refreshed: version=%d added/changed=%d removed=%d re-analysed=%d documents=%d chunks=%d "
            "time=%.0fms",
            version,
            len(change.loaded),
            len(change.gone),
            len(change.retokenised),
            len(build.documents),
            len(build.chunks),
            (time.perf_counter() - started) * 1000,
        )
        return True

    def _prepare(
        self, build: _Copy, version: int, first_load: bool, reader: bool = False
    ) -> tuple[_Change | None, list[tuple[str, str, list[str]]]]:
        """The change from ``build`` (the standby copy, equal to the active one and read by nobody) to the
        database: documents loaded and analysed, the dictionary and what it re-analyses. Its analyser takes the
        new dictionary here; the rest of the copy changes in ``apply``.

        A ``reader`` building (it saw a new version first) gives way as soon as a writer of this process asks
        to refresh (``_GiveWay``): that writer builds, and the reader answers from the version it has."""
        stored = self.repository.states()
        gone = [doc_id for doc_id in build.documents if doc_id not in stored]
        changed = [
            d for d, digest in stored.items() if d not in build.documents or build.documents[d].content_hash != digest
        ]
        if not gone and not changed:
            words = sorted(build.analyzer.words)
            return (_Change(version, [], [], [], words, {}) if version != build.version else None), []
        loaded = self.repository.load(changed) if changed else []  # every read of the database comes first:
        cached = self.repository.tokens(None if first_load else changed) if loaded else {}  # it may fail
        dropped = set(gone) | {d.id for d in loaded}
        kept = [d for d in build.documents.values() if d.id not in dropped]
        removed = [c for d in dropped if d in build.documents for c in build.documents[d].chunk_ids]
        words = [w for d in kept for w in dictionary_words(d)] + [w for d in loaded for w in dictionary_words(d)]
        analyser, old_words, old_version = build.analyzer, build.analyzer.words, build.analyzer.version
        changed_words = analyser.set_words(words)
        change = _Change(version, gone, loaded, removed, sorted(analyser.words), {})
        fresh: list[tuple[str, str, list[str]]] = []
        give_way = (lambda: self._writers > 0) if reader else (lambda: False)
        if self.on_stage is not None:
            self.on_stage("analysing")
        try:
            if changed_words and kept:
                change.retag_from = old_version
                fresh += self._reanalyse(build, kept, changed_words, change, give_way)
            for doc in loaded:
                for chunk in doc.chunks:
                    if give_way():  # per chunk: one document can hold 2,000
                        raise _GiveWay
                    hit = cached.get(chunk.id)
                    if hit is not None and hit[0] == analyser.version:
                        change.tokens[chunk.id] = hit[1]
                    else:
                        change.tokens[chunk.id] = tokens = analyser.tokens(lexical_text(chunk))
                        fresh.append((chunk.id, analyser.version, tokens))
        except BaseException:
            analyser.set_words(old_words)  # the copy stays as it was: the next refresh starts from it again
            raise
        analysed = len(fresh) - len(change.retokenised)
        self.counters["analysed"] += analysed
        self.counters["from_cache"] += len(change.tokens) - analysed
        return change, fresh

    def _reanalyse(
        self, build: _Copy, kept: list[DocumentCard], words: set[str], change: _Change, give_way: Callable[[], bool]
    ) -> list[tuple[str, str, list[str]]]:
        """Re-tokenise what the dictionary change can affect: texts containing a changed word."""
        fresh = []
        for doc in kept:
            entry_text = normalize(" ".join([doc.title, doc.summary, *doc.keywords]))
            if any(w in entry_text for w in words):
                change.reentries.append(doc.id)
            for chunk_id in doc.chunk_ids:
                if give_way():
                    raise _GiveWay
                text = lexical_text(build.chunks[chunk_id])
                if any(w in normalize(text) for w in words):
                    change.retokenised[chunk_id] = tokens = build.analyzer.tokens(text)
                    fresh.append((chunk_id, build.analyzer.version, tokens))
        log.info("dictionary changed (%d words): re-analysed %d chunks", len(words), len(fresh))
        return fresh

    # -- the dense lane ------------------------------------------------------------------------------

    def _sync_after(
        self, first_load: bool, loaded: list[StoredDocument], removed_chunks: list[str], gone: list[str]
    ) -> None:
        if self.dense is None:
            return
        if self._worker is not None and not first_load:
            self._worker.submit(loaded, removed_chunks, gone)
        else:
            self._sync_dense(loaded, removed_chunks, gone, first_load)

    def _sync_dense(
        self, loaded: list[StoredDocument], removed_chunks: list[str], gone: list[str], first_load: bool
    ) -> None:
        """Vectors for this refresh, plus any left pending by a failed one; an embedding or vector-store failure
        leaves the lexical lanes serving the documents and retries later, the delay doubling each time up to
        ``retry_max_s`` (the records say so). An embedding server that was down at start-up is connected here."""
        assert self.dense is not None
        ids = {d.id for d in loaded}
        with self._copies.read() as current:  # the worker thread calls this too
            known = set(current.documents)
        try:
            if isinstance(self.dense, DeferredDense):
                stopping = self.dense.stopping
                self.dense = self.dense.connect()
                if stopping.is_set():
                    self.dense.stopping.set()
            retry = (
                [d for d in self.repository.load(sorted(self._dense_pending - ids)) if d.id in known]
                if self._dense_pending
                else []
            )
            new_ids = {c.id for d in loaded for c in d.chunks}
            self.dense.sync(
                [*loaded, *retry],
                [c for c in removed_chunks if c not in new_ids],
                first=first_load or not self._dense_synced,
                removed_documents=gone,
            )
        except KbseekError as exc:
            self._dense_pending |= (ids | known) if not self._dense_synced else ids
            if isinstance(exc, EmbeddingStopped):
                log.info(
                    "dense lane: stopped with %d document(s) pending; the next start embeds them",
                    len(self._dense_pending),
                )
                return
            self._dense_retry_at = time.monotonic() + self._dense_delay
            log.warning(
                "dense lane: %d document(s) not indexed (%s); the lexical lanes serve them, retrying in %.0fs",
                len(self._dense_pending),
                exc,
                self._dense_delay,
            )
            self._dense_delay = min(self._dense_delay * 2, self._retry_max_s)
            return
        self._dense_pending.clear()
        self._dense_synced = True
        self._dense_delay = self._retry_s

    def _retry_in(self) -> float | None:
        """Seconds until failed vectors are due for a retry; ``None`` when nothing waits."""
        if not self._dense_pending and (self.dense is None or self.dense.available):
            return None  # nothing failed, or an embedding server still to be reached at all
        return max(0.0, self._dense_retry_at - time.monotonic())

    def vectors_in_background(self) -> None:
        """From now on, changed documents get their vectors from a worker thread (see ``vector_worker``), which
        also retries failed ones when they are due."""
        if self.dense is not None and self._worker is None:
            self._worker = DenseWorker(
                lambda loaded, removed, gone: self._sync_dense(loaded, removed, gone, False), retry_in=self._retry_in
            )

    def wait_for_vectors(self, timeout: float = 60.0) -> bool:
        return self._worker.wait(timeout) if self._worker is not None else True

    def close(self) -> None:
        """Stop the vector worker between two model calls; what it has not embedded stays pending."""
        if self.dense is not None:
            self.dense.stopping.set()
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    @property
    def dense_available(self) -> bool:
        """Whether the dense lane can answer (an embedding server down since start-up cannot)."""
        return self.dense is not None and self.dense.available

    def dense_status(self) -> dict[str, Any]:
        """The dense lane for ``/ready``: ``ok`` is false while its embedding server has not answered since
        start-up (the lexical lanes answer meanwhile), with the reason and when it is tried again."""
        dense = self.dense
        if dense is None:
            return {"ok": True, "kind": "none (lexical only)"}
        status: dict[str, Any] = {
            "ok": dense.available,
            "store": dense.store.name if dense.available else None,
            "model": dense.model_id,
            "fallback": dense.fallback,
            "documents_pending": self.dense_pending,
        }
        if not dense.available:
            due = self._retry_in()
            status |= {"reason": dense.reason, "retry_in_s": round(due, 1) if due is not None else 0}
        return status

    @property
    def dense_pending(self) -> int:
        """Documents the lexical lanes serve but the dense lane does not yet (queued, or embedding failed)."""
        return len(self._pending_ids())

    def _pending_ids(self) -> set[str]:
        pending = self._dense_pending | (self._worker.pending() if self._worker is not None else set())
        return pending & set(self._copies.active.documents)  # a document deleted meanwhile waits for nothing

    def vector_status(self, document_id: str) -> str:
        """``indexed``, ``pending`` (queued or being embedded; retried after a failure) or ``none`` (no dense lane)."""
        if self.dense is None:
            return "none"
        return "pending" if document_id in self._pending_ids() else "indexed"
