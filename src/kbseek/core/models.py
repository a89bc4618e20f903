"""Frozen value objects passed between the core, the service and the adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Frontmatter:
    """Validated frontmatter plus the stand-ins used when required fields are missing.

    ``title``/``summary`` are always set (the frontmatter's, else derived: see
    ``title_source``/``summary_source``); ``keywords`` are never invented.
    """

    title: str
    summary: str
    keywords: tuple[str, ...]
    category: str | None
    fields: dict[str, Any]
    title_source: str  # "frontmatter" | "h1" | "filename"
    summary_source: str  # "frontmatter" | "first_line" | "none"
    missing: tuple[str, ...]
    body_offset: int  # character offset of the body in the file text
    body_line: int  # 1-based line number of the body's first line


@dataclass(frozen=True, slots=True)
class Section:
    """A heading and everything under it up to the next heading (the preamble has no heading)."""

    level: int  # 0 for the preamble
    heading: str
    headings: tuple[tuple[int, str], ...]  # the heading stack, outermost first
    anchor: str
    start: int  # character offsets in the file text, end exclusive
    end: int

    @property
    def heading_path(self) -> tuple[str, ...]:
        return tuple(heading for _, heading in self.headings)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrievable piece of a document, an exact slice ``text == file_text[start:end]``.

    ``headings`` is the heading stack as ``(level, heading)`` pairs, outermost first.
    """

    id: str
    document_id: str
    index: int
    total: int
    title: str
    breadcrumb: str
    headings: tuple[tuple[int, str], ...]
    anchor: str
    category: str
    source_path: str
    text: str
    content_hash: str
    start: int
    end: int
    line_start: int
    line_end: int
    overlap: int = 0  # leading characters repeated from the previous chunk

    @property
    def heading_path(self) -> tuple[str, ...]:
        return tuple(heading for _, heading in self.headings)

    def heading(self, level: int) -> str | None:
        """``heading_h1``..``heading_h6``: the heading of that level above the chunk, if any."""
        return next((heading for lvl, heading in self.headings if lvl == level), None)


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """A document after parsing and chunking, ready to be stored."""

    id: str
    path: str
    category: str
    file_name: str
    text: str
    content_hash: str
    size_bytes: int
    frontmatter: Frontmatter
    sections: tuple[Section, ...]
    chunks: tuple[Chunk, ...]
    warnings: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class DocumentCard:
    """A document as everything above the database knows it, without its text: what L0 matches on (title,
    summary, keywords, category), what an answer cites (path, outline, frontmatter fields) and what the
    in-memory indexes hold (its chunk ids, its content hash).

    >>> card = DocumentCard(id="d1", path="api/pay.md", title="支付网关错误码", summary="错误码含义",
    ...                     keywords=("ERR_TIMEOUT",), category="api")
    >>> card.chunk_ids, card.outline
    ((), ())
    """

    id: str
    path: str
    title: str
    summary: str
    keywords: tuple[str, ...]
    category: str
    outline: tuple[dict[str, Any], ...] = ()  # the sections: anchor, heading, level, line
    fields: dict[str, Any] = field(default_factory=dict)  # the frontmatter as written
    content_hash: str = ""
    chunk_ids: tuple[str, ...] = ()  # in document order
    updated_at: str = ""  # when the stored version was written (ISO): a document's age without 'last_reviewed'
    origin: str | None = None  # where it came from (``core.origins``): what ``{commit}`` in a source link names


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """A document as the system of record holds it (chunks loaded only when asked)."""

    id: str
    path: str
    category: str
    file_name: str
    title: str
    summary: str
    keywords: tuple[str, ...]
    frontmatter: dict[str, Any]
    title_source: str
    summary_source: str
    warnings: tuple[str, ...]
    outline: tuple[dict[str, Any], ...]
    content_hash: str
    size_bytes: int
    chunk_count: int
    origin: str | None
    created_at: str
    updated_at: str
    chunks: tuple[Chunk, ...] = ()
