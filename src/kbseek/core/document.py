"""From raw bytes to a parsed, chunked document: the pure half of ingestion."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kbseek.core.frontmatter import parse_frontmatter
from kbseek.core.ids import document_id, sha256_hex
from kbseek.core.markdown import LimitError, chunk_document, unclosed_fence_line
from kbseek.core.models import ParsedDocument
from kbseek.core.paths import category_for, safe_document_path
from kbseek.errors import DocumentError, TooLargeError


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    """How documents are cut, and how much one document may hold; validated at construction.

    The ``max_*`` bounds keep one document from costing everybody else: every chunk is analysed, indexed
    twice in memory and embedded, every keyword joins the analyser's dictionary. A document over one is
    refused with an error naming the file and the limit.

    >>> ChunkingConfig(chunk_size=50)
    Traceback (most recent call last):
    ValueError: chunk_size must be at least 100 characters, got 50
    """

    chunk_size: int = 800
    overlap: int = 100
    max_file_bytes: int = 2_000_000
    max_chunks: int = 2000
    max_headings: int = 2000
    max_keywords: int = 100
    max_frontmatter_values: int = 1000

    def __post_init__(self) -> None:
        if self.chunk_size < 100:
            raise ValueError(f"chunk_size must be at least 100 characters, got {self.chunk_size}")
        if not 0 <= self.overlap < self.chunk_size // 2:
            raise ValueError(f"overlap must be in [0, {self.chunk_size // 2}), got {self.overlap}")


def decode_markdown(data: bytes, *, source: str, max_bytes: int) -> str:
    """UTF-8 text of a Markdown file, or a :class:`DocumentError` saying why not."""
    if len(data) > max_bytes:
        raise TooLargeError(
            f"file is {len(data):,} bytes, over the limit of {max_bytes:,}",
            source=source,
            hint="split the document or raise KBSEEK_MAX_FILE_BYTES",
        )
    nul = data.find(b"\0")
    if nul >= 0:
        raise DocumentError(
            f"file is binary (NUL byte at offset {nul})",
            source=source,
            hint="only UTF-8 Markdown text can be ingested",
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DocumentError(
            f"file is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            source=source,
            line=line,
            hint="convert it, e.g. 'iconv -f GB18030 -t UTF-8'",
        ) from exc
    return text


def parse_document(
    data: bytes,
    *,
    path: str,
    config: ChunkingConfig,
    category: str | None = None,
    source: str | None = None,
    timings: dict[str, float] | None = None,
) -> ParsedDocument:
    """Decode, parse frontmatter, chunk: everything about a document that needs no I/O.

    ``path`` is the document's identity in the knowledge base; ``source`` names the file in
    messages (defaults to ``path``); ``category`` overrides the frontmatter's; ``timings``, when
    given, receives ``parse_ms`` and ``chunk_ms``.
    """
    started = time.perf_counter()
    path = safe_document_path(path)
    source = source or path
    text = decode_markdown(data, source=source, max_bytes=config.max_file_bytes)
    if not text.strip():
        raise DocumentError("file is empty", source=source, hint="write a title and some content")
    file_name = path.rsplit("/", 1)[-1]
    fm = parse_frontmatter(
        text,
        source=source,
        file_name=file_name,
        max_keywords=config.max_keywords,
        max_values=config.max_frontmatter_values,
    )
    resolved_category = category_for(path, fm.category, category)
    doc_id = document_id(path)
    parsed = time.perf_counter()
    try:
        sections, chunks = chunk_document(
            text,
            body_offset=fm.body_offset,
            path=path,
            document_id=doc_id,
            title=fm.title,
            category=resolved_category,
            chunk_size=config.chunk_size,
            overlap=config.overlap,
            max_headings=config.max_headings,
            max_chunks=config.max_chunks,
        )
    except LimitError as exc:
        setting = "KBSEEK_MAX_HEADINGS_PER_DOCUMENT" if exc.what == "headings" else "KBSEEK_MAX_CHUNKS_PER_DOCUMENT"
        raise TooLargeError(
            f"document has {exc}, over the limit of {exc.limit:,} per document",
            source=source,
            hint=f"split it into several documents, or raise {setting}",
        ) from None
    if timings is not None:
        timings["parse_ms"] = round((parsed - started) * 1000, 3)
        timings["chunk_ms"] = round((time.perf_counter() - parsed) * 1000, 3)
    warnings = []
    if fm.missing:
        warnings.append(
            f"{source}: frontmatter is missing required field(s) {', '.join(fm.missing)}; "
            f"stored and searchable by content, title from {fm.title_source}"
        )
    fence_line = unclosed_fence_line(text, fm.body_offset)
    if fence_line is not None:
        warnings.append(f"{source}:{fence_line}: code fence is never closed; the rest of the file is treated as code")
    if not chunks:
        warnings.append(f"{source}: document has no body text; only its metadata is searchable")
    return ParsedDocument(
        id=doc_id,
        path=path,
        category=resolved_category,
        file_name=file_name,
        text=text,
        content_hash=sha256_hex(data),
        size_bytes=len(data),
        frontmatter=fm,
        sections=tuple(sections),
        chunks=tuple(chunks),
        warnings=tuple(warnings),
    )


def shared_keywords(keywords_by_path: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Keywords (case-insensitive) that more than one document declares (``kbseek docs lint``): an L0 hint on
    one of them cannot tell those documents apart.

    >>> shared_keywords({"a.md": ("超时", "x"), "b.md": ("超时",)})
    {'超时': ['a.md', 'b.md']}
    """
    owners: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(keywords_by_path):
        for keyword in keywords_by_path[path]:
            _, paths = owners.setdefault(keyword.casefold(), (keyword, []))
            paths.append(path)
    return {display: paths for display, paths in owners.values() if len(paths) > 1}


def keyword_lint(keywords_by_path: dict[str, tuple[str, ...]]) -> list[dict[str, Any]]:
    """:func:`shared_keywords` as lint items: each should name one document, or L0 hints on it are ambiguous.

    >>> keyword_lint({"a.md": ("超时",), "b.md": ("超时",)})[0]["message"]
    "keyword '超时' is shared by 2 documents: a.md, b.md"
    """
    return [
        {
            "keyword": keyword,
            "paths": paths,
            "message": f"keyword {keyword!r} is shared by {len(paths)} documents: {', '.join(paths)}",
        }
        for keyword, paths in shared_keywords(keywords_by_path).items()
    ]
