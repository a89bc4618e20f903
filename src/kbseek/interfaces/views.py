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
