"""``KnowledgeBase``: the one object every edge (CLI, REST, MCP) talks to."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from kbseek.adapters.filestore import FileStore
from kbseek.adapters.sql import migrate
from kbseek.adapters.sql.audit import AuditStore
from kbseek.adapters.sql.engine import make_engine
from kbseek.adapters.sql.invocations import InvocationStore
from kbseek.adapters.sql.repository import SqlRepository
from kbseek.adapters.sql.sessions import SessionStore
from kbseek.core.document import ChunkingConfig, decode_markdown, parse_document, shared_keywords
from kbseek.core.frontmatter import parse_frontmatter
from kbseek.core.ids import sha256_hex
from kbseek.core.models import StoredDocument
from kbseek.core.paths import DEFAULT_CATEGORY, safe_category, upload_path
from kbseek.core.relevance import Thresholds
from kbseek.core.results import LookupResult, SearchResult
from kbseek.core.rewrite import QueryRewriter, load_synonyms
from kbseek.errors import HomeInUse, KbseekError, NotFoundError, StorageError
from kbseek.home.ingest import FileReport, IngestReport, PlannedFile, plan_ingest
from kbseek.home.ownership import owner_of
from kbseek.home.readonly import read_only_parts
from kbseek.home.writelocks import WriteLocks
from kbseek.lookup.config import LookupConfig, fusion_config
from kbseek.lookup.tool import IndexRecall, LookupTool
from kbseek.lookup.types import LookupRequest, LookupResponse
from kbseek.observability.logs import current_actor, current_request_id, request_scope
from kbseek.observability.metrics import Telemetry
from kbseek.observability.redact import redact
from kbseek.retrieval import recall as retrieval
from kbseek.retrieval.sections import section_reference
from kbseek.settings import Settings
from kbseek.wiring import open_indexes

log = logging.getLogger("kbseek")
ProgressCallback = Callable[[FileReport, int, int], None]
T = TypeVar("T")


def _alone(method: Callable[..., T]) -> Callable[..., T]:
    """Run a ``KnowledgeBase`` method holding the home exclusively (``WriteLocks.repairing``): no write of
    this process or another one on the home is half done while it runs, and none starts."""

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
            recall=IndexRecall(self.indexes),
            rewriter=self.rewriter,
            sessions=self.sessions,
            invocations=self.invocations,
            telemetry=self.telemetry,
        )
        self.chunking = ChunkingConfig(
            chunk_size=settings.chunk_size,
            overlap=settings.chunk_overlap,
            max_file_bytes=settings.max_file_bytes,
            max_chunks=settings.max_chunks_per_document,
            max_headings=settings.max_headings_per_document,
            max_keywords=settings.max_keywords_per_document,
            max_frontmatter_values=settings.max_frontmatter_values,
        )

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
            if read_only:
                kb = cls(*read_only_parts(settings))
                repaired: dict[str, int] = {}
            else:
                _refuse_if_owned(settings.home)
                engine = make_engine(settings.database_url)
                if migrate_schema:
                    migrate.upgrade(engine)
                kb = cls(settings, SqlRepository(engine), FileStore(settings.knowledge_base_dir, fsync=settings.fsync))
                repaired = kb.startup_repair = kb.repair()
                kb.invocations.apply_retention()
            kb.indexes.refresh()
            if settings.vectors_in_background:
                kb.indexes.vectors_in_background()
            if settings.scan_dirs and not read_only:
                report = kb.ingest(list(settings.scan_dirs), prune=settings.scan_prune)
                for file in report.files:
                    for warning in file.warnings:
                        log.warning("scan: %s", warning)
                    if file.status == "failed":
                        log.warning("scan: %s failed: %s", file.source, file.reason)
            log.info(
                "knowledge base loaded%s: documents=%d chunks=%d repaired=%s time=%.0fms",
                " read-only" if read_only else "",
                kb.repository.count(),
                kb.repository.chunk_count(),
                repaired,
                (time.perf_counter() - started) * 1000,
            )
            if not read_only:  # the owner reports the state of the documents once; readers stay quiet
                warned = sorted(kb.repository.warnings())
                if warned:
                    log.warning(
                        "%d document(s) have warnings (kbseek docs show PATH): %s", len(warned), ", ".join(warned[:10])
                    )
                for item in kb.lint():  # advice, not trouble: 'kbseek docs lint' and ingest reports show it too
                    log.info("lint: %s", item["message"])
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
            if category is not None:
                category = safe_category(category)
            plan = plan_ingest(inputs)
            for missing in plan.missing:
                report.files.append(
                    FileReport(source=missing, status="failed", reason="no such file or folder", error_code="not_found")
                )
            known = self.repository.hashes()
            total = len(plan.files)
            seen: set[str] = set()
            for done, planned in enumerate(plan.files, 1):
                file_report = self._ingest_file(planned, category, known)
                if file_report.path:
                    seen.add(file_report.path)
                report.files.append(file_report)
                if on_file is not None:
                    on_file(file_report, done, total)
            if prune:
                self._prune(plan.roots, seen, known, report)
                report.prune_skipped = [f"{root}: {why}" for root, why in plan.incomplete.items()]
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
            known = self.repository.hashes()
            for path, data in documents:
                source = f"{origin}#{path}"
                file_report = FileReport(source=source, status="failed", path=path)
                try:
                    self._store_if_changed(data, path, None, source, known, file_report)
                except KbseekError as exc:
                    file_report.reason, file_report.error_code = str(exc), exc.code
                report.files.append(file_report)
            self.indexes.refresh()
            report.duration_ms = (time.perf_counter() - started) * 1000
            return report

    def upload(self, data: bytes, file_name: str, *, category: str | None = None) -> FileReport:
        """Store one document from bytes as ``{category}/{file_name}`` (what the API's upload does)."""
        with request_scope():
            report = FileReport(source=file_name, status="failed")
            try:
                path = self._single_file_path(data, file_name, category)
                report.path = path
                self._store(data, path, category, None, report, source=file_name)
            except KbseekError as exc:
                report.reason, report.error_code = str(exc), exc.code
                log.warning("upload failed: %s", exc)
                self._rejected(report.path or file_name, str(exc), len(data))
            self.indexes.refresh()
            return report

    def replace(self, path: str, data: bytes) -> FileReport:
        """New content for the stored document at ``path`` (the API's PUT); its path and category stay.

        A document deleted meanwhile stays deleted: ``NotFoundError``, decided in the write's own transaction."""
        with request_scope():
            if self.repository.get(path) is None:
                raise _no_document(path)
            report = FileReport(source=path, status="failed", path=path)
            try:
                self._store(data, path, None, None, report, source=path, must_exist=True)
            except NotFoundError:
                raise
            except KbseekError as exc:
                report.reason, report.error_code = str(exc), exc.code
                log.warning("replace failed: %s", exc)
                self._rejected(path, str(exc), len(data))
            self.indexes.refresh()
            return report

    def delete(self, path: str) -> None:
        """Remove a document: its rows, then its stored original (both while holding the path)."""
        with request_scope():
            with self.writes.writing(path):
                if not self.repository.delete(path, audit=self._audit_fields()):
                    raise NotFoundError(f"no document with path {path!r}", hint="see 'kbseek docs list'")
                try:
                    self.files.delete(path)
                except StorageError as exc:  # the document is gone; the next repair moves the file aside
                    log.warning("document deleted, its original stays until the next repair: %s", exc)
            self.telemetry.observe_write("deleted")
            self.indexes.refresh()
            log.info("document deleted: path=%s", path)

    def _ingest_file(
        self, planned: PlannedFile, category: str | None, known: dict[str, tuple[str, str | None]]
    ) -> FileReport:
        source = str(planned.file)
        report = FileReport(source=source, status="failed")
        try:
            data = planned.file.read_bytes()
            if planned.relative is None:
                path = self._single_file_path(data, planned.file.name, category)
            else:
                path = planned.relative
            report.path = path
            self._store_if_changed(data, path, category, source, known, report)
        except OSError as exc:
            report.reason, report.error_code = f"{source}: cannot read: {exc.strerror}", "io_error"
        except KbseekError as exc:
            report.reason, report.error_code = str(exc), exc.code
        if report.status == "failed":
            log.info("ingest failed: %s", report.reason)
            self._rejected(report.path or source, report.reason or "", _size(planned.file))
        return report

    def _store_if_changed(
        self,
        data: bytes,
        path: str,
        category: str | None,
        source: str,
        known: dict[str, tuple[str, str | None]],
        report: FileReport,
    ) -> None:
        stored = known.get(path)
        if stored is not None and stored[0] == sha256_hex(data) and stored[1] == source:
            report.status = "unchanged"
        else:
            self._store(data, path, category, source, report, source=source)

    def _single_file_path(self, data: bytes, file_name: str, category: str | None) -> str:
        if category is None:
            text = decode_markdown(data, source=file_name, max_bytes=self.settings.max_file_bytes)
            category = parse_frontmatter(text, source=file_name, file_name=file_name).category
        return upload_path(file_name, category or DEFAULT_CATEGORY)

    def _store(
        self,
        data: bytes,
        path: str,
        category: str | None,
        origin: str | None,
        report: FileReport,
        *,
        source: str,
        must_exist: bool = False,
    ) -> None:
        timings: dict[str, float] = {}
        doc = parse_document(data, path=path, config=self.chunking, category=category, source=source, timings=timings)
        started = time.perf_counter()
        parse_ms = timings["parse_ms"] + timings["chunk_ms"]
        # The original goes first (atomically), then the database commits: a full disk refuses the write before
        # anything is stored, and a failed commit puts the previous original back. A crash between the two
        # leaves an original ahead of the database, which start-up repair rewrites from the database. All of
        # it holds the path, so another write of it (or a repair) never runs in between.
        with self.writes.writing(path):
            previous = self.files.read(path)
            if previous != data:
                self.files.write(path, data)
            try:
                report.status = self.repository.save(
                    doc, origin=origin, must_exist=must_exist, audit=self._audit_fields(len(data), parse_ms)
                )
                if report.status == "missing":
                    raise _no_document(path)
            except BaseException:
                if previous is None:
                    self.files.delete(path)
                elif previous != data:
                    self.files.write(path, previous)
                raise
        if report.status != "unchanged":
            self.telemetry.observe_write(report.status, parse_ms)
        timings["store_ms"] = round((time.perf_counter() - started) * 1000, 3)
        report.document_id, report.chunks, report.warnings = doc.id, len(doc.chunks), list(doc.warnings)
        report.timings_ms = timings
        log.info(
            "document %s: path=%s chunks=%d parse=%.1fms chunk=%.1fms store=%.1fms",
            report.status,
            path,
            len(doc.chunks),
            timings["parse_ms"],
            timings["chunk_ms"],
            timings["store_ms"],
        )
        for warning in doc.warnings:  # also in the report; start-up scans log them as warnings
            log.info("%s", warning)

    @staticmethod
    def _audit_fields(size_bytes: int | None = None, duration_ms: float | None = None) -> dict[str, Any]:
        actor, key_id = current_actor()
        return {
            "actor": actor,
            "key_id": key_id,
            "request_id": current_request_id(),
            "size_bytes": size_bytes,
            "duration_ms": duration_ms,
        }

    def _rejected(self, path: str, reason: str, size_bytes: int | None) -> None:
        fields = self._audit_fields(size_bytes)
        self.audit.record_rejection(
            path,
            reason,
            actor=fields["actor"],
            key_id=fields["key_id"],
            request_id=fields["request_id"],
            size_bytes=size_bytes,
        )
        self.telemetry.observe_write("rejected")

    def _prune(
        self, roots: list[Path], seen: set[str], known: dict[str, tuple[str, str | None]], report: IngestReport
    ) -> None:
        for root in roots:
            prefix = f"{root}/"
            for path, (_, origin) in sorted(known.items()):
                if origin and origin.startswith(prefix) and path not in seen and not Path(origin).exists():
                    self.delete(path)
                    report.pruned.append(path)
                    log.info("pruned: %s (its file %s is gone)", path, origin)

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
        )

    def lookup_knowledge(self, request: LookupRequest | dict[str, Any]) -> LookupResponse:
        """The agent tool: levelled, grouped, deduplicated evidence (``kbseek.lookup.tool``)."""
        return self.lookup_tool(request)

    def trace(self, session_id: str) -> dict[str, Any]:
        """A session's diagnosis trace: its calls in order with their evidence, and the documents it has seen."""
        calls = self.invocations.list(session_id=session_id, limit=10_000)
        if not calls:
            raise NotFoundError(f"no lookup recorded for session {session_id!r}")
        seen: dict[str, dict[str, Any]] = {}
        paths = {d.id: d.path for d in self.indexes.documents.values()}
        for row in self.sessions.given(session_id):
            entry = seen.setdefault(
                row["document_id"],
                {
                    "document_id": row["document_id"],
                    "path": paths.get(row["document_id"]),
                    "first_call": row["call"],
                    "anchors": [],
                },
            )
            if row["anchor"] is not None:
                entry["anchors"].append(row["anchor"])
        return {
            "session_id": session_id,
            "calls": [
                {
                    "call": c["call"],
                    "request_id": c["request_id"],
                    "query": c["query"],
                    "policy": c["policy"],
                    "success": c["success"],
                    "error": c["error"],
                    "relevance_level": c["relevance_level"],
                    "evidence_status": c["retrieval_details"].get("evidence_status"),
                    "evidence": c["retrieval_details"].get("evidence", []),
                    "deduplicated": c["retrieval_details"].get("deduplicated", []),
                    "duration_ms": c["duration_ms"],
                    "at": c["created_at"].isoformat(),
                }
                for c in calls
            ],
            "documents_seen": list(seen.values()),
        }

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

    def lint(self) -> list[dict[str, Any]]:
        """Keywords several documents share: they make L0 hints ambiguous, so each should name one document."""
        return [
            {
                "keyword": keyword,
                "paths": paths,
                "message": f"keyword {keyword!r} is shared by {len(paths)} documents: {', '.join(paths)}",
            }
            for keyword, paths in shared_keywords(self.repository.keywords()).items()
        ]

    def stats(self) -> dict[str, int]:
        return {
            "documents": self.repository.count(),
            "chunks": self.repository.chunk_count(),
            "version": self.repository.version(),
        }

    # -- repair --------------------------------------------------------------------------

    def drift(self) -> dict[str, list[str]]:
        """Where the file store differs from the database (the system of record), without changing anything:
        ``rewrite`` (originals missing or not matching the stored content), ``orphaned`` (files the database does
        not know) and ``temp`` (half-written files, relative to the knowledge base folder).

        Beside a live writer an upload in flight shows up here for a moment (its temp file, or its original just
        before the database commits): a finding to re-check, never to act on while the writer runs.
        """
        known = self.repository.hashes()
        rewrite = []
        for path, (digest, _) in known.items():
            data = self.files.read(path)
            if data is not None and sha256_hex(data) == digest:
                continue
            if data is not None and data == (self.repository.content(path) or "").encode("utf-8"):
                continue
            rewrite.append(path)
        orphaned = [path for path in self.files.paths() if path not in known]
        temp = sorted(t.relative_to(self.files.root).as_posix() for t in self.files.temp_files())
        return {"rewrite": rewrite, "orphaned": orphaned, "temp": temp}

    @_alone
    def repair(self, *, dry_run: bool = False) -> dict[str, int]:
        """Make the file store match the database (the system of record) after a crash.

        Missing or stale originals are rewritten from the stored content; files the database
        does not know are moved to ``<home>/orphaned/`` (never deleted); temp files are removed.
        With ``dry_run`` it only counts what it would do (:meth:`drift` names the files).
        Only the owner of the data home repairs, when nothing else writes it (``kbseek.home.ownership``).
        """
        found = self.drift()
        counts = {
            "rewritten": len(found["rewrite"]),
            "orphaned": len(found["orphaned"]),
            "temp_removed": len(found["temp"]),
        }
        if dry_run:
            return counts
        counts["temp_removed"] = self.files.remove_temp_files()
        for path in found["rewrite"]:
            self.files.write(path, (self.repository.content(path) or "").encode("utf-8"))
            log.warning("repair: rewrote the original of %s from the database", path)
        for path in found["orphaned"]:
            moved = self.files.move_out(path, self.settings.orphan_dir)
            log.warning("repair: %s is not in the database; moved to %s", path, moved)
        return counts

    # -- asked by the edges (REST, MCP) ---------------------------------------------------------
    # What the HTTP and MCP interfaces show beyond the methods above, so that they never read the repository,
    # the indexes, the telemetry or the record stores themselves.

    def readiness(self) -> dict[str, Any]:
        """Whether this knowledge base can answer (``/ready``): ``ready`` when the database answers and the indexes
        are loaded; ``degraded`` names the checks that fail while it still answers (an embedding server that has
        not answered yet leaves the lexical lanes), ``checks`` each part's state, ``repaired_at_start`` what
        :meth:`open` repaired."""
        checks: dict[str, Any] = {}
        try:
            checks["database"] = {"ok": True, "documents": self.repository.count()}
        except Exception as exc:  # shown to callers without a key: the class only, the details in the log
            log.warning("readiness: the database check failed: %s", redact(str(exc)))
            checks["database"] = {"ok": False, "error": type(exc).__name__}
        indexes = self.indexes
        checks["vector_store"] = indexes.dense_status()
        checks["indexes"] = {
            "ok": indexes.version >= 0,
            "version": indexes.index_version,
            "documents": len(indexes.documents),
            "chunks": len(indexes.chunks),
        }
        ok = checks["database"]["ok"] and checks["indexes"]["ok"]
        degraded = [name for name, check in checks.items() if not check["ok"]] if ok else []
        return {"ready": ok, "degraded": degraded, "checks": checks, "repaired_at_start": self.startup_repair}

    def metrics_exposition(self) -> bytes:
        """The Prometheus text exposition of this knowledge base's metrics, document and chunk gauges current."""
        self.telemetry.documents.set(len(self.indexes.documents))
        self.telemetry.chunks.set(len(self.indexes.chunks))
        return self.telemetry.exposition()

    def vector_status(self, document_id: str) -> str:
        """A document's vectors: ``indexed``, ``pending`` (queued or being embedded; retried after a failure) or
        ``none`` (no dense lane)."""
        return self.indexes.vector_status(document_id)

    def categories(self) -> dict[str, int]:
        """Each category with its number of documents, by name."""
        counts: dict[str, int] = {}
        for doc in self.list_documents():
            counts[doc.category] = counts.get(doc.category, 0) + 1
        return dict(sorted(counts.items()))

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

    # -- end of what the edges ask --------------------------------------------------------------


def _refuse_if_owned(home: Path) -> None:
    """Opening to write (migrate, repair, index) a home another process owns would race it (``kbseek.home.ownership``)."""
    owner = owner_of(home)
    if owner is not None and owner.pid != os.getpid():
        raise HomeInUse(
            f"{home} is owned by {owner.describe()}",
            owner=owner,
            hint="open it read-only beside the owner: KnowledgeBase.open(settings, read_only=True)",
        )


def _no_document(path: str) -> NotFoundError:
    return NotFoundError(f"no document with path {path!r}", hint="upload it first")


def _size(file: Path) -> int | None:
    try:
        return file.stat().st_size
    except OSError:
        return None


def _recall_policy(policy: str) -> str:
    """``legacy`` shapes the answer; its recall is the hybrid one."""
    return "hybrid" if policy == "legacy" else policy
