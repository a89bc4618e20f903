"""``kbseek doctor``: check a data home against its database, and with ``--fix`` repair what drifted.

The database is the system of record: stored originals are rewritten from it, vectors re-derived from it (their
embeddings are cached in it), and in-memory indexes rebuilt from it. The check compares each of them with it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kbseek.adapters.sql import migrate
from kbseek.core.models import StoredDocument
from kbseek.errors import HomeInUse, KbseekError, SchemaNotCurrent
from kbseek.home.ownership import HomeLock, Owner, owner_of
from kbseek.home.readonly import require_database
from kbseek.maintenance.schema import status
from kbseek.retrieval.vectors import DOCUMENT_PREFIX, has_summary_vector
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings
from kbseek.wiring import load_embedder, open_milvus


def doctor(kb: KnowledgeBase, *, fix: bool, vectors: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check schema, files, indexes and vectors against the database; with ``fix``, repair what drifted.

    Without ``fix`` nothing is written: what a repair would do is reported as findings (``ok`` false), and a write
    in flight may show up among them for a moment. ``vectors`` is the vector check made elsewhere
    (:func:`check_home`) when ``kb`` was opened read-only and its dense lane, if any, is only an in-process copy.

    With ``fix`` it holds the home alone throughout (``kb.writes.repairing()``, as ``reindex`` does): the documents
    it reads and the vectors it lists are of one moment. Without that, a document uploaded and embedded by the
    vector worker between the two reads would be taken for an orphan and lose its vectors
    (``tests/test_vector_pipeline.py``).
    """
    if not fix:
        return _doctor(kb, fix=False, vectors=vectors)
    with kb.writes.repairing():
        return _doctor(kb, fix=True, vectors=vectors)


def _doctor(kb: KnowledgeBase, *, fix: bool, vectors: dict[str, Any] | None) -> dict[str, Any]:
    started = time.perf_counter()
    checks: dict[str, Any] = {}
    current, head = migrate.current(kb.repository.engine), migrate.head()
    checks["schema"] = {"ok": current == head, "revision": current, "head": head}
    found = kb.drift()
    files = (
        kb.repair()
        if fix
        else {
            "rewritten": len(found["rewrite"]),
            "orphaned": len(found["orphaned"]),
            "temp_removed": len(found["temp"]),
        }
    )
    checks["files"] = {
        "ok": not any(files.values()),
        ("repaired" if fix else "would_repair"): files,
        "found": {k: v for k, v in found.items() if v},
    }
    kb.indexes.refresh(force=fix)
    if fix:  # the vectors of every change the worker was handed are made before they are compared
        kb.indexes.wait_for_vectors()
    documents = {d.id: d for d in kb.repository.load()}
    chunk_ids = {c.id for d in documents.values() for c in d.chunks}
    indexed = set(kb.indexes.chunks)
    checks["indexes"] = {
        "ok": indexed == chunk_ids and set(kb.indexes.documents) == set(documents),
        "documents": len(kb.indexes.documents),
        "chunks": len(indexed),
        "database_documents": len(documents),
        "database_chunks": len(chunk_ids),
    }
    dense = kb.indexes.dense
    if vectors is not None:
        checks["vectors"] = vectors
    elif dense is None:
        checks["vectors"] = {"ok": True, "note": "no dense lane (embedder none)"}
    elif not dense.available:
        checks["vectors"] = {"ok": False, "reason": dense.reason, "pending": kb.indexes.dense_pending}
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
            entry["repaired"] = {
                "orphans_deleted": len(orphans),
                "vectors_added": len(missing),
                "ok_after": after == expected,
            }
        checks["vectors"] = entry
    ok = all(c["ok"] is True for c in checks.values())
    return {
        "ok": ok,
        "fixed": fix,
        "checks": checks,
        "repaired_at_open": kb.startup_repair,
        "duration_ms": round((time.perf_counter() - started) * 1000, 1),
    }


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
    return {
        "ok": not orphans and not missing,
        "store": store,
        "vectors": len(present),
        "orphans": len(orphans),
        "missing": len(missing),
    }


def check_home(settings: Settings) -> dict[str, Any]:
    """``kbseek doctor`` without ``--fix``: :func:`doctor` on the data home, writing nothing, beside its owner or not.

    The knowledge base is opened read-only (no migration, no repair). The vectors are checked where they persist:
    in Milvus when nobody owns the home (the home is held for the check, so no server starts meanwhile), through
    the owner's ``/ready`` when a server owns it (its Milvus Lite data dir is its own), not at all while another
    command writes them (reported, ``ok`` false).
    """
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
            revisions = status(settings)
            schema = {"ok": False, "revision": revisions["current"], "head": revisions["head"], "note": exc.message}
            return {
                "ok": False,
                "fixed": False,
                "checks": {"schema": schema},
                "repaired_at_open": {},
                "owner": _owner_view(owner),
                "duration_ms": 0.0,
            }
        try:
            documents = kb.repository.load()
            result = doctor(kb, fix=False, vectors=_vectors_at_rest(settings, documents, owner))
        finally:
            kb.close()
    finally:
        lock.release()
    return result | {"owner": _owner_view(owner)}


def _owner_view(owner: Owner | None) -> dict[str, Any] | None:
    return (
        None
        if owner is None
        else {"pid": owner.pid, "command": owner.command, "url": owner.url, "describe": owner.describe()}
    )


def _vectors_at_rest(settings: Settings, documents: list[StoredDocument], owner: Owner | None) -> dict[str, Any]:
    if settings.embedder == "none":
        return {"ok": True, "note": "no dense lane (embedder none)"}
    if owner is not None:
        return _owner_vectors(owner)
    if settings.vector_store == "local":
        return {
            "ok": True,
            "store": "local",
            "note": "in-process store, filled from the embedding cache at every start",
        }
    embedder = load_embedder(settings)
    assert embedder is not None  # the embedder is not "none" (above)
    expected = expected_vector_ids(documents, summaries=settings.embed_summaries)
    target = settings.milvus_target
    if not settings.milvus_uri and not Path(target).exists():
        return compare_vectors("milvus", set(), expected) | {"note": f"no Milvus Lite data at {target}"}
    try:
        store = open_milvus(settings, embedder, create=False)
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
    return {
        "ok": bool(ready.get("ready")) and not store.get("fallback"),
        "checked_by": f"GET {owner.url}/ready",
        "store": store.get("store"),
        "fallback": store.get("fallback"),
        "pending": store.get("documents_pending"),
    }
