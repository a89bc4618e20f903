"""Plain-JSON views of core objects, shared by the CLI's ``--json`` and the REST API."""

from __future__ import annotations

from typing import Any

from kbseek.core.models import Chunk, StoredDocument


def chunk_view(chunk: Chunk) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": chunk.id,
        "index": chunk.index,
        "total": chunk.total,
        "breadcrumb": chunk.breadcrumb,
        "heading_path": list(chunk.heading_path),
        "anchor": chunk.anchor,
        "line_start": chunk.line_start,
        "line_end": chunk.line_end,
        "char_start": chunk.start,
        "char_end": chunk.end,
        "overlap": chunk.overlap,
        "content_hash": chunk.content_hash,
        "text": chunk.text,
    }
    for level in range(1, 7):
        view[f"heading_h{level}"] = chunk.heading(level)
    return view


def document_view(doc: StoredDocument, *, with_chunks: bool = False) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": doc.id,
        "path": doc.path,
        "category": doc.category,
        "file_name": doc.file_name,
        "title": doc.title,
        "title_source": doc.title_source,
        "summary": doc.summary,
        "summary_source": doc.summary_source,
        "keywords": list(doc.keywords),
        "frontmatter": doc.frontmatter,
        "warnings": list(doc.warnings),
        "content_hash": doc.content_hash,
        "size_bytes": doc.size_bytes,
        "chunk_count": doc.chunk_count,
        "origin": doc.origin,
        "created_at": doc.created_at,
        "updated_at": doc.updated_at,
    }
    if with_chunks:
        view["sections"] = [dict(s) for s in doc.outline]
        view["chunks"] = [chunk_view(c) for c in doc.chunks]
    return view


def hit_view(hit: Any) -> dict[str, Any]:
    chunk = hit.chunk
    return {
        "rank": hit.rank,
        "score": round(hit.score, 6),
        "document_id": chunk.document_id,
        "document_title": hit.document_title,
        "path": chunk.source_path,
        "category": chunk.category,
        "chunk_id": chunk.id,
        "chunk_index": chunk.index,
        "breadcrumb": chunk.breadcrumb,
        "heading_path": list(chunk.heading_path),
        "anchor": chunk.anchor,
        "line_start": chunk.line_start,
        "line_end": chunk.line_end,
        "text": chunk.text,
        "lanes": {name: lane_view(lane) for name, lane in hit.lanes.items()},
    }


def lane_view(lane: Any) -> dict[str, Any]:
    """The score fields an agent reads: ``score`` is distance-like (lower is closer) for the dense lane,
    ``raw_score`` what the lane computed, ``score_label`` which kind that is."""
    score = 1.0 - lane.score if lane.score_label == "similarity" else lane.score
    return {
        "rank": lane.rank,
        "score": round(score, 6),
        "raw_score": round(lane.score, 6),
        "score_label": lane.score_label,
    }


def filter_view(chosen: Any) -> dict[str, Any]:
    return {"category": chosen.category, "source": chosen.source, "relaxed": chosen.relaxed}


def search_view(result: Any) -> dict[str, Any]:
    return {
        "query": result.query,
        "request_id": result.request_id,
        "policy": result.policy,
        "notes": list(result.notes),
        "index_version": result.index_version,
        "filter": filter_view(result.filter),
        "hits": [hit_view(h) for h in result.hits],
        "timings_ms": result.timings_ms,
    }


def hint_view(hint: Any) -> dict[str, Any]:
    return {
        "matches": [
            {
                "document_id": m.document_id,
                "path": m.path,
                "title": m.title,
                "category": m.category,
                "score": m.score,
                "field": m.field,
                "exact": m.exact,
                "matched_keywords": list(m.matched_keywords),
            }
            for m in hint.matches
        ],
        "matched_keywords": list(hint.matched_keywords),
        "domains": list(hint.domains),
        "single_domain": hint.single_domain,
    }


def jsonable(value: Any) -> Any:
    """``value`` with every date and time in it (in dict values and list items, at any depth) as ISO text, so
    that ``json.dumps`` takes it: the records' rows as the CLI's ``--json`` and the REST API show them.

    >>> import datetime as dt
    >>> jsonable({"at": dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc), "calls": [{"on": dt.date(2026, 11, 1)}]})
    {'at': '2026-11-30T12:00:00+00:00', 'calls': [{'on': '2026-11-01'}]}
    """
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
