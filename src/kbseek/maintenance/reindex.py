"""``kbseek reindex`` and ``POST /api/reindex``: rebuild everything derived from the database."""

from __future__ import annotations

import time
from typing import Any

from kbseek.maintenance.doctor import expected_vector_ids
from kbseek.service import KnowledgeBase


def reindex(kb: KnowledgeBase) -> dict[str, Any]:
    """Rebuild what is derived from the database: originals, in-memory indexes, and every vector (from the
    embedding cache; only texts never embedded are embedded).

    It holds the home alone (``kb.writes.repairing()``) throughout: writes wait for it, and it waits for the
    writes in flight, so no upload's original is taken for an orphan and no new document's vectors for stale ones
    (the documents it reads and the vectors it lists are of one moment: ``tests/test_vector_pipeline.py``)."""
    started = time.perf_counter()
    with kb.writes.repairing():
        repaired = kb.repair()
        kb.indexes.refresh(force=True)
        kb.indexes.wait_for_vectors()  # the worker's changes first: nothing is embedded twice at once
        documents = kb.repository.load()
        vectors = 0
        dense = kb.indexes.dense
        if dense is not None and dense.available:
            expected = expected_vector_ids(documents, summaries=dense.summaries)
            dense.sync(documents, sorted(dense.store.ids() - expected), first=False)
            vectors = len(dense.store.ids())
    return {
        "repaired": repaired,
        "documents": len(documents),
        "chunks": len(kb.indexes.chunks),
        "vectors": vectors,
        "index_version": kb.indexes.index_version,
        "duration_ms": round((time.perf_counter() - started) * 1000, 1),
    }
