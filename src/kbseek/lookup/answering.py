"""The steps of ``lookup_knowledge`` between a recall and an answer, each a function of the indexes and the request.

* :func:`levelled`: the confidence gate and each hit's relevance level;
* :func:`place`: what goes into the answer: one named section, the ``legacy`` decision matrix of the original
  service (one strong L0 match answers with its compact summary), or the best hits grown to their section or
  neighbours, with strong L0 matches that have no piece named metadata-only;
* :func:`assemble_answer`: grouping, caps, budget and content forms (``core.answer``), and the closest documents
  when nothing is confident;
* :func:`given`: what a session remembers as given, for dedup on its later calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kbseek.core.alertline import clean as clean_query
from kbseek.core.answer import (
    Answer,
    Candidate,
    DocumentEvidence,
    assemble,
    by_section,
    compact_summary,
    dedup_key,
    join_chunks,
    metadata_only,
)
from kbseek.core.answerability import (
    TOP,
    Signals,
    identifier_mask,
    identifiers,
    named_terms,
    relative_mask,
    signals,
    strong_per_request_mask,
)
from kbseek.core.clauses import other_language, questions
from kbseek.core.fusion import rrf
from kbseek.core.keywords import STRONG_TIER, KeywordHint
from kbseek.core.relevance import HIGHLY_RELEVANT, PRECISE, REFERENCE, STRONG_LEVELS, Thresholds, level
from kbseek.core.results import Hit, RecallResult
from kbseek.core.section_roles import named_sections
from kbseek.errors import NotFoundError
from kbseek.lookup.config import LookupConfig
from kbseek.lookup.review import label_reviews
from kbseek.lookup.types import LookupRequest
from kbseek.retrieval.indexes import Indexes
from kbseek.retrieval.lanes import document_of
from kbseek.retrieval.recall import EVIDENCE_SAMPLE, dense_evidence
from kbseek.retrieval.sections import document_chunks, expanded, find_section, resolve_document

MIN_RECALL_DEPTH = 15
CLOSEST = 3  # documents named when nothing is confident


def recall_depth(top_k: int) -> int:
    """How many fused hits the tool levels for an answer of ``top_k`` pieces: enough that caps and dedup
    still leave ``top_k``."""
    return max(top_k * 3, MIN_RECALL_DEPTH)


def allowed_documents(indexes: Indexes, filters: dict[str, str | list[str]]) -> frozenset[str]:
    """Documents whose frontmatter matches every filter: a field equal to one of the values, or for a
    list field, holding one of them; compared case-insensitively. Values are data, never an expression."""
    wanted = {
        name.casefold(): {str(v).casefold() for v in (value if isinstance(value, list) else [value])}
        for name, value in filters.items()
    }
    allowed = set()
    for doc in indexes.documents.values():
        fields = {str(k).casefold(): v for k, v in doc.fields.items()}
        fields.setdefault("category", doc.category)
        if all(_field_matches(fields.get(name), values) for name, values in wanted.items()):
            allowed.add(doc.id)
    return frozenset(allowed)


def _field_matches(value: Any, wanted: set[str]) -> bool:
    values = [] if value is None else value if isinstance(value, list) else [value]
    return any(str(v).casefold() in wanted for v in values)


def fuse_variants(results: list[RecallResult]) -> list[Hit]:
    """Rankings of several query variants fused by RRF (k = 60); each chunk keeps its best lane scores."""
    lanes = {f"q{i}": [h.chunk.id for h in r.hits] for i, r in enumerate(results)}
    by_id: dict[str, Hit] = {}
    for result in results:
        for hit in result.hits:
            by_id.setdefault(hit.chunk.id, hit)
    fused = rrf(lanes, k=60)
    return [
        Hit(rank, f.score, by_id[f.chunk_id].chunk, by_id[f.chunk_id].document_title, by_id[f.chunk_id].lanes)
        for rank, f in enumerate(fused, 1)
    ]


def l0_status(hint: KeywordHint) -> dict[str, str]:
    """Per document: ``unique`` (L0's one strong match), ``match`` (one of several), else absent.
    Only strong matches (a whole keyword or title in the query) count, as the original service's exact L0 match did."""
    strong = [m.document_id for m in hint.matches if m.exact and m.score >= STRONG_TIER]
    if len(strong) == 1:
        return {strong[0]: "unique"}
    return dict.fromkeys(strong, "match")


def question_signals(
    indexes: Indexes,
    query: str,
    hits: list[Hit],
    hint: KeywordHint,
    reference: float | None,
    dense: Sequence[tuple[str, float]] | None = None,
    coverage: dict[str, float] | None = None,
) -> Signals:
    """The answerability signals of one recall, as the gate in :func:`levelled` reads them (for training): from the
    hits in the order fusion scored them, so a reordering of sections within their documents (sections of context
    later, the learned ranker) changes what the answer shows first, not the evidence the gate weighs. The cosines, and
    whether they were measured across scripts, come from ``dense``, the dense lane's own candidates (vector id,
    cosine) in its order, when the recall has them. ``coverage``: each hit's share of the cleaned query's weight,
    when the caller has measured it already."""
    hits = sorted(hits, key=lambda h: (-h.score, min((s.rank for s in h.lanes.values()), default=0), h.chunk.id))
    cleaned = clean_query(query)
    names = identifiers(cleaned)
    tokens = indexes.analyzer.tokens(cleaned)
    if coverage is None:
        coverage = indexes.bm25.coverage(tokens, [h.chunk.id for h in hits])
    ideal = sum(n * indexes.bm25.idf(t) for t, n in Counter(tokens).items())  # each word matched at its full IDF
    if dense:  # the language of the chunks the gate's cosines come from, as the fusion reads it
        evidence = dense_evidence(indexes, dict(dense))
    else:
        by_cosine = sorted((h for h in hits if "dense" in h.lanes), key=lambda h: -h.lanes["dense"].score)
        evidence = indexes.chinese_of(h.chunk.id for h in by_cosine[:EVIDENCE_SAMPLE])
    return signals(
        [h.lanes["dense"].score if "dense" in h.lanes else None for h in hits],
        [h.chunk.document_id for h in hits],
        [coverage[h.chunk.id] for h in hits],
        [f"{h.chunk.breadcrumb}\n{h.chunk.text}" for h in hits],
        reference=reference,
        names=names,
        l0=bool(l0_status(hint)) or bool(named_sections([h.chunk for h in hits[:TOP]], names, whole=True)),
        bm25=[h.lanes["bm25"].score if "bm25" in h.lanes else None for h in hits],
        ideal=ideal,
        cross_language=other_language(cleaned, evidence),
        unknown_name=bool(unknown_names(indexes, cleaned)),
        dense=[(doc, sim) for vid, sim in dense or () if (doc := document_of(indexes, vid)) is not None],
    )


def unknown_names(indexes: Indexes, query: str) -> list[str]:
    """The names a (cleaned) question gives (``named_terms``) whose whole form no live chunk holds, in order: the
    gate's ``unknown_name``, and a note for the agent."""
    return [
        name
        for name in named_terms(query)
        if (forms := indexes.analyzer.tokens(name)) and not indexes.bm25.knows(forms[0])
    ]


def levelled(
    indexes: Indexes,
    query: str,
    hits: list[Hit],
    hint: KeywordHint,
    t: Thresholds,
    reference: float | None,
    dense: Sequence[tuple[str, float]] | None = None,
) -> list[Candidate]:
    """Each hit with its relevance level, in fused order.

    The gate judges the *question*: with a fitted answerability model (``core.answerability``) it is answered when
    the model's probability reaches the cut; without one, when some hit passes the thresholds. A refused question
    returns nothing. An answered one keeps every hit, hits below the thresholds as ``REFERENCE``: related, not
    confirmed; and a hit that lacks the identifier the question names while another hit has it, or that holds
    far less of the query or scores far below the top hit, is ``REFERENCE`` too, as is a document's strong section
    after its first-ranked one, and any strong section of a document ranked after the first document that holds
    one (after the first two, for a question making two requests, ...: ``core.answerability``).
    The query is cleaned as the recall lanes saw it (``clean_query``: a pasted alert line's labels and values would
    otherwise dilute the coverage); ``dense`` is the dense lane's own ranking, which the gate reads its cosines
    from. The answer then reads them strongest level first, the fused rank within a level
    (``core.answer.reading_order``)."""
    cleaned = clean_query(query)
    tokens = indexes.analyzer.tokens(cleaned)  # as the recall lanes saw it
    coverage = indexes.bm25.coverage(tokens, [h.chunk.id for h in hits])
    l0 = l0_status(hint)
    names = identifiers(cleaned)
    texts = [f"{h.chunk.breadcrumb}\n{h.chunk.text}" for h in hits]
    sims = [h.lanes["dense"].score if "dense" in h.lanes else None for h in hits]
    levels = []
    for hit, sim in zip(hits, sims):
        gap = sim - reference if sim is not None and reference is not None else 0.0
        levels.append(level(sim, gap, coverage[hit.chunk.id], l0.get(hit.chunk.document_id, "none"), t))
    # the embedder's model reads the dense lane's cosines: a recall without them (the lexical policy) has its own
    gate = t.answerability if any(sim is not None for sim in sims) else t.lexical_answerability
    if gate is not None:
        # the model judges the question (it was fitted on near-topic and off-topic negatives alike); the per-hit
        # thresholds only label. As a second gate they refused half the answerable paraphrases (docs/evaluation.md)
        found = question_signals(indexes, query, hits, hint, reference, dense, coverage)
        if gate.probability(found) < gate.cut:
            return []
    elif all(lvl is None for lvl in levels):
        return []
    named = next((i for i, h in enumerate(hits) if l0.get(h.chunk.document_id) == "unique"), None)
    relative = relative_mask([coverage[h.chunk.id] for h in hits], [h.score for h in hits], named=named)
    strong_ok = [a and b for a, b in zip(identifier_mask(names, texts), relative)]
    # a runbook's sections, and its sibling runbooks, all resemble a question about it: strong labels go to as many
    # sections and documents, first ranked first, as the question makes requests (which answers which request is
    # the ranking's call)
    strong = [ok and lvl in STRONG_LEVELS for ok, lvl in zip(strong_ok, levels)]
    sections = [(h.chunk.document_id, h.chunk.anchor) for h in hits]
    per_request = strong_per_request_mask(sections, strong, allowed=len(questions(cleaned)))
    strong_ok = [a and b for a, b in zip(strong_ok, per_request)]
    return [
        Candidate((hit.chunk,), hit.score, hit.lanes, _capped(lvl, ok)) for hit, lvl, ok in zip(hits, levels, strong_ok)
    ]


def _capped(lvl: str | None, strong_ok: bool) -> str:
    if lvl is None or (not strong_ok and lvl in STRONG_LEVELS):
        return REFERENCE
    return lvl


@dataclass(frozen=True, slots=True)
class Placement:
    """What goes into the answer: levelled chunk groups, non-chunk entries (compact summaries, metadata-only L0
    matches) and, under ``legacy``, the decision-matrix row taken."""

    candidates: list[Candidate]
    extra: list[DocumentEvidence] = field(default_factory=list)
    legacy: dict[str, Any] = field(default_factory=dict)


def place(
    indexes: Indexes,
    request: LookupRequest,
    policy: str,
    candidates: list[Candidate],
    hint: KeywordHint,
    only: frozenset[str] | None,
) -> Placement:
    """A named section replaces the recall; ``legacy`` applies its decision matrix; otherwise the best ``top_k``
    hits, those of one section at one level joined (``core.answer.by_section``) or each grown as ``expand`` asks,
    and strong L0 matches without a piece named metadata-only."""
    if request.section:
        return Placement(section_candidates(indexes, request.section, candidates))
    hint = _within(hint, request.category, only)
    if policy == "legacy":
        return legacy_matrix(indexes, hint, candidates)
    if request.expand == "none":  # the best top_k hits, a section's hits at one level as one piece
        grown = by_section(candidates[: request.top_k])
    else:
        grown = expanded(indexes, candidates[: request.top_k], request.expand)
    return Placement(grown, _unplaced_l0_matches(indexes, hint, grown, only))


def section_candidates(indexes: Indexes, section: str, candidates: list[Candidate]) -> list[Candidate]:
    """The chunks of ``path#anchor`` (or of ``#heading`` within the best document for the query) as one piece."""
    path, _, name = section.partition("#")
    if path:
        doc = resolve_document(indexes, path)
    elif candidates:
        doc = indexes.documents[candidates[0].document_id]
    else:
        raise NotFoundError(
            f"section {section!r}: no document named and none matches the query",
            hint="name it as 'path/to/doc.md#anchor'",
        )
    chunks = find_section(indexes, doc.id, name) if name else document_chunks(indexes, doc.id)
    if not chunks:
        anchors = ", ".join(s["anchor"] for s in doc.outline[:15])
        raise NotFoundError(f"document {doc.path!r} has no section {name!r}", hint=f"its sections: {anchors}")
    return [Candidate(tuple(chunks), 1.0, {}, PRECISE)]


def legacy_matrix(indexes: Indexes, hint: KeywordHint, candidates: list[Candidate]) -> Placement:
    """The original service's decision matrix: a document's whole compact summary is given when L0 has one
    strong match (high confidence) or recall found nothing; otherwise the recalled pieces, with strong L0
    matches named as metadata."""
    strong = [m for m in hint.matches if m.exact and m.score >= STRONG_TIER and m.document_id in indexes.documents]
    semantic = [c for c in candidates if "dense" in c.lanes or "bm25" in c.lanes]
    if len(strong) == 1:
        doc = indexes.documents[strong[0].document_id]
        summary = DocumentEvidence(
            doc, "compact_summary", PRECISE, content=compact_summary(doc, _body(indexes, doc.id))
        )
        return Placement(
            [], [summary], {"row": "unique_l0_match", "matchType": "exact_L0", "confidence": "high", "l1": "skipped"}
        )
    if strong:
        doc = indexes.documents[strong[0].document_id]
        if semantic:
            entry = DocumentEvidence(doc, "metadata_only", HIGHLY_RELEVANT, content=metadata_only(doc))
            return Placement(
                semantic,
                [entry],
                {
                    "row": "several_l0_matches_with_l1",
                    "matchType": "exact_L0",
                    "confidence": "low",
                    "l1": "used",
                    "primary": {"source_path": doc.path, "content": entry.content},
                },
            )
        entry = DocumentEvidence(
            doc, "compact_summary", REFERENCE, content=compact_summary(doc, _body(indexes, doc.id))
        )
        return Placement(
            [],
            [entry],
            {"row": "several_l0_matches_without_l1", "matchType": "exact_L0", "confidence": "low", "l1": "empty"},
        )
    return Placement(
        semantic,
        [],
        {
            "row": "no_l0_match",
            "matchType": "semantic_L1",
            "confidence": "medium" if semantic else "none",
            "l1": "used",
        },
    )


def _body(indexes: Indexes, document_id: str) -> str:
    chunks = document_chunks(indexes, document_id)
    return join_chunks(tuple(chunks)) if chunks else ""


def _within(hint: KeywordHint, category: str | None, only: frozenset[str] | None) -> KeywordHint:
    """The hint's matches that the request's category and filters allow (pointers obey them like evidence)."""
    if category is None and only is None:
        return hint
    return replace(
        hint,
        matches=tuple(
            m
            for m in hint.matches
            if (category is None or m.category == category) and (only is None or m.document_id in only)
        ),
    )


def _unplaced_l0_matches(
    indexes: Indexes, hint: KeywordHint, candidates: list[Candidate], only: frozenset[str] | None
) -> list[DocumentEvidence]:
    """Strong L0 matches with no piece in the answer: named metadata-only (title, summary, keywords, source), at
    most two."""
    placed = {c.document_id for c in candidates}
    out = []
    for m in hint.matches:
        if (
            m.exact
            and m.score >= STRONG_TIER
            and m.document_id not in placed
            and m.document_id in indexes.documents
            and (only is None or m.document_id in only)
        ):
            doc = indexes.documents[m.document_id]
            out.append(DocumentEvidence(doc, "metadata_only", REFERENCE, content=metadata_only(doc)))
    return out[:2]


def assemble_answer(
    indexes: Indexes,
    request: LookupRequest,
    placement: Placement,
    hits: list[Hit],
    seen: dict[str, int],
    config: LookupConfig,
) -> Answer:
    """The answer an agent reads (``core.answer.assemble``) under the request's budget and the configured caps; a
    named section comes whole and is never deduplicated. With no confident match, the closest documents are named
    (not as evidence)."""
    candidates = placement.candidates
    placed = candidates if request.section else candidates[: request.top_k]
    answer = assemble(
        placed,
        indexes.documents,
        seen={} if request.section else seen,
        dedup_mode=request.dedup,
        budget_chars=request.budget_chars or config.budget_chars,
        per_document=len(candidates) or 1 if request.section else config.per_document,
        url_template=config.source_url_template,
        extra=placement.extra,
    )
    if answer.status == "no_confident_match" and not candidates and not request.section and hits:
        answer = replace(answer, closest=_closest(hits))
    return label_reviews(answer, default_every=config.review_every_default)  # labelled, never hidden


def _closest(hits: list[Hit]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "document_id": h.chunk.document_id,
            "source_path": h.chunk.source_path,
            "title": h.document_title,
            "breadcrumb": h.chunk.breadcrumb,
            "anchor": h.chunk.anchor,
            "similarity": round(h.lanes["dense"].score, 4) if "dense" in h.lanes else None,
        }
        for h in hits[:CLOSEST]
    )


def given(indexes: Indexes, answer: Answer, dedup: str) -> list[tuple[str, str, str | None]]:
    """What the answer gave, as ``(dedup key, document id, anchor)``: each piece by its dedup key, and a compact
    summary by its document. A piece the budget shortened is not remembered: the answer tells the agent to ask again
    with a larger budget, and the section must then come in full, not as a pointer to the part it has."""
    out = [
        (dedup_key(indexes.chunks[p.chunk_ids[0]], dedup), e.document.id, None if dedup == "document" else p.anchor)
        for e in answer.documents
        for p in e.pieces
        if not p.truncated
    ]
    out += [(e.document.id, e.document.id, None) for e in answer.documents if e.form == "compact_summary"]
    return out
