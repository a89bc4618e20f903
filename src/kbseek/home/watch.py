"""Watching a folder (``kbseek watch DIR``, ``kbseek serve --watch DIR``): a saved Markdown file becomes its
document within about a second, a deleted one takes its document with it.

The folder is polled (``os.walk`` and ``stat``, no OS notification API: it works the same on every file system,
network mounts and containers included, and needs no dependency). A file is read only once its signature (inode,
size, modification time) has stayed the same for ``settle_s`` seconds, and stored only if it is still the same
after the read: a file an editor is still writing is never stored half written, and an editor that writes a temp
file and renames it over the original is simply seen as a new signature. What is read goes through the write path
an ingest of the folder takes (``DocumentWriter``): the same document paths (relative to the folder) and origins
(the file's path), so ``kbseek ingest DIR`` and the watcher agree; Markdown that does not parse is reported naming
the file and the stored version stays. The names ``plan_ingest`` skips (hidden, not Markdown) are skipped here:
swap and backup files of editors (``.foo.md.swp``, ``.#foo.md``, ``foo.md~``, vim's ``4913``) among them.

A document is deleted only when it came from this folder (its origin is a file under it), its file has been gone
for ``settle_s`` (an editor that moves the original aside before writing the new one brings it back in time) and
the folder was listed without an error, as ``ingest --prune`` decides.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kbseek.errors import KbseekError, NotFoundError
from kbseek.home.ingest import FileReport, watched_name
from kbseek.home.writer import DocumentWriter
from kbseek.observability.logs import request_scope

log = logging.getLogger("kbseek")
Signature = tuple[int, int, int]  # inode, size, mtime in ns
TRANSIENT = frozenset({"conflict", "storage_error", "storage_full", "unavailable"})  # failures not of the file
RETRY_AFTER_S = 5.0


@dataclass(slots=True)
class WatchReport:
    """What one poll of one folder changed: the files it stored (or failed to) and the documents it deleted."""

    root: str
    files: list[FileReport] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"root": self.root, "files": [f.to_dict() for f in self.files], "deleted": list(self.deleted)}


def scan(root: Path) -> tuple[dict[str, Signature], bool]:
    """The Markdown files under ``root`` by relative path with their signatures, and whether the listing was
    complete (no folder failed to list). ``os.scandir`` and plain strings: it runs several times a second."""
    found: dict[str, Signature] = {}
    complete = True
    pending = [("", str(root))]
    while pending:
        prefix, folder = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    name = entry.name
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if not name.startswith("."):
                                pending.append((f"{prefix}{name}/", entry.path))
                        elif watched_name(name) and entry.is_file():
                            st = entry.stat()
                            found[prefix + name] = (st.st_ino, st.st_size, st.st_mtime_ns)
                    except OSError:  # gone between the listing and the stat: seen next time
                        continue
        except OSError:
            complete = False
    return found, complete


class FolderWatcher:
    """One folder kept in step with its documents, one :meth:`poll` at a time (the clock is injectable, so a test
    decides when the settle time has passed)."""

    def __init__(
        self,
        writer: DocumentWriter,
        refresh: Callable[[], object],
        root: Path,
        *,
        settle_s: float = 0.4,
        prune: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.writer = writer
        self.refresh = refresh
        self.root = Path(root).resolve()
        self.settle_s = settle_s
        self.prune = prune
        self.clock = clock
        self._prefix = f"{self.root}/"
        self._seen: dict[str, tuple[Signature, float]] = {}  # relative path -> signature, since when
        self._done: dict[str, Signature] = {}  # relative path -> the signature last stored (or refused)
        self._missing: dict[str, float] = {}  # document path -> since when its file is gone
        self._listed: set[str] | None = None  # the files of the last poll (None: none yet)
        if not self.root.is_dir():
            raise NotFoundError(f"cannot watch {root}: no such folder", hint="give a folder of Markdown files")

    def poll(self) -> WatchReport | None:
        """Store what settled since the last poll, delete what stayed gone; ``None`` when nothing changed."""
        files, complete = scan(self.root)
        now = self.clock()  # after the listing: a signature counts as seen from when the listing ended
        ready: list[str] = []
        for relative, signature in sorted(files.items()):
            seen = self._seen.get(relative)
            if seen is None or seen[0] != signature:
                self._seen[relative] = (signature, now)
            elif self._done.get(relative) != signature and now - seen[1] >= self.settle_s:
                ready.append(relative)
        for relative in [r for r in self._seen if r not in files]:
            del self._seen[relative]
            self._done.pop(relative, None)
        report = WatchReport(str(self.root))
        if ready:
            with request_scope():
                known = self.writer.repository.hashes()
                for relative in ready:
                    stored = self._store(relative, known)
                    if stored is not None:
                        report.files.append(stored)
        # the documents are asked for only when a file may have gone: at the first poll, when one vanished from
        # the listing, or while one is waiting out the settle time
        vanished = self._listed is None or bool(self._listed - files.keys()) or bool(self._missing)
        if self.prune and complete and vanished:
            self._delete_gone(files, now, report)
        if complete:  # a partial listing must not hide a vanished file from the next poll
            self._listed = set(files)
        if not report.files and not report.deleted:
            return None
        if any(f.status in ("added", "updated") for f in report.files) or report.deleted:
            self.refresh()
        return report

    def _store(self, relative: str, known: dict[str, tuple[str, str | None]]) -> FileReport | None:
        file = self.root / relative
        signature = self._seen[relative][0]
        try:
            data = file.read_bytes()
            st = file.stat()
        except FileNotFoundError:  # gone (or renamed away) mid-way: the next poll sees what it became
            self._seen.pop(relative, None)
            return None
        except OSError as exc:  # unreadable (permissions): said once, read again when it changes
            self._done[relative] = signature
            reason = f"{file}: cannot read: {exc.strerror}"
            log.warning("watch: %s", reason)
            return FileReport(source=str(file), status="failed", path=relative, reason=reason, error_code="io_error")
        if (st.st_ino, st.st_size, st.st_mtime_ns) != signature:  # written to while being read: settle again
            self._seen[relative] = ((st.st_ino, st.st_size, st.st_mtime_ns), self.clock())
            return None
        report = self.writer.store_watched(data, relative, source=str(file), known=known)
        if report.error_code in TRANSIENT:  # not the file's fault: tried again a while later
            self._seen[relative] = (signature, self.clock() + RETRY_AFTER_S)
            log.warning("watch: %s not stored, retried in %.0fs: %s", file, RETRY_AFTER_S, report.reason)
            return report
        self._done[relative] = signature  # stored, unchanged or refused: read again only once it changes
        if report.status == "failed":
            log.warning("watch: %s not stored: %s", file, report.reason)
        elif report.status != "unchanged":
            log.info("watch: %s %s", report.status, relative)
        return report if report.status != "unchanged" else None

    def _delete_gone(self, files: dict[str, Signature], now: float, report: WatchReport) -> None:
        ours = {
            path: origin[len(self._prefix) :]
            for path, (_, origin) in self.writer.repository.hashes().items()
            if origin and origin.startswith(self._prefix)
        }
        for path in [p for p in self._missing if p not in ours or ours[p] in files]:
            del self._missing[path]
        for path, relative in sorted(ours.items()):
            if relative in files:
                continue
            since = self._missing.setdefault(path, now)
            if now - since < self.settle_s or Path(self._prefix + relative).exists():
                continue
            try:
                self.writer.delete(path, via="watch", detail=f"{self._prefix}{relative} was deleted")
            except NotFoundError:  # deleted meanwhile by someone else
                pass
            except KbseekError as exc:  # a write conflict, a storage error: the next poll tries again
                log.warning("watch: %s not deleted yet: %s", path, exc)
                continue
            del self._missing[path]
            report.deleted.append(path)
            log.info("watch: deleted %s (its file %s%s is gone)", path, self._prefix, relative)


class Watching:
    """Folders polled by one background thread every ``interval_s`` until :meth:`stop`; each poll that changed
    something is handed to ``on_report`` (printed by ``kbseek watch``, logged by the server)."""

    def __init__(
        self,
        watchers: list[FolderWatcher],
        *,
        interval_s: float = 0.2,
        on_report: Callable[[WatchReport], None] | None = None,
    ) -> None:
        self.watchers = watchers
        self.interval_s = interval_s
        self.on_report = on_report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> list[WatchReport]:
        reports: list[WatchReport] = []
        for watcher in self.watchers:
            try:
                report = watcher.poll()
            except KbseekError as exc:  # a write conflict, the folder gone: the next poll tries again
                log.warning("watch %s: %s", watcher.root, exc)
                continue
            except Exception:  # a database gone away: the watcher outlives it and tries again
                log.exception("watch %s: poll failed", watcher.root)
                continue
            if report is not None:
                reports.append(report)
                if self.on_report is not None:
                    self.on_report(report)
        return reports

    def run(self) -> None:
        """Poll until :meth:`stop` (in the calling thread)."""
        while True:
            self.poll()
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> Watching:
        self._thread = threading.Thread(target=self.run, name="kbseek-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
