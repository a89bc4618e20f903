"""Operations on a whole data home: ``doctor`` (find and repair drift), backup and restore.

The database is the system of record: stored originals are rewritten from it, vectors re-derived from it (their
embeddings are cached in it), and in-memory indexes rebuilt from it. So a backup is the database; the rest follows.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from kbseek.adapters.sql import migrate
from kbseek.dense import DOCUMENT_PREFIX, has_summary_vector
from kbseek.errors import KbseekError
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

BACKUP_FORMAT = 1


class OperationError(KbseekError):
    code = "operation_error"


def doctor(kb: KnowledgeBase, *, fix: bool) -> dict[str, Any]:
    """Check schema, files, indexes and vectors against the database; with ``fix``, repair what drifted."""
    started = time.perf_counter()
    checks: dict[str, Any] = {}
    current, head = migrate.current(kb.repository.engine), migrate.head()
    checks["schema"] = {"ok": current == head, "revision": current, "head": head}
    files = kb.repair(dry_run=not fix)
    checks["files"] = {"ok": not any(files.values()), ("repaired" if fix else "would_repair"): files}
    kb.indexes.refresh(force=fix)
    documents = {d.id: d for d in kb.repository.load()}
    chunk_ids = {c.id for d in documents.values() for c in d.chunks}
    indexed = set(kb.indexes.chunks)
    checks["indexes"] = {"ok": indexed == chunk_ids and set(kb.indexes.documents) == set(documents),
                         "documents": len(kb.indexes.documents), "chunks": len(indexed),
                         "database_documents": len(documents), "database_chunks": len(chunk_ids)}
    dense = kb.indexes.dense
    if dense is None:
        checks["vectors"] = {"ok": True, "note": "no dense lane (embedder none)"}
    else:
        expected = set(chunk_ids)
        if dense.summaries:
            expected |= {DOCUMENT_PREFIX + d.id for d in documents.values() if has_summary_vector(d)}
        present = dense.store.ids()
        orphans, missing = sorted(present - expected), sorted(expected - present)
        entry: dict[str, Any] = {"ok": not orphans and not missing, "store": dense.store.name,
                                 "vectors": len(present), "orphans": len(orphans), "missing": len(missing),
                                 "pending": kb.indexes.dense_pending}
        if fix and (orphans or missing):
            owners = {c.id: d for d in documents.values() for c in d.chunks}
            owners |= {DOCUMENT_PREFIX + d.id: d for d in documents.values()}
            stale_docs = list({owners[v].id: owners[v] for v in missing}.values())
            dense.sync(stale_docs, orphans, first=False)
            after = dense.store.ids()
            entry["repaired"] = {"orphans_deleted": len(orphans), "vectors_added": len(missing),
                                 "ok_after": after == expected}
        checks["vectors"] = entry
    ok = all(c["ok"] for c in checks.values())
    return {"ok": ok, "fixed": fix, "checks": checks, "repaired_at_open": kb.startup_repair, "duration_ms": round((time.perf_counter() - started) * 1000, 1)}


def backup(settings: Settings, out: Path) -> dict[str, Any]:
    """A consistent snapshot of the data home's database (SQLite's online backup) in a ``.tar.gz``.

    Safe while a server runs: SQLite's backup API copies a consistent state. PostgreSQL is backed up with
    its own tools (``pg_dump``); kbseek refuses rather than pretend."""
    if not settings.database_url.startswith("sqlite"):
        raise OperationError("backup copies the embedded SQLite database; this home uses PostgreSQL",
                             hint="back it up with pg_dump (the database holds everything: documents, "
                                  "originals' content, cached embeddings, records)")
    source = Path(settings.database_url.removeprefix("sqlite:///"))
    if not source.is_file():
        raise OperationError(f"no database at {source}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "kbseek.db"
        with sqlite3.connect(source, timeout=30) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)
            documents = dst.execute("SELECT count(*) FROM documents").fetchone()[0]
        manifest = {"format": BACKUP_FORMAT, "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
                    "documents": documents, "revision": migrate.head(), "source": str(settings.home)}
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
        raise OperationError("restore writes the embedded SQLite database; this home uses PostgreSQL",
                             hint="restore PostgreSQL with pg_restore / psql")
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


def reindex(kb: KnowledgeBase) -> dict[str, Any]:
    """Rebuild what is derived from the database: originals, in-memory indexes, and every vector (from the
    embedding cache; only texts never embedded are embedded).

    It holds the home alone (``kb.writes.repairing()``) throughout: writes wait for it, and it waits for the
    writes in flight, so no upload's original is taken for an orphan and no new document's vectors for stale ones."""
    started = time.perf_counter()
    with kb.writes.repairing():
        repaired = kb.repair()
        kb.indexes.refresh(force=True)
        documents = kb.repository.load()
        vectors = 0
        dense = kb.indexes.dense
        if dense is not None:
            expected = {c.id for d in documents for c in d.chunks}
            expected |= {DOCUMENT_PREFIX + d.id for d in documents if dense.summaries and has_summary_vector(d)}
            dense.sync(documents, sorted(dense.store.ids() - expected), first=False)
            vectors = len(dense.store.ids())
    return {"repaired": repaired, "documents": len(documents), "chunks": len(kb.indexes.chunks), "vectors": vectors,
            "index_version": kb.indexes.index_version, "duration_ms": round((time.perf_counter() - started) * 1000, 1)}
