"""Batch ingestion: which files to read, what happened to each, and the report."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kbseek.core.paths import MARKDOWN_SUFFIXES

STATUSES = ("added", "updated", "unchanged", "failed", "deleted")


@dataclass(slots=True)
class FileReport:
    """What happened to one file (or upload): one of :data:`STATUSES`, and why."""

    source: str
    status: str
    path: str | None = None
    document_id: str | None = None
    chunks: int = 0
    reason: str | None = None
    error_code: str | None = None
    warnings: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class IngestReport:
    """The outcome of one ``ingest`` call; ``complete_scan`` is false when a folder was unreadable."""

    request_id: str
    files: list[FileReport] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    prune_skipped: list[str] = field(default_factory=list)
    lint: list[dict[str, Any]] = field(default_factory=list)
    duration_ms: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for report in self.files:
            counts[report.status] += 1
        counts["deleted"] += len(self.pruned)
        return counts

    @property
    def ok(self) -> bool:
        return not any(r.status == "failed" for r in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "counts": self.counts,
            "files": [r.to_dict() for r in self.files],
            "pruned": list(self.pruned),
            "prune_skipped": list(self.prune_skipped),
            "lint": list(self.lint),
            "duration_ms": round(self.duration_ms, 3),
        }


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """A file to ingest: its path on disk and, for folder ingests, its path relative to the folder."""

    file: Path
    relative: str | None  # None: a single file, stored as {category}/{filename}
    root: Path | None


@dataclass(slots=True)
class Plan:
    files: list[PlannedFile] = field(default_factory=list)
    roots: list[Path] = field(default_factory=list)  # folders scanned completely
    incomplete: dict[Path, str] = field(default_factory=dict)  # folder -> first error
    missing: list[str] = field(default_factory=list)


def plan_ingest(inputs: list[Path]) -> Plan:
    """Expand files and folders into the Markdown files to read, in a stable order.

    Hidden files and folders (``.git``) are skipped; a folder that cannot be listed whole is
    recorded in ``incomplete`` so that ``--prune`` can refuse to act on a partial picture.
    """
    plan = Plan()
    for raw in inputs:
        if raw.is_dir():
            root = raw.resolve()
            errors: list[OSError] = []
            for folder, dirs, files in os.walk(root, onerror=errors.append):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if not watched_name(name):
                        continue
                    file = Path(folder, name)
                    plan.files.append(PlannedFile(file, file.relative_to(root).as_posix(), root))
            if errors:
                plan.incomplete[root] = f"{errors[0].filename}: {errors[0].strerror}"
            else:
                plan.roots.append(root)
        elif raw.is_file():
            plan.files.append(PlannedFile(raw.resolve(), None, None))
        else:
            plan.missing.append(str(raw))
    return plan


def watched_name(name: str) -> bool:
    """Whether a file of a folder is one of its documents: Markdown, not hidden. Editors' swap, backup and probe
    files are not (``.foo.md.swp``, ``.#foo.md``, ``#foo.md#``, ``foo.md~``, ``4913``).

    >>> names = ("a.md", "B.MARKDOWN", ".a.md.swp", ".#a.md", "#a.md#", "a.md~", "4913", ".a.md", "a.md.tmp")
    >>> [n for n in names if watched_name(n)]
    ['a.md', 'B.MARKDOWN']
    """
    return not name.startswith((".", "#", "~")) and name.lower().endswith(MARKDOWN_SUFFIXES)
