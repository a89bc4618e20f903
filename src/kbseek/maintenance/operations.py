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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kbseek.adapters.sql import migrate
from kbseek.adapters.sql.engine import make_engine
from kbseek.retrieval.vectors import DOCUMENT_PREFIX, has_summary_vector
from kbseek.core.models import StoredDocument
from kbseek.errors import HomeInUse, KbseekError, OperationError, SchemaNotCurrent
from kbseek.home.ownership import HomeLock, Owner, owner_of
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

BACKUP_FORMAT = 1




def doctor(kb: KnowledgeBase, *, fix: bool, vectors: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check schema, files, indexes and vectors against the database; with ``fix``, repair what drifted.

    Without ``fix`` nothing is written: what a repair would do is reported as findings (``ok`` false). ``vectors``
    is the vector check made elsewhere (:func:`check_home`) when ``kb`` was opened read-only and its dense lane,
    if any, is only an in-process copy.
    """
    started = time.perf_counter()
    checks: dict[str, Any] = {}
    current, head = migrate.current(kb.repository.engine), migrate.head()
    checks["schema"] = {"ok": current == head, "revision": current, "head": head}
    found = kb.drift()
    files = kb.repair() if fix else {"rewritten": len(found["rewrite"]), "orphaned": len(found["orphaned"]),
                                     "temp_removed": len(found["temp"])}
    checks["files"] = {"ok": not any(files.values()), ("repaired" if fix else "would_repair"): files,
                       "found": {k: v for k, v in found.items() if v}}
    kb.indexes.refresh(force=fix)
    documents = {d.id: d for d in kb.repository.load()}
    chunk_ids = {c.id for d in documents.values() for c in d.chunks}
    indexed = set(kb.indexes.chunks)
    checks["indexes"] = {"ok": indexed == chunk_ids and set(kb.indexes.documents) == set(documents),
                         "documents": len(kb.indexes.documents), "chunks": len(indexed),
                         "database_documents": len(documents), "database_chunks": len(chunk_ids)}
    dense = kb.indexes.dense
    if vectors is not None:
        checks["vectors"] = vectors
    elif dense is None:
        checks["vectors"] = {"ok": True, "note": "no dense lane (embedder none)"}
    else:
        expected = expected_vector_ids(documents.values(), summaries=dense.summaries)
        present = dense.store.ids()
        entry = compare_vectors(dense.store.name, present, expected) | {"pending": kb.indexes.dense_pending}
        orphans, missing = sorted(present - expected), sorted(expected - present)
        if fix and (orphans or missing):
            owners = {c.id: d for d in documents.values() for c in d.chunks}
            owners |= {DOCUMENT_PREFIX + d.id: d for d in documents.values()}
            stale_docs = list({owners[v].id: owners[v] for v in missing}.values())
            dense.sync(stale_docs, orphans, first=False)
            after = dense.store.ids()
            entry["repaired"] = {"orphans_deleted": len(orphans), "vectors_added": len(missing),
                                 "ok_after": after == expected}
        checks["vectors"] = entry
    ok = all(c["ok"] is True for c in checks.values())
    return {"ok": ok, "fixed": fix, "checks": checks, "repaired_at_open": kb.startup_repair,
            "duration_ms": round((time.perf_counter() - started) * 1000, 1)}


def expected_vector_ids(documents: Iterable[StoredDocument], *, summaries: bool) -> set[str]:
    """The vector ids the database implies: every chunk, and each document's summary when it is embedded."""
    documents = list(documents)
    expected = {c.id for d in documents for c in d.chunks}
    if summaries:
        expected |= {DOCUMENT_PREFIX + d.id for d in documents if has_summary_vector(d)}
    return expected


def compare_vectors(store: str, present: set[str], expected: set[str]) -> dict[str, Any]:
    """The vector check's entry: ``ok`` when the store holds exactly the expected ids.

    >>> compare_vectors("milvus", {"a", "x"}, {"a", "b"})
    {'ok': False, 'store': 'milvus', 'vectors': 2, 'orphans': 1, 'missing': 1}
    """
    orphans, missing = present - expected, expected - present
    return {"ok": not orphans and not missing, "store": store, "vectors": len(present), "orphans": len(orphans),
            "missing": len(missing)}


def check_home(settings: Settings) -> dict[str, Any]:
    """``kbseek doctor`` without ``--fix``: :func:`doctor` on the data home, writing nothing, beside its owner or not.

    The knowledge base is opened read-only (no migration, no repair). The vectors are checked where they persist:
    in Milvus when nobody owns the home (the home is held for the check, so no server starts meanwhile), through
    the owner's ``/ready`` when a server owns it (its Milvus Lite data dir is its own), not at all while another
    command writes them (reported, ``ok`` false).
    """
    from kbseek.home.readonly import require_database

    require_database(settings.database_url, settings.home)
    lock, owner = HomeLock(settings.home), owner_of(settings.home)
    if owner is None:
        try:
            lock.acquire("kbseek doctor")
        except HomeInUse as exc:
            owner = exc.owner
    try:
        try:
            kb = KnowledgeBase.open(settings.model_copy(update={"embedder": "none"}), read_only=True)
        except SchemaNotCurrent as exc:
            engine = make_engine(settings.database_url)
            try:
                schema = {"ok": False, "revision": migrate.current(engine), "head": migrate.head(), "note": exc.message}
            finally:
                engine.dispose()
            return {"ok": False, "fixed": False, "checks": {"schema": schema}, "repaired_at_open": {},
                    "owner": _owner_view(owner), "duration_ms": 0.0}
        try:
            documents = kb.repository.load()
            result = doctor(kb, fix=False, vectors=_vectors_at_rest(settings, documents, owner))
        finally:
            kb.close()
    finally:
        lock.release()
    return result | {"owner": _owner_view(owner)}


def _owner_view(owner: Owner | None) -> dict[str, Any] | None:
    return None if owner is None else {"pid": owner.pid, "command": owner.command, "url": owner.url,
                                       "describe": owner.describe()}


def _vectors_at_rest(settings: Settings, documents: list[StoredDocument], owner: Owner | None) -> dict[str, Any]:
    if settings.embedder == "none":
        return {"ok": True, "note": "no dense lane (embedder none)"}
    if owner is not None:
        return _owner_vectors(owner)
    if settings.vector_store == "local":
        return {"ok": True, "store": "local", "note": "in-process store, filled from the embedding cache at every start"}
    from kbseek.adapters.embedders import load_embedder
    from kbseek.adapters.vectors_milvus import MilvusVectorStore

    embedder: Any = load_embedder(settings.embedder, url=settings.embedder_url, model=settings.embedder_model,
                                  api_key=settings.embedder_api_key)
    expected = expected_vector_ids(documents, summaries=settings.embed_summaries)
    target = settings.milvus_target
    if not settings.milvus_uri and not Path(target).exists():
        return compare_vectors("milvus", set(), expected) | {"note": f"no Milvus Lite data at {target}"}
    try:
        store = MilvusVectorStore(uri=target, dim=embedder.dim, model_id=f"{embedder.model_id}|{settings.embedding_input}",
                                  token=settings.milvus_token, create=False)
    except KbseekError as exc:
        return {"ok": False, "store": "milvus", "missing": len(expected), "error": exc.message}
    try:
        return compare_vectors("milvus", store.ids(), expected)
    finally:
        store.close()


def _owner_vectors(owner: Owner) -> dict[str, Any]:
    """The owner keeps the vectors; a server's ``/ready`` says which store it uses and what is still pending."""
    if not owner.url:
        return {"ok": None, "skipped": f"{owner.describe()} is writing them; check again when it is done"}
    import httpx

    try:
        ready = httpx.get(f"{owner.url}/ready", timeout=10).json()
        store = ready["checks"]["vector_store"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        return {"ok": False, "checked_by": f"GET {owner.url}/ready", "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": bool(ready.get("ready")) and not store.get("fallback"), "checked_by": f"GET {owner.url}/ready",
            "store": store.get("store"),
            "fallback": store.get("fallback"), "pending": store.get("documents_pending")}


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
            expected = expected_vector_ids(documents, summaries=dense.summaries)
            dense.sync(documents, sorted(dense.store.ids() - expected), first=False)
            vectors = len(dense.store.ids())
    return {"repaired": repaired, "documents": len(documents), "chunks": len(kb.indexes.chunks), "vectors": vectors,
            "index_version": kb.indexes.index_version, "duration_ms": round((time.perf_counter() - started) * 1000, 1)}
