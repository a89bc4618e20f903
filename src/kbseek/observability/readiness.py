"""What ``/ready`` answers: whether a knowledge base can answer, and which of its parts are degraded."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kbseek.observability.redact import redact

log = logging.getLogger("kbseek")


def readiness_report(
    *,
    count_documents: Callable[[], int],
    vector_store: dict[str, Any],
    indexes: dict[str, Any],
    repaired: dict[str, int],
) -> dict[str, Any]:
    """``ready`` when the database answers and the indexes are loaded; ``degraded`` names the checks that fail while
    it still answers (an embedding server that has not answered yet leaves the lexical lanes), ``checks`` each
    part's state, ``repaired_at_start`` what opening the knowledge base repaired.

    >>> readiness_report(count_documents=lambda: 3, vector_store={"ok": False}, indexes={"ok": True}, repaired={})[
    ...     "degraded"]
    ['vector_store']
    """
    checks: dict[str, Any] = {}
    try:
        checks["database"] = {"ok": True, "documents": count_documents()}
    except Exception as exc:  # shown to callers without a key: the class only, the details in the log
        log.warning("readiness: the database check failed: %s", redact(str(exc)))
        checks["database"] = {"ok": False, "error": type(exc).__name__}
    checks["vector_store"] = vector_store
    checks["indexes"] = indexes
    ok = checks["database"]["ok"] and indexes["ok"]
    degraded = [name for name, check in checks.items() if not check["ok"]] if ok else []
    return {"ready": ok, "degraded": degraded, "checks": checks, "repaired_at_start": repaired}
