"""The write path of a data home: ingest files, folders and in-memory documents, upload, replace and delete one
document. Each write stores the original and commits its rows while holding the path (``WriteLocks``), so the file
store and the database agree at rest; every write and rejection goes to the audit and the metrics. Refreshing the
in-memory indexes afterwards is the caller's (``KnowledgeBase``) part."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbseek.adapters.sql.history import Change
from kbseek.core.document import ChunkingConfig, decode_markdown, parse_document
from kbseek.core.frontmatter import parse_frontmatter
from kbseek.core.ids import sha256_hex
from kbseek.core.paths import DEFAULT_CATEGORY, safe_category, upload_path
from kbseek.errors import InvalidRequest, KbseekError, NotFoundError, StorageError
from kbseek.home.ingest import FileReport, IngestReport, PlannedFile, plan_ingest
from kbseek.home.writelocks import WriteLocks
from kbseek.observability.logs import current_actor, current_request_id
from kbseek.observability.metrics import Telemetry
from kbseek.settings import Settings

if TYPE_CHECKING:
    from kbseek.adapters.filestore import FileStore
    from kbseek.adapters.sql.audit import AuditStore
    from kbseek.adapters.sql.repository import SqlRepository

log = logging.getLogger("kbseek")
ProgressCallback = Callable[[FileReport, int, int], None]


class DocumentWriter:
    """Every change to the documents of one data home."""

    def __init__(
        self,
        *,
        repository: SqlRepository,
        files: FileStore,
        writes: WriteLocks,
        audit: AuditStore,
        telemetry: Telemetry,
        settings: Settings,
    ) -> None:
        self.keep_versions = settings.history_keep_versions  # per document in its history; 0 keeps all
        self.repository = repository
        self.files = files
        self.writes = writes
        self.audit = audit
        self.telemetry = telemetry
        self.chunking = chunking_config(settings)

    def ingest(
        self,
        inputs: list[Path],
        report: IngestReport,
        *,
        category: str | None = None,
        prune: bool = False,
        on_file: ProgressCallback | None = None,
    ) -> None:
        """Ingest files and folders into ``report``; each file is its own transaction, a failure stops nothing."""
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

    def ingest_documents(self, documents: Iterable[tuple[str, bytes]], *, origin: str, report: IngestReport) -> None:
        """Ingest ``(path, bytes)`` pairs made in memory (e.g. a BEIR corpus) into ``report``; unchanged ones skip.

        ``origin`` names where they came from; each document's origin is ``origin#path``.
        """
        known = self.repository.hashes()
        for path, data in documents:
            source = f"{origin}#{path}"
            file_report = FileReport(source=source, status="failed", path=path)
            try:
                self._store_if_changed(data, path, None, source, known, file_report, via="import")
            except KbseekError as exc:
                file_report.reason, file_report.error_code = str(exc), exc.code
            report.files.append(file_report)

    def upload(self, data: bytes, file_name: str, *, category: str | None = None) -> FileReport:
        """Store one document from bytes as ``{category}/{file_name}`` (what the API's upload does)."""
        report = FileReport(source=file_name, status="failed")
        try:
            path = self._single_file_path(data, file_name, category)
            report.path = path
            self._store(data, path, category, None, report, source=file_name, via="upload")
        except KbseekError as exc:
            report.reason, report.error_code = str(exc), exc.code
            log.warning("upload failed: %s", exc)
            self._rejected(report.path or file_name, str(exc), len(data))
        return report

    def replace(self, path: str, data: bytes) -> FileReport:
        """New content for the stored document at ``path`` (the API's PUT); its path and category stay.

        A document deleted meanwhile stays deleted: ``NotFoundError``, decided in the write's own transaction."""
        if self.repository.get(path) is None:
            raise no_document(path)
        report = FileReport(source=path, status="failed", path=path)
        try:
            self._store(data, path, None, None, report, source=path, must_exist=True, via="replace")
        except NotFoundError:
            raise
        except KbseekError as exc:
            report.reason, report.error_code = str(exc), exc.code
            log.warning("replace failed: %s", exc)
            self._rejected(path, str(exc), len(data))
        return report

    def rollback(self, path: str, to: int, read: Callable[[str, int], dict[str, Any] | None]) -> FileReport:
        """Bring back version ``to`` of the document at ``path`` (``read`` gives a version) as its new version,
        through the same write as a replace: original, rows, audit and history in one go, indexes after.

        ``NotFoundError`` for a version not kept or a document deleted (also when deleted meanwhile: decided in
        the write's transaction); ``InvalidRequest`` for a version that is a deletion. Nothing changes then."""
        if self.repository.get(path) is None:
            raise NotFoundError(
                f"no document with path {path!r} to roll back (it was deleted or never stored)",
                hint=f"its history stays readable: 'kbseek docs history {path}'; upload a version to restore it",
            )
        wanted = read(path, to)
        if wanted is None:
            raise no_version(path, to)
        if wanted["content"] is None:
            raise InvalidRequest(
                f"to: version {to} of {path!r} is its deletion, which has no text to bring back",
                hint=f"pick a version with text: 'kbseek docs history {path}'",
            )
        report = FileReport(source=f"{path}@v{to}", status="failed", path=path)
        data = wanted["content"].encode("utf-8")
        self._store(data, path, None, None, report, source=path, must_exist=True, via="rollback", restored_from=to)
        return report

    def store_synced(self, data: bytes, path: str, *, origin: str, detail: str) -> FileReport:
        """Store a document a sync read (``home.gitsync``): its history says ``via=sync`` and ``detail``."""
        report = FileReport(source=origin, status="failed", path=path)
        try:
            self._store(data, path, None, origin, report, source=origin, via="sync", detail=detail)
        except KbseekError as exc:
            report.reason, report.error_code = str(exc), exc.code
            self._rejected(path, str(exc), len(data))
        return report

    def store_watched(
        self, data: bytes, path: str, *, source: str, known: dict[str, tuple[str, str | None]]
    ) -> FileReport:
        """Store a file a folder watcher read whole (``home.watch``) as a folder ingest would (``via=watch``);
        unchanged content (``known``: the stored hashes and origins) is not written again."""
        report = FileReport(source=source, status="failed", path=path)
        try:
            self._store_if_changed(data, path, None, source, known, report, via="watch")
        except KbseekError as exc:
            report.reason, report.error_code = str(exc), exc.code
            self._rejected(path, str(exc), len(data))
        return report

    def delete(self, path: str, *, via: str = "delete", detail: str | None = None) -> None:
        """Remove a document: its rows, then its stored original (both while holding the path)."""
        with self.writes.writing(path):
            change = Change(via=via, keep=self.keep_versions, detail=detail)
            if not self.repository.delete(path, audit=self._audit_fields(), change=change):
                raise NotFoundError(f"no document with path {path!r}", hint="see 'kbseek docs list'")
            try:
                self.files.delete(path)
            except StorageError as exc:  # the document is gone; the next repair moves the file aside
                log.warning("document deleted, its original stays until the next repair: %s", exc)
        self.telemetry.observe_write("deleted")
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
            self._rejected(report.path or source, report.reason or "", file_size(planned.file))
        return report

    def _store_if_changed(
        self,
        data: bytes,
        path: str,
        category: str | None,
        source: str,
        known: dict[str, tuple[str, str | None]],
        report: FileReport,
        *,
        via: str = "ingest",
    ) -> None:
        stored = known.get(path)
        if stored is not None and stored[0] == sha256_hex(data) and stored[1] == source:
            report.status = "unchanged"
        else:
            self._store(data, path, category, source, report, source=source, via=via)

    def _single_file_path(self, data: bytes, file_name: str, category: str | None) -> str:
        if category is None:
            text = decode_markdown(data, source=file_name, max_bytes=self.chunking.max_file_bytes)
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
        via: str,
        restored_from: int | None = None,
        detail: str | None = None,
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
                    doc,
                    origin=origin,
                    must_exist=must_exist,
                    audit=self._audit_fields(len(data), parse_ms),
                    change=Change(via=via, keep=self.keep_versions, restored_from=restored_from, detail=detail),
                )
                if report.status == "missing":
                    raise no_document(path)
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
                    self.delete(path, via="prune")
                    report.pruned.append(path)
                    log.info("pruned: %s (its file %s is gone)", path, origin)


