"""The answer handed to an agent: evidence grouped by document, levelled, deduplicated, within a budget.

Content forms (seed 000 §3): ``chunks`` (the matching pieces, the default), ``compact_summary``
(title, summary, section headings and a body excerpt: 800 characters for a short document, 500 for a
long one, i.e. a body over ``LONG_DOCUMENT_CHARS``) and ``metadata_only`` (title, summary, keywords,
source: ~150 characters, for an L0 match whose content is given elsewhere or not needed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kbseek.core.models import Chunk
from kbseek.core.relevance import DEDUPED, NO_CONFIDENT_MATCH, REFERENCE, strongest
from kbseek.core.results import LaneScore

LONG_DOCUMENT_CHARS = 3000
EXCERPT_SHORT, EXCERPT_LONG = 800, 500
MIN_PIECE_CHARS = 200  # below this a truncated piece is dropped rather than cut
FORMS = ("chunks", "compact_summary", "metadata_only")
_HEADING = re.compile(r"^\s{0,3}(#{1,6}\s|=+\s*$|-+\s*$)")


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    id: str
    path: str
    title: str
    summary: str
    keywords: tuple[str, ...]
    category: str
    outline: tuple[dict[str, Any], ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Piece:
    """One or more consecutive chunks of a document, given as evidence."""

    chunk_ids: tuple[str, ...]
    breadcrumb: str
    anchor: str
    heading_path: tuple[str, ...]
    line_start: int
    line_end: int
    text: str
    score: float
    lanes: dict[str, LaneScore]
    level: str
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class DocumentEvidence:
    document: DocumentInfo
    form: str
    level: str
    pieces: tuple[Piece, ...] = ()
    content: str = ""  # the compact summary or metadata text for those forms
    source_url: str | None = None


@dataclass(frozen=True, slots=True)
class Deduplicated:
    document_id: str
    path: str
    title: str
    anchor: str | None  # None: the whole document (dedup by document)
    heading: str
    first_call: int
    reason: str
    level: str = DEDUPED


@dataclass(frozen=True, slots=True)
class Answer:
    status: str  # "answer" | "no_confident_match"
    level: str  # the strongest level given
    evidence_status: str  # complete | partial | none
    documents: tuple[DocumentEvidence, ...]
    deduplicated: tuple[Deduplicated, ...]
    completeness: str
    chars: int
    budget: int
    omitted: int
    closest: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Candidate:
    """A levelled hit (or a group of merged chunks) ready to be placed in the answer."""

    chunks: tuple[Chunk, ...]
    score: float
    lanes: dict[str, LaneScore]
    level: str

    @property
    def document_id(self) -> str:
        return self.chunks[0].document_id


def join_chunks(chunks: tuple[Chunk, ...]) -> str:
    """Consecutive chunks as one text, each overlap given once."""
    text, end = chunks[0].text, chunks[0].end
    for chunk in chunks[1:]:
        text += chunk.text[end - chunk.start:] if chunk.start <= end else "\n\n" + chunk.text
        end = max(end, chunk.end)
    return text


def cut(text: str, limit: int) -> tuple[str, bool]:
    """``text`` within ``limit`` characters, cut after the last sentence or line end when one is near."""
    if len(text) <= limit:
        return text, False
    head = text[:limit]
    stop = max(head.rfind(mark) for mark in ("。", "！", "？", "\n", ". ", "; ", "；"))
    if stop >= limit * 0.6:
        head = head[: stop + 1]
    return head.rstrip() + " …", True


def excerpt(body: str) -> str:
    """The body without heading lines and blank lines, cut to 800 (short) or 500 (long document) characters."""
    lines = [line.strip() for line in body.splitlines() if line.strip() and not _HEADING.match(line)]
    text = "\n".join(lines)
    return cut(text, EXCERPT_LONG if len(body) > LONG_DOCUMENT_CHARS else EXCERPT_SHORT)[0]


def compact_summary(doc: DocumentInfo, body: str) -> str:
    """Seed 000 ``buildCompactSummary``: what to give when this document is all the agent gets."""
    parts = [f"文档 Document: {doc.title}"]
    if doc.summary:
        parts.append(f"摘要 Summary: {doc.summary}")
    headings = [s["heading"] for s in doc.outline if s.get("level") == 2] or [s["heading"] for s in doc.outline]
    if headings:
        parts.append("章节 Sections:\n" + "\n".join(f"- {h}" for h in headings[:20]))
    parts.append("---\n" + excerpt(body))
    return "\n".join(parts)


def metadata_only(doc: DocumentInfo) -> str:
    """Seed 000 ``buildMetadataOnlySummary``: the document exists and is about this; no body."""
    parts = [f"文档 Document: {doc.title}"]
    if doc.summary:
        parts.append(f"摘要 Summary: {doc.summary}")
    if doc.keywords:
        parts.append(f"关键词 Keywords: {', '.join(doc.keywords)}")
    parts.append(f"来源 Source: {doc.path}")
    return "\n".join(parts)


def dedup_key(chunk: Chunk, mode: str) -> str:
    """What a session remembers as given: the document and section (default) or the document."""
    return chunk.document_id if mode == "document" else f"{chunk.document_id}#{chunk.anchor}"


def source_url(template: str | None, doc: DocumentInfo, anchor: str = "", line: int | None = None) -> str | None:
    """``template`` with ``{path}``, ``{category}``, ``{anchor}``, ``{line}`` filled in, or ``None``."""
    if not template:
        return None
    return template.format(path=doc.path, category=doc.category, anchor=anchor, line=line or 1)


@dataclass(slots=True)
class Budget:
    limit: int
    per_document: int
    used: int = 0
    omitted: int = 0

    def take(self, text: str) -> tuple[str, bool] | None:
        room = self.limit - self.used
        if room < min(MIN_PIECE_CHARS, len(text)):
            self.omitted += 1
            return None
        text, truncated = cut(text, room)
        self.used += len(text)
        return text, truncated


def assemble(
    candidates: list[Candidate],
    documents: dict[str, DocumentInfo],
    *,
    seen: dict[str, int],
    dedup_mode: str = "section",
    budget_chars: int = 6000,
    per_document: int = 3,
    url_template: str | None = None,
    extra: list[DocumentEvidence] | None = None,
) -> Answer:
    """Group ``candidates`` (best first, already levelled) by document under the caps and budget.

    ``seen`` maps dedup keys to the session call that first gave them; those become pointers.
    ``extra`` are non-chunk entries (compact summaries, metadata-only L0 matches) placed after.
    """
    budget = Budget(budget_chars, per_document)
    grouped: dict[str, list[Piece]] = {}
    deduplicated: dict[str, Deduplicated] = {}
    for cand in candidates:
        first = cand.chunks[0]
        doc = documents[cand.document_id]
        key = dedup_key(first, dedup_mode)
        if key in seen:
            if key not in deduplicated:
                anchor = None if dedup_mode == "document" else first.anchor
                heading = doc.title if anchor is None else (first.breadcrumb or doc.title)
                deduplicated[key] = Deduplicated(doc.id, doc.path, doc.title, anchor, heading, seen[key],
                                                 f"already given in call {seen[key]} of this session")
            continue
        pieces = grouped.setdefault(doc.id, [])
        if len(pieces) >= per_document:
            budget.omitted += 1
            continue
        taken = budget.take(join_chunks(cand.chunks))
        if taken is None:
            if not pieces:
                del grouped[doc.id]
            continue
        last = cand.chunks[-1]
        pieces.append(Piece(tuple(c.id for c in cand.chunks), first.breadcrumb, first.anchor, first.heading_path,
                            first.line_start, last.line_end, taken[0], cand.score, cand.lanes, cand.level,
                            taken[1]))
    entries = [
        DocumentEvidence(documents[d], "chunks", strongest([p.level for p in pieces]), tuple(pieces),
                         source_url=source_url(url_template, documents[d], pieces[0].anchor, pieces[0].line_start))
        for d, pieces in grouped.items()
    ]
    for entry in extra or []:
        doc = entry.document
        if doc.id in grouped:
            continue
        if entry.form == "compact_summary" and doc.id in seen:  # a summary is remembered per document
            deduplicated.setdefault(doc.id, Deduplicated(doc.id, doc.path, doc.title, None, doc.title, seen[doc.id],
                                                         f"already given in call {seen[doc.id]} of this session"))
            continue
        taken = budget.take(entry.content)
        if taken is not None:
            entries.append(DocumentEvidence(doc, entry.form, entry.level, content=taken[0],
                                            source_url=source_url(url_template, doc)))
    levels = [e.level for e in entries]
    truncated = any(p.truncated for e in entries for p in e.pieces)
    if not entries and not deduplicated:
        evidence_status = "none"
    elif budget.omitted or truncated or (levels and strongest(levels) == REFERENCE):
        evidence_status = "partial"
    else:
        evidence_status = "complete"
    return Answer(
        status="answer" if entries or deduplicated else "no_confident_match",
        level=strongest(levels) if levels else (DEDUPED if deduplicated else NO_CONFIDENT_MATCH),
        evidence_status=evidence_status,
        documents=tuple(entries),
        deduplicated=tuple(deduplicated.values()),
        completeness=completeness(entries, list(deduplicated.values()), budget, truncated),
        chars=budget.used,
        budget=budget_chars,
        omitted=budget.omitted,
    )


def completeness(entries: list[DocumentEvidence], deduplicated: list[Deduplicated], budget: Budget,
                 truncated: bool) -> str:
    """One sentence telling the agent how far to trust this answer and how to get more."""
    if not entries and not deduplicated:
        return ("No confident match in the knowledge base: do not cite it for this question; rephrase with an "
                "error code, alert name or component, or treat the topic as not documented.")
    notes = []
    if entries:
        best = strongest([e.level for e in entries])
        notes.append(f"{len(entries)} document(s); strongest evidence {best}.")
        if best == REFERENCE:
            notes.append("Only reference-level evidence: related, not a confirmed answer.")
    if deduplicated:
        calls = sorted({d.first_call for d in deduplicated})
        notes.append(f"{len(deduplicated)} item(s) already given earlier in this session (call "
                     f"{', '.join(map(str, calls))}); not repeated.")
    if budget.omitted or truncated:
        notes.append(f"Cut to the {budget.limit}-character budget ({budget.omitted} item(s) left out); ask for a "
                     "document section (section=PATH#ANCHOR) or expand=section for the full text.")
    sections = sum(1 for e in entries for s in e.document.outline) - sum(len(e.pieces) for e in entries)
    if sections > 0 and not (budget.omitted or truncated):
        notes.append("Other sections of these documents are listed in available_sections.")
    return " ".join(notes)
