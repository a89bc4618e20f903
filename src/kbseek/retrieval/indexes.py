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
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kbseek.core.analysis import Analyzer, normalize
from kbseek.core.clauses import cjk_share
from kbseek.core.keywords import KeywordIndex
from kbseek.core.lexical import BM25Index
from kbseek.core.models import Chunk, DocumentCard
from kbseek.ports import IndexSource
from kbseek.retrieval.index_copy import Change, IndexCopy, dictionary_words, lexical_text
from kbseek.retrieval.rwlock import TwoCopies
from kbseek.retrieval.vector_lane import DENSE_RETRY_MAX_S, DENSE_RETRY_S, VectorLane
from kbseek.retrieval.vectors import DeferredDense, DenseIndex

log = logging.getLogger("kbseek")


class _GiveWay(Exception):
    """A reader's build yields to a writer of this process (see ``Indexes._prepare``)."""


class Indexes:
    """L0 + BM25 over one repository; ``refresh`` is cheap when nothing changed (one query).

    Two copies are kept: lookups read the active one while a refresh builds the other (loading, analysing,
    indexing), so a refresh never blocks a lookup; the new version goes live with a pointer swap, and the old
    copy catches up at the start of the next refresh (``rwlock.TwoCopies``). The cost is a second copy of the
    lexical indexes in memory (about 3 KB per chunk) and applying each change twice. Each refresh hands what
    changed to the dense lane (``vectors``, a ``vector_lane.VectorLane``).
    """

    def __init__(
        self,
        repository: IndexSource,
        *,
        k1: float = 1.2,
        b: float = 0.75,
        dense: DenseIndex | DeferredDense | None = None,
        retry_s: float = DENSE_RETRY_S,
        retry_max_s: float = DENSE_RETRY_MAX_S,
    ) -> None:
        self.repository = repository
        self.counters = {"analysed": 0, "from_cache": 0}  # chunks, since start
        self._copies = TwoCopies(IndexCopy(k1, b), IndexCopy(k1, b))
        self._behind: list[Change] = []  # applied to the active copy, not yet to the standby one
        self._building = threading.Lock()  # one refresh at a time
        self._writers, self._writers_lock = 0, threading.Lock()  # threads in refresh(wait=True)
        # observes a refresh, in the thread doing it: "analysing" (database read), "prepared" (built, not yet live)
        self.on_stage: Callable[[str], None] | None = None
        self.vectors = VectorLane(dense, repository, self._live_documents, retry_s=retry_s, retry_max_s=retry_max_s)

    def _live_documents(self) -> set[str]:
        with self._copies.read() as current:  # pinned: a refresh cannot change it while it is read
            return set(current.documents)

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
    def chinese_share(self) -> float:
        """The mean share of Chinese letters over the live chunks (0: all English, 1: all Chinese)."""
        return self._copies.current().chinese_share

    @property
    def chinese_chunks(self) -> float:
        """The share of live chunks written mostly in Chinese (half their letters or more)."""
        return self._copies.current().chinese_chunks

    def chinese_of(self, chunk_ids: Iterable[str]) -> list[float]:
        """Each live chunk's share of Chinese letters (``cjk_share`` of its text, kept since its refresh)."""
        shares = self._copies.current().chunk_chinese
        return [shares[c] for c in chunk_ids if c in shares]

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
        if self.repository.version() == self.version and not force and not self.vectors.retry_due():
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

    def _refresh(self, force: bool, reader: bool = False) -> bool:
        version = self.repository.version()
        if version == self.version and not force and not self.vectors.retry_due():
            return False
        started = time.perf_counter()
        first_load = self.version < 0
        build = self._copies.standby()  # waits for the last readers of the version before, never for new ones
        for behind in self._behind:
            build.apply(behind)
        self._behind.clear()
        change, fresh = self._prepare(build, version, first_load, reader)
        if change is None:  # nothing new: only vectors left pending are retried
            self.vectors.after_refresh(first_load, [], [], [])
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
        self.vectors.after_refresh(first_load, change.loaded, change.removed_chunks, change.gone)
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
        self, build: IndexCopy, version: int, first_load: bool, reader: bool = False
    ) -> tuple[Change | None, list[tuple[str, str, list[str]]]]:
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
            return (Change(version, [], [], [], words, {}) if version != build.version else None), []
        loaded = self.repository.load(changed) if changed else []  # every read of the database comes first:
        cached = self.repository.tokens(None if first_load else changed) if loaded else {}  # it may fail
        dropped = set(gone) | {d.id for d in loaded}
        kept = [d for d in build.documents.values() if d.id not in dropped]
        removed = [c for d in dropped if d in build.documents for c in build.documents[d].chunk_ids]
        words = [w for d in kept for w in dictionary_words(d)] + [w for d in loaded for w in dictionary_words(d)]
        analyser, old_words, old_version = build.analyzer, build.analyzer.words, build.analyzer.version
        changed_words = analyser.set_words(words)
        change = Change(version, gone, loaded, removed, sorted(analyser.words), {})
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
                    change.chinese[chunk.id] = cjk_share(chunk.text)
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
        self, build: IndexCopy, kept: list[DocumentCard], words: set[str], change: Change, give_way: Callable[[], bool]
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

    # -- the dense lane (``vector_lane``) -------------------------------------------------------------

    @property
    def dense(self) -> DenseIndex | DeferredDense | None:
        return self.vectors.dense

    @property
    def dense_available(self) -> bool:
        """Whether the dense lane can answer (an embedding server down since start-up cannot)."""
        return self.vectors.available

    def vectors_in_background(self) -> None:
        """From now on, changed documents get their vectors from a worker thread (see ``vector_worker``)."""
        self.vectors.in_background()

    def wait_for_vectors(self, timeout: float = 60.0) -> bool:
        return self.vectors.wait(timeout)

    def close(self) -> None:
        """Stop the vector worker between two model calls; what it has not embedded stays pending."""
        self.vectors.close()

    def dense_status(self) -> dict[str, Any]:
        return self.vectors.status()

    @property
    def dense_pending(self) -> int:
        """Documents the lexical lanes serve but the dense lane does not yet (queued, or embedding failed)."""
        return len(self.vectors.pending_ids())

    def vector_status(self, document_id: str) -> str:
        """``indexed``, ``pending`` (queued or being embedded; retried after a failure) or ``none`` (no dense lane)."""
        if self.dense is None:
            return "none"
        return "pending" if document_id in self.vectors.pending_ids() else "indexed"
