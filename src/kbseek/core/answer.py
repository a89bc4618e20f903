"""The answer handed to an agent: evidence grouped by document, levelled, deduplicated, within a budget.

Content forms: ``chunks`` (the matching pieces, the default), ``compact_summary``
(title, summary, section headings and a body excerpt: 800 characters for a short document, 500 for a
long one, i.e. a body over ``LONG_DOCUMENT_CHARS``) and ``metadata_only`` (title, summary, keywords,
source: ~150 characters, for an L0 match whose content is given elsewhere or not needed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from kbseek.core.completeness import completeness, strongest_given
from kbseek.core.models import Chunk, DocumentCard
from kbseek.core.origins import git_origin
from kbseek.core.relevance import (  # HIGHLY_RELEVANT, PRECISE: used by the doctests
    DEDUPED,
    HIGHLY_RELEVANT,  # noqa: F401
    LEVEL_ORDER,
    NO_CONFIDENT_MATCH,
    PRECISE,  # noqa: F401
    REFERENCE,
    strongest,
)
from kbseek.core.results import LaneScore
from kbseek.core.staleness import Staleness

LONG_DOCUMENT_CHARS = 3000
EXCERPT_SHORT, EXCERPT_LONG = 800, 500
MIN_PIECE_CHARS = 200  # below this a truncated piece is dropped rather than cut
FORMS = ("chunks", "compact_summary", "metadata_only")
_HEADING = re.compile(r"^\s{0,3}(#{1,6}\s|=+\s*$|-+\s*$)")


@dataclass(frozen=True, slots=True)
class Piece:
    """One or more chunks of one section of a document, in document order, given as evidence (text left out
    between two of them is marked with an ellipsis line, and the line range spans it)."""

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
    document: DocumentCard
    form: str
    level: str
    pieces: tuple[Piece, ...] = ()
    content: str = ""  # the compact summary or metadata text for those forms
    source_url: str | None = None
    review: Staleness | None = None  # the document's age and whether it is past review (``lookup.review``)


@dataclass(frozen=True, slots=True)
class Deduplicated:
    document_id: str
    path: str
    title: str
    anchor: str | None  # None: the whole document (dedup by document)
    heading: str
    first_call: int
    reason: str
    judged: str = REFERENCE  # the level this question gave it: a follow-up's best evidence may be one already given
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
    # when hits of its section were merged into it: each hit's own chunks, best first (what fits, if all won't)
    hits: tuple[tuple[Chunk, ...], ...] = ()

    @property
    def document_id(self) -> str:
        return self.chunks[0].document_id


def join_chunks(chunks: tuple[Chunk, ...]) -> str:
    """Chunks in document order as one text, each overlap given once, and text left out between two chunks
    marked with an ellipsis line."""
    text, end = chunks[0].text, chunks[0].end
    for chunk in chunks[1:]:
        text += chunk.text[end - chunk.start :] if chunk.start <= end else "\n\n…\n\n" + chunk.text
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


def compact_summary(doc: DocumentCard, body: str) -> str:
    """The compact summary: what to give when this document is all the agent gets."""
    parts = [f"文档 Document: {doc.title}"]
    if doc.summary:
        parts.append(f"摘要 Summary: {doc.summary}")
    headings = [s["heading"] for s in doc.outline if s.get("level") == 2] or [s["heading"] for s in doc.outline]
    if headings:
        parts.append("章节 Sections:\n" + "\n".join(f"- {h}" for h in headings[:20]))
    parts.append("---\n" + excerpt(body))
    return "\n".join(parts)


def metadata_only(doc: DocumentCard) -> str:
    """The metadata-only form: the document exists and is about this; no body."""
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


def source_url(template: str | None, doc: DocumentCard, anchor: str = "", line: int | None = None) -> str | None:
    """``template`` with ``{path}``, ``{category}``, ``{anchor}``, ``{line}`` and ``{commit}`` (the Git commit the
    document was read from; ``HEAD`` for one not synced from Git) filled in, or ``None``."""
    if not template:
        return None
    git = git_origin(doc.origin)
    commit = git.commit if git else "HEAD"
    return template.format(path=doc.path, category=doc.category, anchor=anchor, line=line or 1, commit=commit)


@dataclass(slots=True)
class Budget:
    """What limited an answer: the character budget (pieces dropped, pieces shortened) and the per-document cap
    (further matching pieces of a document already given, by document path and anchor)."""

    limit: int
    per_document: int
    used: int = 0
    omitted: int = 0  # pieces or entries left out for the budget
    capped: dict[str, list[str]] = field(default_factory=dict)  # document path -> anchors held back by the cap

    def take(self, text: str) -> tuple[str, bool] | None:
        room = self.limit - self.used
        if room < min(MIN_PIECE_CHARS, len(text)):
            self.omitted += 1
            return None
        text, truncated = cut(text, room)
        self.used += len(text)
        return text, truncated

    def cap(self, path: str, anchor: str) -> None:
        self.capped.setdefault(path, []).append(anchor)

    @property
    def capped_pieces(self) -> int:
        return sum(len(anchors) for anchors in self.capped.values())


def reading_order(candidates: list[Candidate]) -> list[Candidate]:
    """``candidates`` as the agent reads them: the strongest level first, the fused rank within a level.

    Levels and rank come from different signals: a level is a calibrated judgement of one hit's own evidence
    (its cosine, how far that stands above the query's background, the query weight it covers, L0), the fused
    rank a relative score across lanes. They can disagree (the L0 lane can rank first a chunk of the keyword's
    document that covers little of the query). Forcing levels to follow the rank would make a label lie about
    its own signals (demoting a strong hit, or promoting a weak one); so the order follows the levels, and the
    fused rank, which is what the evaluation measures, decides within a level. Down the list levels never rise,
    and the budget and the per-document cap spend themselves in that order too.

    >>> a, b = (Candidate((Chunk(i, i, 0, 1, "", "", (), "", "", "", "", "", 0, 0, 1, 1),), 1.0, {}, lvl)
    ...         for i, lvl in (("a", REFERENCE), ("b", HIGHLY_RELEVANT)))
    >>> [c.level for c in reading_order([a, b])]
    ['HIGHLY_RELEVANT', 'REFERENCE']
    """
    return sorted(candidates, key=lambda c: LEVEL_ORDER[c.level])  # stable: the fused rank within a level


def fitting(cand: Candidate, room: int) -> tuple[Chunk, ...]:
    """The chunks of ``cand`` to give within ``room`` characters: all of them when they fit; for a merged section
    that does not, its hits best first while they fit (the best always, cut to the budget if it must be), in
    document order; so the budget never keeps the start of a section in place of the hit that matched.

    >>> def hit(i, index, size):
    ...     return (Chunk(i, "d", index, 9, "", "", (), "s", "", "", "x" * size, "", index * 1000, index * 1000 + size,
    ...                   1, 1),)
    >>> section = Candidate((*hit("a", 0, 300), *hit("b", 1, 300), *hit("c", 2, 300)), 1.0, {}, PRECISE,
    ...                     hits=(hit("c", 2, 300), hit("a", 0, 300), hit("b", 1, 300)))
    >>> [[c.id for c in fitting(section, room)] for room in (5000, 700, 10)]
    [['a', 'b', 'c'], ['a', 'c'], ['c']]
    """
    if not cand.hits or len(join_chunks(cand.chunks)) <= room:
        return cand.chunks
    chosen: dict[str, Chunk] = {}
    for hit in cand.hits:
        trial = {**chosen, **{c.id: c for c in hit}}
        if not chosen or len(join_chunks(tuple(sorted(trial.values(), key=lambda c: c.index)))) <= room:
            chosen = trial
    return tuple(sorted(chosen.values(), key=lambda c: c.index))


def _marked(text: str, kept: tuple[Chunk, ...], whole: tuple[Chunk, ...]) -> str:
    """``text`` of the ``kept`` chunks of a section with an ellipsis line where its hits before the first or after
    the last were left out (``join_chunks`` marks those between)."""
    head = "…\n\n" if kept[0].id != whole[0].id else ""
    tail = "\n\n…" if kept[-1].id != whole[-1].id else ""
    return f"{head}{text}{tail}"


def by_section(candidates: list[Candidate]) -> list[Candidate]:
    """``candidates`` (fused order) with the hits of one section at one level merged into its best: so a table or a
    procedure hit in two places comes as one piece, in document order, not as two with the later part first. Hits
    of one section at different levels stay apart (the reading order and the budget go strongest first).

    >>> def hit(i, index, anchor, lvl):
    ...     chunk = Chunk(i, "d", index, 9, "", "", (), anchor, "", "", "", "", index, index + 1, 1, 1)
    ...     return Candidate((chunk,), 1.0, {}, lvl)
    >>> merged = by_section([hit("b", 1, "table", PRECISE), hit("x", 5, "other", REFERENCE),
    ...                      hit("a", 0, "table", PRECISE), hit("c", 2, "table", REFERENCE)])
    >>> [([c.id for c in m.chunks], len(m.hits), m.level) for m in merged]
    [(['a', 'b'], 2, 'PRECISE'), (['x'], 0, 'REFERENCE'), (['c'], 0, 'REFERENCE')]
    """
    merged: list[Candidate] = []
    where: dict[tuple[str, str, str], int] = {}
    for cand in candidates:
        key = (cand.document_id, cand.chunks[0].anchor, cand.level)
        if key not in where:
            where[key] = len(merged)
            merged.append(cand)
            continue
        best = merged[where[key]]
        chunks = {c.id: c for c in (*best.chunks, *cand.chunks)}
        ordered = tuple(sorted(chunks.values(), key=lambda c: c.index))
        merged[where[key]] = replace(best, chunks=ordered, hits=(*(best.hits or (best.chunks,)), cand.chunks))
    return merged


def assemble(
    candidates: list[Candidate],
    documents: dict[str, DocumentCard],
    *,
    seen: dict[str, int],
    dedup_mode: str = "section",
    budget_chars: int = 6000,
    per_document: int = 3,
    url_template: str | None = None,
    extra: list[DocumentEvidence] | None = None,
) -> Answer:
    """Group ``candidates`` (best first, already levelled) by document under the caps and budget.

    Documents and pieces come in reading order (``reading_order``): levels never rise down the answer.
    ``seen`` maps dedup keys to the session call that first gave them; those become pointers.
    ``extra`` are non-chunk entries (compact summaries, metadata-only L0 matches) placed after, in level order.
    """
    budget = Budget(budget_chars, per_document)
    grouped: dict[str, list[Piece]] = {}
    deduplicated: dict[str, Deduplicated] = {}
    for cand in reading_order(candidates):
        first = cand.chunks[0]
        doc = documents[cand.document_id]
        key = dedup_key(first, dedup_mode)
        if key in seen:
            if key not in deduplicated:
                anchor = None if dedup_mode == "document" else first.anchor
                heading = doc.title if anchor is None else (first.breadcrumb or doc.title)
                deduplicated[key] = Deduplicated(
                    doc.id,
                    doc.path,
                    doc.title,
                    anchor,
                    heading,
                    seen[key],
                    f"already given in call {seen[key]} of this session",
                    cand.level,  # reading order: the first candidate of a key is its strongest
                )
            continue
        pieces = grouped.setdefault(doc.id, [])
        if len(pieces) >= per_document:
            budget.cap(doc.path, first.anchor)
            continue
        chunks = fitting(cand, budget.limit - budget.used)
        taken = budget.take(_marked(join_chunks(chunks), chunks, cand.chunks))
        if taken is None:
            if not pieces:
                del grouped[doc.id]
            continue
        pieces.append(
            Piece(
                tuple(c.id for c in chunks),
                first.breadcrumb,
                first.anchor,
                first.heading_path,
                chunks[0].line_start,
                chunks[-1].line_end,
                taken[0],
                cand.score,
                cand.lanes,
                cand.level,
                # a section whose other hits the budget left out is shortened too: it is not remembered as given,
                # so asking again with a larger budget brings the whole of it
                taken[1] or len(chunks) < len(cand.chunks),
            )
        )
    entries = [
        DocumentEvidence(
            documents[d],
            "chunks",
            strongest([p.level for p in pieces]),
            tuple(pieces),
            source_url=source_url(url_template, documents[d], pieces[0].anchor, pieces[0].line_start),
        )
        for d, pieces in grouped.items()
    ]
    for entry in sorted(extra or [], key=lambda e: LEVEL_ORDER[e.level]):
        doc = entry.document
        if doc.id in grouped:
            continue
        if entry.form == "compact_summary" and doc.id in seen:  # a summary is remembered per document
            deduplicated.setdefault(
                doc.id,
                Deduplicated(
                    doc.id,
                    doc.path,
                    doc.title,
                    None,
                    doc.title,
                    seen[doc.id],
                    f"already given in call {seen[doc.id]} of this session",
                    entry.level,
                ),
            )
            continue
        taken = budget.take(entry.content)
        if taken is not None:
            entries.append(
                DocumentEvidence(
                    doc, entry.form, entry.level, content=taken[0], source_url=source_url(url_template, doc)
                )
            )
    entries.sort(key=lambda e: LEVEL_ORDER[e.level])  # stable; an extra entry may outrank reference chunks
    levels = [e.level for e in entries]
    truncated = any(p.truncated for e in entries for p in e.pieces)
    # reference-level evidence alone is partial, unless the question's strongest evidence was given earlier
    reference_only = (
        bool(levels)
        and strongest(levels) == REFERENCE
        and strongest_given(entries, list(deduplicated.values())) is None
    )
    if not entries and not deduplicated:
        evidence_status = "none"
    elif budget.omitted or truncated or reference_only:
        evidence_status = "partial"
    else:
        evidence_status = "complete"  # the per-document cap alone leaves it complete: see ``completeness``
    return Answer(
        status="answer" if entries or deduplicated else "no_confident_match",
        level=strongest(levels) if levels else (DEDUPED if deduplicated else NO_CONFIDENT_MATCH),
        evidence_status=evidence_status,
        documents=tuple(entries),
        deduplicated=tuple(deduplicated.values()),
        completeness=completeness(entries, list(deduplicated.values()), budget, truncated),
        chars=budget.used,
        budget=budget_chars,
        omitted=budget.omitted + budget.capped_pieces,
    )
