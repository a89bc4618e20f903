"""Mapping between the core's document types and the rows of the documents and chunks tables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kbseek.adapters.sql.tables import ChunkRow, DocumentRow
from kbseek.core.models import Chunk, ParsedDocument, StoredDocument


def document_values(doc: ParsedDocument, origin: str | None) -> dict[str, Any]:
    fm = doc.frontmatter
    return {
        "id": doc.id,
        "path": doc.path,
        "category": doc.category,
        "file_name": doc.file_name,
        "title": fm.title,
        "summary": fm.summary,
        "keywords": list(fm.keywords),
        "frontmatter": fm.fields,
        "title_source": fm.title_source,
        "summary_source": fm.summary_source,
        "warnings": list(doc.warnings),
        "outline": [
            {"level": s.level, "heading": s.heading, "anchor": s.anchor, "line": doc.text.count("\n", 0, s.start) + 1}
            for s in doc.sections
            if s.level
        ],
        "content": doc.text,
        "content_hash": doc.content_hash,
        "size_bytes": doc.size_bytes,
        "chunk_count": len(doc.chunks),
        "origin": origin,
    }


def chunk_values(chunk: Chunk) -> dict[str, Any]:
    values: dict[str, Any] = {
        "id": chunk.id,
        "document_id": chunk.document_id,
        "chunk_index": chunk.index,
        "total_chunks": chunk.total,
        "breadcrumb": chunk.breadcrumb,
        "headings": [list(pair) for pair in chunk.headings],
        "anchor": chunk.anchor,
        "text": chunk.text,
        "content_hash": chunk.content_hash,
        "char_start": chunk.start,
        "char_end": chunk.end,
        "line_start": chunk.line_start,
        "line_end": chunk.line_end,
        "overlap": chunk.overlap,
    }
    for level in range(1, 7):
        values[f"heading_h{level}"] = chunk.heading(level)
    return values


def stored_document(row: DocumentRow, chunks: Iterable[ChunkRow]) -> StoredDocument:
    return StoredDocument(
        id=row.id,
        path=row.path,
        category=row.category,
        file_name=row.file_name,
        title=row.title,
        summary=row.summary,
        keywords=tuple(row.keywords or ()),
        frontmatter=dict(row.frontmatter or {}),
        title_source=row.title_source,
        summary_source=row.summary_source,
        warnings=tuple(row.warnings or ()),
        outline=tuple(row.outline or ()),
        content_hash=row.content_hash,
        size_bytes=row.size_bytes,
        chunk_count=row.chunk_count,
        origin=row.origin,
        created_at=row.created_at.isoformat(),
        updated_at=row.updated_at.isoformat(),
        chunks=tuple(
            Chunk(
                id=c.id,
                document_id=c.document_id,
                index=c.chunk_index,
                total=c.total_chunks,
                title=row.title,
                breadcrumb=c.breadcrumb,
                headings=tuple((int(level), str(h)) for level, h in c.headings),
                anchor=c.anchor,
                category=row.category,
                source_path=row.path,
                text=c.text,
                content_hash=c.content_hash,
                start=c.char_start,
                end=c.char_end,
                line_start=c.line_start,
                line_end=c.line_end,
                overlap=c.overlap,
            )
            for c in chunks
        ),
    )
