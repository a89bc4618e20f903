"""Sections and context around a hit: one section by anchor or heading path, a hit grown to its section or
its neighbouring chunks. Over the in-memory indexes (no database reads)."""

from __future__ import annotations

from collections.abc import Sequence

from kbseek.core.answer import Candidate
from kbseek.core.markdown import normalize_heading
from kbseek.core.models import Chunk, DocumentCard
from kbseek.errors import NotFoundError
from kbseek.retrieval.indexes import Indexes

LISTED = 40  # documents or sections named in a not-found hint


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
            if path[start : start + len(parts)] == parts:
                head = chunk.heading_path[: start + len(parts)]
                return [c for c in chunks if c.heading_path[: len(head)] == head]
    return []


def _split_path(text: str) -> list[str]:
    for sep in (" > ", " / ", ">", "/"):
        if sep in text:
            return text.split(sep)
    return [text]


def resolve_document(indexes: Indexes, name: str, *, by_name: bool = False) -> DocumentCard:
    """A document by path or id; with ``by_name`` also by file name, file stem or title when exactly one
    document has it. ``lookup_knowledge(section=...)`` takes paths and ids only (a path it gave); an agent asking
    for a section by what it read in a text (``get_document_section``) may name the document ``by_name``, and a
    name several documents share is refused with their paths."""
    for doc in indexes.documents.values():
        if name in (doc.path, doc.id):
            return doc
    if not by_name:
        raise NotFoundError(f"no document with path or id {name!r}", hint="see 'kbseek docs list'")
    docs = sorted(indexes.documents.values(), key=lambda d: d.path)
    wanted = name.strip("/").casefold()
    matches = [d for d in docs if wanted in _names(d)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise NotFoundError(
            f"document name {name!r} is ambiguous", hint="name one by its path: " + _listing([d.path for d in matches])
        )
    listing = ("documents: " + _listing([d.path for d in docs])) if docs else "the knowledge base is empty"
    raise NotFoundError(f"no document {name!r}", hint=listing)


def section_reference(indexes: Indexes, document: str, section: str) -> str:
    """The ``section`` parameter of ``lookup_knowledge`` (``path#section``) for a section of a document named
    ``by_name`` (:func:`resolve_document`); ``NotFoundError`` listing the document's sections when it has none
    by that name."""
    doc = resolve_document(indexes, document, by_name=True)
    if not find_section(indexes, doc.id, section):
        sections = [
            s["anchor"] if s["anchor"] == s["heading"] else f"{s['anchor']} ({s['heading']})" for s in doc.outline
        ]
        raise NotFoundError(
            f"document {doc.path!r} has no section {section!r}", hint="its sections: " + _listing(sections)
        )
    name = doc.id if "#" in doc.path else doc.path  # the section parameter splits at the first '#'
    return f"{name}#{section}"


def _names(doc: DocumentCard) -> set[str]:
    file_name = doc.path.rsplit("/", 1)[-1]
    return {file_name.casefold(), file_name.rsplit(".", 1)[0].casefold(), doc.title.casefold()}


def _listing(items: Sequence[str]) -> str:
    more = len(items) - LISTED
    return ", ".join(items[:LISTED]) + (f" … and {more} more" if more > 0 else "")
