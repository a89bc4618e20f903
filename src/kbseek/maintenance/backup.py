"""``kbseek backup`` and ``kbseek restore``: the data home's database in a ``.tar.gz``, and back.

The database holds everything (documents, the originals' content, cached embeddings, records), so a backup is the
database; originals, indexes and vectors are rebuilt from it when a restored home is opened.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from kbseek.adapters.sql import migrate
from kbseek.errors import OperationError
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

BACKUP_FORMAT = 1


def backup(settings: Settings, out: Path) -> dict[str, Any]:
    """A consistent snapshot of the data home's database (SQLite's online backup) in a ``.tar.gz``.

    Safe while a server runs: SQLite's backup API copies a consistent state. PostgreSQL is backed up with
    its own tools (``pg_dump``); kbseek refuses rather than pretend."""
    if not settings.database_url.startswith("sqlite"):
        raise OperationError(
            "backup copies the embedded SQLite database; this home uses PostgreSQL",
            hint="back it up with pg_dump (the database holds everything: documents, "
            "originals' content, cached embeddings, records)",
        )
    source = Path(settings.database_url.removeprefix("sqlite:///"))
    if not source.is_file():
        raise OperationError(f"no database at {source}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "kbseek.db"
        with sqlite3.connect(source, timeout=30) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)
            documents = dst.execute("SELECT count(*) FROM documents").fetchone()[0]
        manifest = {
            "format": BACKUP_FORMAT,
            "created_at": dt.datetime.now(dt.UTC).isoformat(),
            "documents": documents,
            "revision": migrate.head(),
            "source": str(settings.home),
        }
        (Path(tmp) / "manifest.json").write_text(json.dumps(manifest, indent=2), "utf-8")
        partial = out.with_name(out.name + ".part")
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(Path(tmp) / "manifest.json", "manifest.json")
            tar.add(copy, "kbseek.db")
        partial.replace(out)  # a backup is either whole or absent
    return manifest | {"file": str(out), "bytes": out.stat().st_size}


def restore(archive: Path, settings: Settings, *, force: bool = False) -> dict[str, Any]:
    """Restore a backup into the data home (empty, or replaced with ``force``); originals, indexes and vectors
    are rebuilt from the database by the next start (``KnowledgeBase.open``), which this runs once."""
    if not settings.database_url.startswith("sqlite"):
        raise OperationError(
            "restore writes the embedded SQLite database; this home uses PostgreSQL",
            hint="restore PostgreSQL with pg_restore / psql",
        )
    target = Path(settings.database_url.removeprefix("sqlite:///"))
    if target.exists() and not force:
        raise OperationError(f"{settings.home} already holds a knowledge base", hint="use --force to replace it")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            names = set(tar.getnames())
            if names != {"manifest.json", "kbseek.db"}:
                raise OperationError(f"{archive} is not a kbseek backup (it holds {sorted(names)[:5]})")
            manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
            if manifest.get("format") != BACKUP_FORMAT:
                raise OperationError(f"{archive}: backup format {manifest.get('format')!r} is not {BACKUP_FORMAT}")
            with tempfile.TemporaryDirectory(dir=target.parent if target.parent.exists() else None) as tmp:
                tar.extract("kbseek.db", tmp, filter="data")
                target.parent.mkdir(parents=True, exist_ok=True)
                for stale in (settings.knowledge_base_dir, settings.home / "milvus.db"):
                    if stale.is_dir():
                        shutil.rmtree(stale)
                for suffix in ("-wal", "-shm"):
                    Path(str(target) + suffix).unlink(missing_ok=True)
                Path(tmp, "kbseek.db").replace(target)
    except (tarfile.TarError, OSError, json.JSONDecodeError) as exc:
        raise OperationError(f"{archive}: cannot restore: {exc}") from None
    with KnowledgeBase.open(settings) as kb:  # rewrites originals, rebuilds indexes and vectors
        restored = {"documents": kb.repository.count(), "repaired": kb.startup_repair}
    return {"manifest": manifest, **restored}
