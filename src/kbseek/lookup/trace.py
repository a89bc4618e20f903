"""A session's diagnosis trace, built from its recorded ``lookup_knowledge`` calls and the evidence given: what
the agent asked, in order, what each call answered, and which documents (and sections) it has already seen."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kbseek.errors import NotFoundError


def session_trace(
    session_id: str,
    *,
    calls: list[dict[str, Any]],
    given: Iterable[Mapping[str, Any]],
    paths: Mapping[str, str],
    feedback: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The trace of ``session_id`` from its recorded ``calls`` (oldest first), the evidence ``given`` rows
    (document id, call, anchor), the current ``paths`` of document ids (a deleted document has none) and the
    ``feedback`` readers sent on its calls (``kbseek.lookup.feedback``), each also under its call."""
    if not calls:
        raise NotFoundError(f"no lookup recorded for session {session_id!r}")
    seen: dict[str, dict[str, Any]] = {}
    for row in given:
        entry = seen.setdefault(
            row["document_id"],
            {
                "document_id": row["document_id"],
                "path": paths.get(row["document_id"]),
                "first_call": row["call"],
                "anchors": [],
            },
        )
        if row["anchor"] is not None:
            entry["anchors"].append(row["anchor"])
    reports = list(feedback)
    return {
        "session_id": session_id,
        "calls": [
            {
                "call": c["call"],
                "request_id": c["request_id"],
                "query": c["query"],
                "policy": c["policy"],
                "success": c["success"],
                "error": c["error"],
                "relevance_level": c["relevance_level"],
                "evidence_status": c["retrieval_details"].get("evidence_status"),
                "evidence": c["retrieval_details"].get("evidence", []),
                "deduplicated": c["retrieval_details"].get("deduplicated", []),
                "duration_ms": c["duration_ms"],
                "at": c["created_at"].isoformat(),
                "feedback": [
                    {"verdict": f["verdict"], "chunk_ids": f["chunk_ids"], "note": f["note"]}
                    for f in reports
                    if f["request_id"] == c["request_id"]
                ],
            }
            for c in calls
        ],
        "documents_seen": list(seen.values()),
        "feedback": [dict(f) for f in reports],
    }
