"""Sections and context around a hit: one section by anchor or heading path, a hit grown to its section or
its neighbouring chunks. Over the in-memory indexes (no database reads)."""

from __future__ import annotations

from kbseek.core.answer import Candidate
from kbseek.core.markdown import normalize_heading
from kbseek.core.models import Chunk
from kbseek.errors import NotFoundError
from kbseek.core.models import DocumentCard
from kbseek.retrieval.indexes import Indexes


def document_chunks(indexes: Indexes, document_id: str) -> list[Chunk]:
    return [indexes.chunks[c] for c in indexes.documents[document_id].chunk_ids]


def expanded(indexes: Indexes, candidates: list[Candidate], how: str) -> list[Candidate]:
    """Each candidate grown to its section or its neighbours; chunks given once, by the best candidate."""
    if how == "none":
        return candidates
    used: set[str] = set()
    out = []
    for cand in candidates:
        chunk = cand.chunks[0]
        if chunk.id in used:
            continue
        siblings = document_chunks(indexes, chunk.document_id)
        if how == "section":
            group = [c for c in siblings if c.anchor == chunk.anchor]
        else:
            group = [c for c in siblings if abs(c.index - chunk.index) <= 1]
        group = [c for c in group if c.id not in used]
        used.update(c.id for c in group)
        out.append(Candidate(tuple(group), cand.score, cand.lanes, cand.level))
    return out


def find_section(indexes: Indexes, document_id: str, section: str) -> list[Chunk]:
    """The chunks of one section, named by anchor or by heading path (``A / B`` or ``A > B``), with sub-sections."""
    chunks = document_chunks(indexes, document_id)
    wanted = section.strip().lstrip("#").strip()
    exact = [c for c in chunks if c.anchor == wanted or c.anchor == wanted.lower()]
    if exact:
        head = exact[0].heading_path
        return [c for c in chunks if c.heading_path[: len(head)] == head]
    parts = tuple(p for p in (normalize_heading(x).casefold() for x in _split_path(wanted)) if p)
    for chunk in chunks:
        path = tuple(h.casefold() for h in chunk.heading_path)
        for start in range(len(path) - len(parts) + 1):
            if path[start:start + len(parts)] == parts:
                head = chunk.heading_path[: start + len(parts)]
                return [c for c in chunks if c.heading_path[: len(head)] == head]
    return []


def _split_path(text: str) -> list[str]:
    for sep in (" > ", " / ", ">", "/"):
        if sep in text:
            return text.split(sep)
    return [text]


def resolve_document(indexes: Indexes, name: str) -> DocumentCard:
    for doc in indexes.documents.values():
        if name in (doc.path, doc.id):
            return doc
    raise NotFoundError(f"no document with path or id {name!r}", hint="see 'kbseek docs list'")
