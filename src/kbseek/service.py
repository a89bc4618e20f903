"""``KnowledgeBase``: the one object every edge (CLI, REST, MCP) talks to."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from kbseek.adapters.filestore import FileStore
from kbseek.adapters.sql.audit import AuditStore
from kbseek.adapters.sql.feedback import FeedbackStore
from kbseek.adapters.sql.invocations import InvocationStore
from kbseek.adapters.sql.repository import SqlRepository
from kbseek.adapters.sql.sessions import SessionStore
from kbseek.core.document import keyword_lint
from kbseek.core.models import StoredDocument
from kbseek.core.relevance import Thresholds
from kbseek.core.results import LookupResult, SearchResult
from kbseek.core.rewrite import QueryRewriter, load_synonyms
from kbseek.errors import NotFoundError
from kbseek.home.gitsync import GitSyncReport, sync_git
from kbseek.home.history import DocumentHistory
from kbseek.home.ingest import FileReport, IngestReport
from kbseek.home.repair import drift, repair
from kbseek.home.writelocks import WriteLocks
from kbseek.home.writer import DocumentWriter, ProgressCallback, log_documents_state, log_scan
from kbseek.lookup.config import LookupConfig, fusion_config
from kbseek.lookup.review_desk import ReviewDesk
from kbseek.lookup.tool import IndexRecall, LookupTool
from kbseek.lookup.trace import session_trace
from kbseek.lookup.types import LookupRequest, LookupResponse
from kbseek.observability.logs import request_scope
from kbseek.observability.metrics import Telemetry
from kbseek.observability.readiness import readiness_report
from kbseek.retrieval import recall as retrieval
from kbseek.retrieval.sections import section_reference
from kbseek.settings import Settings
from kbseek.wiring import home_parts, load_reranker, open_indexes

log = logging.getLogger("kbseek")
T = TypeVar("T")


def _alone(method: Callable[..., T]) -> Callable[..., T]:
    """Run a method holding the home alone (``WriteLocks.repairing``): no write, of any process, is half done."""

    @functools.wraps(method)
    def alone(self: KnowledgeBase, *args: Any, **kwargs: Any) -> T:
        with self.writes.repairing():
            return method(self, *args, **kwargs)

    return alone


class KnowledgeBase:
    """Ingest, manage and (in later layers) search one knowledge base.

    >>> import tempfile
    >>> kb = KnowledgeBase.open(Settings(home=tempfile.mkdtemp()))
    >>> kb.upload(b"---\\ntitle: T\\nkeywords: [k]\\nsummary: S\\n---\\n# T\\n\\nbody", "t.md").status
    'added'
    >>> [d.path for d in kb.list_documents()]
    ['general/t.md']
    """

    def __init__(self, settings: Settings, repository: SqlRepository, files: FileStore) -> None:
        self.settings = settings
        self.repository = repository
        self.files = files
        self.writes = WriteLocks(settings.home / "locks")  # writes of one path take turns; a repair runs alone
        self.indexes = open_indexes(settings, repository)  # the embedder and vector store the settings name
        self.reranker = load_reranker(settings)  # None unless reranker_url names an endpoint
        self.sessions = SessionStore(repository.engine)
        self.telemetry = Telemetry()
        self.invocations = InvocationStore(
            repository.engine,
            on_failure=self.telemetry.record_failures.inc,
            retention_days=settings.invocation_retention_days,
            max_rows=settings.invocation_max_rows,
        )
        self.audit = AuditStore(repository.engine)
        self.startup_repair: dict[str, int] = {}  # what KnowledgeBase.open repaired (shown by /ready)
        self._rewriter: tuple[str, QueryRewriter] | None = None
        self.lookup_tool = LookupTool(
            indexes=self.indexes,
            config=LookupConfig.from_settings(settings),
            recall=IndexRecall(self.indexes, self.reranker),
            rewriter=self.rewriter,
            sessions=self.sessions,
            invocations=self.invocations,
            telemetry=self.telemetry,
        )
        self.writer = DocumentWriter(
            repository=repository,
            files=files,
            writes=self.writes,
            audit=self.audit,
            telemetry=self.telemetry,
            settings=settings,
        )
        self.history = DocumentHistory(self.writer)
        self.reviews = ReviewDesk(self, FeedbackStore(repository.engine))  # staleness per owner, readers' feedback

    @classmethod
    def open(
        cls, settings: Settings | None = None, *, migrate_schema: bool = True, read_only: bool = False
    ) -> KnowledgeBase:
        """Connect, migrate, repair drift between the database and the file store, sync scan dirs.

        With ``read_only`` it writes nothing of the knowledge base (``kbseek.home.readonly``): no migration (the schema
        must be current), no repair, no retention pruning, no scan, no cache writes; vectors come from the
        database's embedding cache into the in-process store. That is how a process opens a data home another
        process owns (``kbseek.home.ownership``), and how a check opens it.
        """
        settings = settings or Settings()
        with request_scope():
            started = time.perf_counter()
            kb = cls(*home_parts(settings, migrate_schema=migrate_schema, read_only=read_only))
            if not read_only:
                kb.startup_repair = kb.repair()
                kb.invocations.apply_retention()
            kb.indexes.refresh()
            if settings.vectors_in_background:
                kb.indexes.vectors_in_background()
            if settings.scan_dirs and not read_only:
                report = kb.ingest(list(settings.scan_dirs), prune=settings.scan_prune)
                log_scan(report)
            log.info(
                "knowledge base loaded%s: documents=%d chunks=%d repaired=%s time=%.0fms",
                " read-only" if read_only else "",
                kb.repository.count(),
                kb.repository.chunk_count(),
                kb.startup_repair,
                (time.perf_counter() - started) * 1000,
            )
            if not read_only:  # the owner reports the state of the documents once; readers stay quiet
                log_documents_state(sorted(kb.repository.warnings()), kb.lint())
            return kb

    def close(self) -> None:
        self.indexes.close()
        self.invocations.close()
        if self.indexes.dense is not None:
            self.indexes.dense.close()
        self.repository.engine.dispose()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ingestion -----------------------------------------------------------------------

    def ingest(
        self,
        inputs: list[Path],
        *,
        category: str | None = None,
        prune: bool = False,
        on_file: ProgressCallback | None = None,
    ) -> IngestReport:
        """Ingest files and folders; each file is its own transaction, a failure stops nothing."""
        with request_scope() as request_id:
            started = time.perf_counter()
            report = IngestReport(request_id=request_id)
            self.writer.ingest(inputs, report, category=category, prune=prune, on_file=on_file)
            report.lint = self.lint()
            self.indexes.refresh()
            report.duration_ms = (time.perf_counter() - started) * 1000
            counts = report.counts
            log.info(
                "ingest finished: %s time=%.0fms", " ".join(f"{k}={v}" for k, v in counts.items()), report.duration_ms
            )
            return report

    def ingest_documents(self, documents: Iterable[tuple[str, bytes]], *, origin: str) -> IngestReport:
        """Ingest ``(path, bytes)`` pairs made in memory (e.g. a BEIR corpus); unchanged ones skip.

        ``origin`` names where they came from; each document's origin is ``origin#path``.
        """
        with request_scope() as request_id:
            started = time.perf_counter()
            report = IngestReport(request_id=request_id)
            self.writer.ingest_documents(documents, origin=origin, report=report)
            self.indexes.refresh()
            report.duration_ms = (time.perf_counter() - started) * 1000
            return report

    def sync_git(self, repo: str, *, ref: str = "HEAD", path: str = "", prune: bool = False) -> GitSyncReport:
        """A Git repository's Markdown at ``ref``; only what changed since the last sync (``home.gitsync``)."""
        with request_scope() as request_id:
            home, writer = self.settings.home, self.writer
            report = sync_git(writer, home / "git", repo, ref=ref, subdir=path, prune=prune, request_id=request_id)
            self.indexes.refresh()
            return report

    def upload(self, data: bytes, file_name: str, *, category: str | None = None) -> FileReport:
        """Store one document from bytes as ``{category}/{file_name}`` (what the API's upload does)."""
        with request_scope():
            report = self.writer.upload(data, file_name, category=category)
            self.indexes.refresh()
            return report

    def replace(self, path: str, data: bytes) -> FileReport:
        """New content for the stored document at ``path`` (the API's PUT); its path and category stay.

        A document deleted meanwhile stays deleted: ``NotFoundError``, decided in the write's own transaction."""
        with request_scope():
            report = self.writer.replace(path, data)
            self.indexes.refresh()
            return report

    def delete(self, path: str) -> None:
        """Remove a document: its rows, then its stored original (both while holding the path)."""
        with request_scope():
            self.writer.delete(path)
            self.indexes.refresh()

    def rollback(self, path: str, to: int) -> dict[str, Any]:
        """Version ``to`` of a document back as its newest version, through the write path (``home.history``)."""
        with request_scope():
            shown = self.history.rollback(path, to)
            self.indexes.refresh()
            return shown

    # -- retrieval ----------------------------------------------------------------------

    def fusion_config(self) -> retrieval.FusionConfig:
        return fusion_config(self.settings)

    def search(
        self,
        query: str,
        *,
        top_k: int = 10,
        category: str | None = None,
        policy: str | None = None,
        threshold: float | None = None,
    ) -> SearchResult:
        """Ranked chunks with their lane scores (what ``/api/search/similar`` shows)."""
        return retrieval.search(
            self.indexes,
            query,
            top_k=top_k,
            category=category,
            policy=_recall_policy(policy or self.settings.policy),
            threshold=threshold,
            config=self.fusion_config(),
            reranker=self.reranker,
        )

    def lookup_knowledge(self, request: LookupRequest | dict[str, Any]) -> LookupResponse:
        """The agent tool: levelled, grouped, deduplicated evidence (``kbseek.lookup.tool``)."""
        return self.lookup_tool(request)

    def trace(self, session_id: str) -> dict[str, Any]:
        """A session's diagnosis trace: its calls in order with their evidence, and the documents it has seen."""
        paths = {d.id: d.path for d in self.indexes.documents.values()}
        return session_trace(
            session_id,
            calls=self.invocations.list(session_id=session_id, limit=10_000),
            given=self.sessions.given(session_id),
            paths=paths,
            feedback=self.reviews.feedback(session_id=session_id),
        )

    def relevance_thresholds(self) -> Thresholds:
        """The calibrated thresholds of the embedding model in use (coverage only without one), with setting
        overrides: what gates ``lookup_knowledge``'s answers."""
        return self.lookup_tool.thresholds()

    def rewriter(self) -> QueryRewriter:
        """The query rewriter for the current documents' keywords (rebuilt when they change)."""
        version = self.indexes.index_version
        if self._rewriter is None or self._rewriter[0] != version:
            identifiers = sorted({k for d in self.indexes.documents.values() for k in d.keywords})
            groups = load_synonyms(self.settings.synonyms_file) if self.settings.synonyms_file else []
            self._rewriter = (version, QueryRewriter(identifiers, groups))
        return self._rewriter[1]

    def lookup(
        self,
        query: str,
        *,
        top_k: int = 5,
        policy: str | None = None,
        category: str | None = None,
        explain: bool = False,
    ) -> LookupResult:
        """The ranked recall under ``lookup_knowledge`` (L0 hint and fused chunks, no answer shaping)."""
        policy = _recall_policy(policy or self.settings.policy)
        return retrieval.lookup(
            self.indexes,
            query,
            top_k=top_k,
            policy=policy,
            category=category,
            use_domain_filter=self.settings.domain_filter,
            explain=explain,
            config=self.fusion_config(),
            reranker=self.reranker,
        )

    # -- reads ---------------------------------------------------------------------------

    def get_document(self, path: str, *, with_chunks: bool = True) -> StoredDocument:
        doc = self.repository.get(path, with_chunks=with_chunks)
        if doc is None:
            raise NotFoundError(f"no document with path or id {path!r}", hint="see 'kbseek docs list'")
        return doc

    def list_documents(
        self, *, category: str | None = None, limit: int | None = None, offset: int = 0
    ) -> list[StoredDocument]:
        return self.repository.list(category=category, limit=limit, offset=offset)

    def document_history(self, path: str, version: int | None = None) -> dict[str, Any]:
        """A document's kept versions, oldest first, or (``version``) one of them with its Markdown."""
        return self.history.versions(path) if version is None else self.history.version(path, version)

    def document_diff(self, path: str, a: int, b: int) -> dict[str, Any]:
        return self.history.diff(path, a, b)

    def lint(self) -> list[dict[str, Any]]:
        """Keywords several documents share (``kbseek.core.document.keyword_lint``)."""
        return keyword_lint(self.repository.keywords())

    def stats(self) -> dict[str, int]:
        return {
            "documents": self.repository.count(),
            "chunks": self.repository.chunk_count(),
            "version": self.repository.version(),
        }

    # -- repair --------------------------------------------------------------------------

    def drift(self) -> dict[str, list[str]]:
        """Where the file store differs from the database (the system of record), without changing anything
        (``kbseek.home.repair.drift``)."""
        return drift(self.repository, self.files)

    @_alone
    def repair(self, *, dry_run: bool = False) -> dict[str, int]:
        """Make the file store match the database after a crash (``kbseek.home.repair.repair``), holding the home
        exclusively. Only the owner of the data home repairs (``kbseek.home.ownership``)."""
        return repair(self.repository, self.files, self.settings.orphan_dir, dry_run=dry_run)

    # -- asked by the edges (REST, MCP) ---------------------------------------------------------
    # What the HTTP and MCP interfaces show beyond the methods above, so that they never read the repository,
    # the indexes, the telemetry or the record stores themselves.

    def readiness(self) -> dict[str, Any]:
        """Whether this knowledge base can answer (``/ready``; ``kbseek.observability.readiness``)."""
        indexes = self.indexes
        loaded = {"version": indexes.index_version, "documents": len(indexes.documents), "chunks": len(indexes.chunks)}
        return readiness_report(
            count_documents=self.repository.count,
            vector_store=indexes.dense_status(),
            indexes={"ok": indexes.version >= 0, **loaded},
            repaired=self.startup_repair,
        )

    def metrics_exposition(self) -> bytes:
        """The Prometheus text exposition of this knowledge base's metrics, document and chunk gauges current."""
        self.telemetry.documents.set(len(self.indexes.documents))
        self.telemetry.chunks.set(len(self.indexes.chunks))
        self.telemetry.stale_documents.set(self.reviews.count_stale())
        return self.telemetry.exposition()

    def vector_status(self, document_id: str) -> str:
        """A document's vectors: ``indexed``, ``pending`` (queued or being embedded; retried after a failure) or
        ``none`` (no dense lane)."""
        return self.indexes.vector_status(document_id)

    def categories(self) -> dict[str, int]:
        """Each category with its number of documents, by name."""
        categories = [doc.category for doc in self.list_documents()]
        return {name: categories.count(name) for name in sorted(set(categories))}

    def document_markdown(self, path: str) -> str | None:
        """A document's stored Markdown, frontmatter included (``None``: no document at ``path``)."""
        return self.repository.content(path)

    def section(self, document: str, section: str) -> LookupResponse:
        """One section through ``lookup_knowledge(section=...)`` (the same rendering, budget and trace as a
        lookup), the document named by path, id, file name, stem or title (``sections.resolve_document`` by name).
        ``NotFoundError`` names the documents or the sections there are."""
        with self.indexes.snapshot():  # one consistent version from resolving the name to the answer
            reference = section_reference(self.indexes, document, section)
            return self.lookup_knowledge({"query": section, "section": reference})

    def list_invocations(
        self,
        *,
        session_id: str | None = None,
        since: dt.datetime | None = None,
        level: str | None = None,
        failed: bool = False,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Recorded ``lookup_knowledge`` calls, newest last (``failed``: only those that failed)."""
        return self.invocations.list(
            session_id=session_id, since=since, level=level, success=False if failed else None, limit=limit
        )

    def list_audit(
        self, *, path: str | None = None, since: dt.datetime | None = None, action: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The write audit: who changed which document and when."""
        return self.audit.list(path=path, since=since, action=action, limit=limit)


def _recall_policy(policy: str) -> str:
    """``legacy`` shapes the answer; its recall is the hybrid one."""
    return "hybrid" if policy == "legacy" else policy