def chunking_config(settings: Settings) -> ChunkingConfig:
    """How documents are split and bounded, from the settings."""
    return ChunkingConfig(
        chunk_size=settings.chunk_size,
        overlap=settings.chunk_overlap,
        max_file_bytes=settings.max_file_bytes,
        max_chunks=settings.max_chunks_per_document,
        max_headings=settings.max_headings_per_document,
        max_keywords=settings.max_keywords_per_document,
        max_frontmatter_values=settings.max_frontmatter_values,
    )


def log_documents_state(warned: list[str], lint: list[dict[str, Any]]) -> None:
    """What the owner of a home says once at start-up: documents with warnings, and lint advice (not trouble:
    ``kbseek docs lint`` and ingest reports show it too)."""
    if warned:
        log.warning("%d document(s) have warnings (kbseek docs show PATH): %s", len(warned), ", ".join(warned[:10]))
    for item in lint:
        log.info("lint: %s", item["message"])


def log_scan(report: IngestReport) -> None:
    """A start-up scan's warnings and failures, which no caller sees otherwise."""
    for file in report.files:
        for warning in file.warnings:
            log.warning("scan: %s", warning)
        if file.status == "failed":
            log.warning("scan: %s failed: %s", file.source, file.reason)


def no_document(path: str) -> NotFoundError:
    return NotFoundError(f"no document with path {path!r}", hint="upload it first")


def no_version(path: str, number: int) -> NotFoundError:
    return NotFoundError(
        f"document {path!r} has no version {number}", hint=f"see its versions: 'kbseek docs history {path}'"
    )


def file_size(file: Path) -> int | None:
    try:
        return file.stat().st_size
    except OSError:
        return None
