"""``lookup_knowledge`` responses as JSON (``schemas/lookup-answer.schema.json``), as text for an LLM's
context, and in the legacy shape older agents of the original service read (``found`` / ``primary`` /
``supplement``)."""

from __future__ import annotations

from typing import Any

from kbseek.core.answer import DocumentEvidence, Piece
from kbseek.core.modes import ANSWER_FORMATS
from kbseek.lookup.review import review_view
from kbseek.lookup.views import filter_view, hint_view, lane_view

FORMATS = ANSWER_FORMATS


def piece_view(piece: Piece, review: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "chunk_ids": list(piece.chunk_ids),
        "breadcrumb": piece.breadcrumb,
        "anchor": piece.anchor,
        "heading_path": list(piece.heading_path),
        "line_start": piece.line_start,
        "line_end": piece.line_end,
        "text": piece.text,
        "truncated": piece.truncated,
        "score": round(piece.score, 6),
        "lanes": {name: lane_view(lane) for name, lane in piece.lanes.items()},
        "relevance": piece.level,
        **(review or {}),
    }


def document_evidence_view(entry: DocumentEvidence) -> dict[str, Any]:
    doc = entry.document
    review = review_view(entry.review)
    return {
        "document_id": doc.id,
        "title": doc.title,
        "source_path": doc.path,
        "source_url": entry.source_url,
        "category": doc.category,
        "summary": doc.summary,
        "keywords": list(doc.keywords),
        "form": entry.form,
        "relevance": entry.level,
        "content": entry.content or None,
        "items": [piece_view(p, review) for p in entry.pieces],
        "available_sections": [
            {"anchor": s["anchor"], "heading": s["heading"], "level": s["level"], "line": s.get("line")}
            for s in doc.outline
        ],
        **review,
        **({} if entry.review is None else {"owner": entry.review.owner, "review_due": _day(entry.review.due)}),
    }


def _day(day: Any) -> str | None:
    return None if day is None else day.isoformat()


def response_view(response: Any) -> dict[str, Any]:
    answer = response.answer
    t = response.thresholds
    return {
        "tool": "lookup_knowledge",
        "query": response.query,
        "request_id": response.request_id,
        "session_id": response.session_id,
        "call": response.call,
        "policy": response.policy,
        "status": answer.status,
        "relevance": answer.level,
        "evidence_status": answer.evidence_status,
        "completeness": answer.completeness,
        "hint": {**hint_view(response.hint), "filter": filter_view(response.filter), "filters": response.filters},
        "documents": [document_evidence_view(e) for e in answer.documents],
        "deduplicated": [
            {
                "document_id": d.document_id,
                "source_path": d.path,
                "title": d.title,
                "anchor": d.anchor,
                "heading": d.heading,
                "first_call": d.first_call,
                "reason": d.reason,
                "relevance": d.level,
                "judged": d.judged,
            }
            for d in answer.deduplicated
        ],
        "closest": list(answer.closest),
        "budget": {"chars": answer.chars, "limit": answer.budget, "omitted": answer.omitted},
        "thresholds": {
            "similarity_high": _finite(t.similarity_high),
            "similarity_low": _finite(t.similarity_low),
            "coverage_high": t.coverage_high,
            "coverage_low": t.coverage_low,
            "source": t.source,
        },
        "rewrite": None
        if response.rewrite is None
        else {"additions": list(response.rewrite.additions), "variants": list(response.rewrite.variants)},
        "legacy": response.legacy or None,
        "notes": list(response.notes),
        "index_version": response.index_version,
        "embedding_model": response.embedding_model,
        "timings_ms": response.timings_ms,
    }


def _finite(value: float) -> float | None:
    return value if value not in (float("inf"), float("-inf")) else None


def render_text(response: Any) -> str:
    """The answer as an agent should read it: levels and sources first, then the evidence."""
    answer = response.answer
    lines = [
        f"lookup_knowledge: {response.query}",
        f"status: {answer.status} · relevance: {answer.level} · evidence: {answer.evidence_status}",
        answer.completeness,
    ]
    for n, entry in enumerate(answer.documents, 1):
        doc = entry.document
        lines += [
            "",
            f"[{n}] {doc.title} ({entry.level}) — {doc.path}" + (f" <{entry.source_url}>" if entry.source_url else ""),
        ]
        if entry.review is not None and entry.review.stale:
            lines.append(f"  STALE: past its review date ({entry.review.age_days} days old); verify before acting")
        if entry.content:
            lines.append(entry.content)
        for piece in entry.pieces:
            lines.append(f"  § {piece.breadcrumb} (lines {piece.line_start}-{piece.line_end}, {piece.level})")
            lines += ["    " + line for line in piece.text.strip().splitlines()]
        others = [s["heading"] for s in doc.outline if s["anchor"] not in {p.anchor for p in entry.pieces}]
        if others and entry.pieces:
            lines.append(f"  more sections: {' | '.join(others[:12])}")
    if answer.closest:
        lines.append("Closest documents (below the confidence thresholds; not evidence):")
        lines += [f"  - {c['title']} — {c['source_path']}#{c['anchor']}" for c in answer.closest]
    for d in answer.deduplicated:
        where = f"{d.path}#{d.anchor}" if d.anchor else d.path
        lines.append(f"[DEDUPED, {d.judged} for this question] {d.heading} — {where}: {d.reason}")
    return "\n".join(lines)


def legacy_view(response: Any) -> dict[str, Any]:
    """The original service's tool shape: the first document is ``primary``, the rest ``supplement``."""
    entries = response.answer.documents
    legacy = response.legacy or {}
    if not entries:
        return {"found": False, "primary": None, "supplement": None}
    if "primary" in legacy:  # several L0 matches with L1: the first match's metadata, all L1 pieces after
        pieces = [p for e in entries for p in e.pieces]
        return {
            "found": True,
            "primary": {
                "content": legacy["primary"]["content"],
                "source": f"knowledge_base/{legacy['primary']['source_path']}",
                "matchType": "exact_L0",
                "confidence": legacy["confidence"],
            },
            "supplement": {
                "content": "\n\n".join(f"[{p.breadcrumb}]\n{p.text}" for p in pieces),
                "matchType": "semantic_L1",
                "sources": sorted({e.document.path for e in entries if e.pieces}),
            }
            if pieces
            else None,
        }
    first, rest = entries[0], entries[1:]
    from_l0 = first.form in ("compact_summary", "metadata_only")
    primary = {
        "content": first.content or "\n\n".join(p.text for p in first.pieces),
        "source": f"knowledge_base/{first.document.path}",
        "matchType": legacy.get("matchType", "exact_L0" if from_l0 else "semantic_L1"),
        "confidence": legacy.get("confidence", _confidence(first.level)),
    }
    pieces = [p for e in ([first] if from_l0 else []) + list(rest) for p in e.pieces]
    if from_l0:
        pieces = [p for e in rest for p in e.pieces] + list(first.pieces)
    supplement = None
    if pieces:
        supplement = {
            "content": "\n\n".join(f"[{p.breadcrumb}]\n{p.text}" for p in pieces),
            "matchType": "semantic_L1",
            "sources": sorted(
                {e.document.path for e in rest} | ({first.document.path} if first.pieces and from_l0 else set())
            ),
        }
    return {"found": True, "primary": primary, "supplement": supplement}


def _confidence(level: str) -> str:
    return {"PRECISE": "high", "HIGHLY_RELEVANT": "high", "REFERENCE": "low"}.get(level, "low")
