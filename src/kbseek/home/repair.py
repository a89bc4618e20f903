"""Bringing the file store back in line with the database, the system of record, after a crash: finding the drift
without changing anything, and repairing it (rewrite stale originals from the database, move unknown files aside,
remove half-written temp files). Only the owner of a data home repairs, when nothing else writes it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from kbseek.core.ids import sha256_hex

if TYPE_CHECKING:
    from kbseek.adapters.filestore import FileStore
    from kbseek.adapters.sql.repository import SqlRepository

log = logging.getLogger("kbseek")


def drift(repository: SqlRepository, files: FileStore) -> dict[str, list[str]]:
    """Where the file store differs from the database, without changing anything: ``rewrite`` (originals missing or
    not matching the stored content), ``orphaned`` (files the database does not know) and ``temp`` (half-written
    files, relative to the knowledge base folder).

    Beside a live writer an upload in flight shows up here for a moment (its temp file, or its original just
    before the database commits): a finding to re-check, never to act on while the writer runs.
    """
    known = repository.hashes()
    rewrite = []
    for path, (digest, _) in known.items():
        data = files.read(path)
        if data is not None and sha256_hex(data) == digest:
            continue
        if data is not None and data == (repository.content(path) or "").encode("utf-8"):
            continue
        rewrite.append(path)
    orphaned = [path for path in files.paths() if path not in known]
    temp = sorted(t.relative_to(files.root).as_posix() for t in files.temp_files())
    return {"rewrite": rewrite, "orphaned": orphaned, "temp": temp}


def repair(repository: SqlRepository, files: FileStore, orphan_dir: Path, *, dry_run: bool = False) -> dict[str, int]:
    """Make the file store match the database: missing or stale originals are rewritten from the stored content;
    files the database does not know are moved to ``orphan_dir`` (never deleted); temp files are removed. With
    ``dry_run`` it only counts what it would do (:func:`drift` names the files). The caller holds the home
    exclusively while it runs."""
    found = drift(repository, files)
    counts = {
        "rewritten": len(found["rewrite"]),
        "orphaned": len(found["orphaned"]),
        "temp_removed": len(found["temp"]),
    }
    if dry_run:
        return counts
    counts["temp_removed"] = files.remove_temp_files()
    for path in found["rewrite"]:
        files.write(path, (repository.content(path) or "").encode("utf-8"))
        log.warning("repair: rewrote the original of %s from the database", path)
    for path in found["orphaned"]:
        moved = files.move_out(path, orphan_dir)
        log.warning("repair: %s is not in the database; moved to %s", path, moved)
    return counts
