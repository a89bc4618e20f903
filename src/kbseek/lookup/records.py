"""What a ``lookup_knowledge`` call leaves behind: its ``tool_invocation`` row."""

from __future__ import annotations

from typing import Any

from kbseek.core.answer import Answer

PREVIEW_CHARS = 500
LANE_CANDIDATES = 10  # per lane, in the record (the answer holds at most 10 documents' pieces)


def preview(answer: Answer, limit: int = PREVIEW_CHARS) -> str:
    """The start of what the agent read: status, then each document and its first piece."""
    parts = [f"{answer.status} {answer.level}"]
    for entry in answer.documents:
        first = entry.pieces[0].text if entry.pieces else entry.content
        parts.append(f"[{entry.document.path}] " + " ".join(first.split())[:200])
    parts += [f"[DEDUPED {d.path}]" for d in answer.deduplicated]
    text = " | ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def layer(policy: str, l0_matches: int, l1_matches: int) -> str:
    """``retrieval_layer``: which layers produced the evidence."""
    if policy == "lexical":
        return "lexical"
    names = [name for name, count in (("L0", l0_matches), ("L1", l1_matches)) if count]
    return "+".join(names) or "none"


# What the notes of a lookup say, by kind (the notes themselves are for the agent to read)
FALLBACK_NOTES = (
    ("dense lane unavailable", "dense_unavailable"),
    ("vector store fallback", "vector_store_fallback"),
    ("the rewritten query found no confident match", "rewrite_original_query"),
    ("no document matches the filters", "filters_matched_nothing"),
    ("query truncated for the dense lane", "query_truncated"),
    ("reranker unavailable", "reranker_unavailable"),
)


def fallback_kinds(notes: tuple[str, ...], filter_relaxed: bool) -> list[str]:
    """
    >>> fallback_kinds(("dense lane unavailable: no embedder configured",), True)
    ['domain_filter_relaxed', 'dense_unavailable']
    """
    kinds = ["domain_filter_relaxed"] if filter_relaxed else []
    return kinds + [kind for prefix, kind in FALLBACK_NOTES if any(n.startswith(prefix) for n in notes)]


def success_row(response: Any, duration_ms: float) -> dict[str, Any]:
    answer = response.answer
    hint = response.hint
    ranked = response.ranked
    l1 = sum(1 for hit in ranked if "dense" in hit.lanes or "bm25" in hit.lanes)
    lanes_of = {hit.chunk.id: hit.lanes for hit in ranked}
    lanes: dict[str, list[dict[str, Any]]] = {}
    for hit in ranked:
        for name, lane in hit.lanes.items():
            lanes.setdefault(name, []).append(
                {"chunk_id": hit.chunk.id, "rank": lane.rank, "score": round(lane.score, 6)}
            )
    lanes = {name: sorted(found, key=lambda x: x["rank"])[:LANE_CANDIDATES] for name, found in lanes.items()}
    fused = [{"chunk_id": h.chunk.id, "score": round(h.score, 6)} for h in ranked[:10]]
    listed = {e["chunk_id"] for found in [*lanes.values(), fused] for e in found}
    paths = {h.chunk.id: h.chunk.source_path for h in ranked if h.chunk.id in listed}  # once each, not per lane
    details = {
        "l0_matches": [
            {"title": m.title, "path": m.path, "field": m.field, "exact": m.exact, "score": m.score}
            for m in hint.matches
        ],
        "l0_keywords": list(hint.matched_keywords),
        "domains": list(hint.domains),
        "filter": {
            "category": response.filter.category,
            "source": response.filter.source,
            "relaxed": response.filter.relaxed,
        },
        "filters": response.filters,
        "lanes": lanes,
        "fused": fused,
        "paths": paths,
        "evidence": [
            {
                "path": e.document.path,
                "form": e.form,
                "relevance": e.level,
                "anchors": [p.anchor for p in e.pieces],
                "lanes": sorted({lane for p in e.pieces for c in p.chunk_ids for lane in lanes_of.get(c, ())}),
            }
            for e in answer.documents
        ],
        "evidence_status": answer.evidence_status,
        "deduplicated": [
            {"path": d.path, "anchor": d.anchor, "first_call": d.first_call, "judged": d.judged}
            for d in answer.deduplicated
        ],
        "fallbacks": list(response.notes),
        "fallback_kinds": fallback_kinds(response.notes, response.filter.relaxed),
        "index_version": response.index_version,
        "embedding_model": response.embedding_model,
        "thresholds_source": response.thresholds.source,
        "legacy": response.legacy or None,
    }
    return {
        "tool_name": "lookup_knowledge",
        "session_id": response.session_id,
        "call": response.call,
        "request_id": response.request_id,
        "query": response.query,
        "policy": response.policy,
        "retrieval_layer": layer(response.policy, len(hint.matches), l1),
        "l0_match_count": len(hint.matches),
        "l1_match_count": l1,
        "retrieval_details": details,
        "relevance_level": answer.level,
        "dedup_reason": "; ".join(d.reason for d in answer.deduplicated) or None,
        "output_preview": preview(answer),
        "duration_ms": round(duration_ms, 3),
        "timings": response.timings_ms,
        "success": True,
        "error": None,
    }


def failure_row(
    request: Any, error: Exception, duration_ms: float, request_id: str = "", call: int | None = None
) -> dict[str, Any]:
    data = request if isinstance(request, dict) else (request.model_dump() if hasattr(request, "model_dump") else {})
    query = data.get("query")
    return {
        "tool_name": "lookup_knowledge",
        "session_id": data.get("session_id") if isinstance(data.get("session_id"), str) else None,
        "call": call,
        "request_id": request_id,
        "query": query if isinstance(query, str) else repr(query),
        "policy": str(data.get("policy") or ""),
        "retrieval_layer": "none",
        "l0_match_count": 0,
        "l1_match_count": 0,
        "retrieval_details": {},
        "relevance_level": "ERROR",
        "dedup_reason": None,
        "output_preview": "",
        "duration_ms": round(duration_ms, 3),
        "timings": {},
        "success": False,
        "error": f"{type(error).__name__}: {error}"[:2000],
    }
