"""Search and lookup: the recall lanes (L0, BM25, dense) and their fusion, per policy.

* ``lexical``: BM25 over chunks.
* ``dense``: the embedding lane alone.
* ``hybrid`` (default): BM25, dense and the L0 lane (each L0-matched document's chunks in lexical
  order, at the document's L0 rank) fused by weighted reciprocal rank fusion.

A category (asked for, or L0's single domain when ``domain_filter`` is on) filters the recall
lanes; when the filtered lanes find nothing they run again without it and the result says so.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kbseek.core.alertline import clean as clean_query
from kbseek.core.alertline import looks_like_alert
from kbseek.core.answerability import CHINESE_QUESTION
from kbseek.core.clauses import cjk_share, other_language
from kbseek.core.fusion import Fused, document_prior, relative_score_fusion, rrf
from kbseek.core.keywords import KeywordHint
from kbseek.core.modes import FUSION_METHODS, RECALL_POLICIES
from kbseek.core.ranker import RankerModel
from kbseek.core.ranker import model_for as ranker_model_for
from kbseek.core.results import CategoryFilter, Hit, LaneScore, RecallResult
from kbseek.errors import QueryError
from kbseek.observability.logs import request_scope
from kbseek.ports import Reranker
from kbseek.retrieval.indexes import Indexes
from kbseek.retrieval.lanes import DEFAULT_WEIGHTS, LANE_NAMES, SCORE_LABELS, LaneQuery, dense_lane, run_lanes
from kbseek.retrieval.ranking import DEPTH as RANKED_DEPTH
from kbseek.retrieval.ranking import context_later, section_order
from kbseek.retrieval.reranking import reranked
from kbseek.retrieval.vectors import DenseIndex

__all__ = ["POLICIES", "FusionConfig", "dense_lane", "fuse", "lookup", "search"]

log = logging.getLogger("kbseek")
POLICIES = RECALL_POLICIES
MAX_TOP_K = 1000
MAX_QUERY_CHARS = 4000


@dataclass(frozen=True, slots=True)
class FusionConfig:
    """How lanes are fused; validated at construction."""

    rrf_k: int = 60
    weights: dict[str, float] = field(default_factory=lambda: {"bm25": 1.0, "dense": 1.0, "l0": 0.5})
    lane_depth: int = 50  # candidates each lane contributes
    l0_chunks_per_document: int = 2
    method: str = "rrf"  # or "rsf": relative score fusion
    # a query in another script than its evidence (English over Chinese runbooks): the word lanes count this much (0.2
    # best on golden dev: English 0.54 -> 0.63 nDCG@10; 1 is off); a pasted line keeps them (``language_weighted``)
    cross_language: float = 0.2
    # a query in the knowledge base's minority script whose dense evidence is in that script too (English over a
    # mostly Chinese tree): the dense lanes count this much, since e5 then ranks by language, not meaning
    # (``language_weighted``; 0.2 measured on the tidb-ops dev split: English 0.417 -> 0.517 MRR@5); 1 is off
    off_script_dense: float = 0.2
    document_prior: float = 0.0  # weight of a document's aggregate evidence on its sections (core.fusion)
    learned_ranker: bool = False  # each document's sections reordered by the embedder's section ranker (core.ranker)
    # within its document, a section of context (overview, related alerts, references) the question does not ask
    # for counts this share of its fused score (``ranking.context_later``); 1 is off
    context_share: float = 0.5
    lexicon_weight: float = 1.0  # the BM25 lane's terms of the same meaning (core.lexicon), shared by a group; 0 is off
    lexicon_groups: tuple[tuple[str, ...], ...] = ()  # a team's own groups (its synonyms file), beside the bundled
    cross_language_terms: int = 2  # Chinese terms per lexicon group an English question's dense text adds; 0 is off

    def __post_init__(self) -> None:
        # lanes the caller did not weigh get their registered default (0 for the experimental ones: off)
        object.__setattr__(self, "weights", {**DEFAULT_WEIGHTS, **self.weights})
        if self.method not in FUSION_METHODS:
            raise ValueError(f"fusion method {self.method!r} is not one of {', '.join(FUSION_METHODS)}")
        bounded = {"cross_language": 1, "off_script_dense": 1, "context_share": 1, "lexicon_weight": 1}
        for name, high in {**bounded, "cross_language_terms": 10, "document_prior": math.inf}.items():
            if not 0 <= getattr(self, name) <= high:
                raise ValueError(f"0 <= {name} <= {high} is required, got {getattr(self, name)}")
        if self.rrf_k < 0 or self.lane_depth < 1 or self.l0_chunks_per_document < 1:
            raise ValueError("rrf_k >= 0, lane_depth >= 1 and l0_chunks_per_document >= 1 are required")
        for lane, weight in self.weights.items():
            if lane not in LANE_NAMES or weight < 0:
                raise ValueError(f"lane weight {lane}={weight}: lanes are {', '.join(LANE_NAMES)}; weights >= 0")


def check_query(query: str, top_k: int, policy: str) -> str:
    if not isinstance(query, str) or not query.strip():
        raise QueryError("query is empty", hint="ask with some words, an error code or an alert name")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"query is {len(query)} characters, over the limit of {MAX_QUERY_CHARS}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise QueryError(f"top_k must be an integer in 1..{MAX_TOP_K}, got {top_k!r}")
    if policy not in POLICIES:
        raise QueryError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    return query.strip()


@dataclass(slots=True)
class _Run:
    hits: list[Hit]
    timings: dict[str, float]
    notes: list[str]
    reference_similarity: float | None = None
    candidates: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # each lane's, before fusion


def _recall(
    indexes: Indexes,
    query: str,
    policy: str,
    top_k: int,
    category: str | None,
    hint: KeywordHint | None,
    config: FusionConfig,
    threshold: float | None,
    only: frozenset[str] | None = None,
    reranker: Reranker | None = None,
) -> _Run:
    pasted = looks_like_alert(query)
    # a pasted alert or log line: its alert name, service and message, not its noise
    query = clean_query(query, pasted=pasted)
    lane_query = LaneQuery(
        query=query,
        tokens=indexes.analyzer.tokens(query),
        policy=policy,
        depth=max(top_k, config.lane_depth) if policy == "hybrid" else top_k,
        category=category,
        hint=hint,
        threshold=threshold,
        only=only,
        l0_chunks_per_document=config.l0_chunks_per_document,
        weights=config.weights,
        lexicon_weight=config.lexicon_weight,
        lexicon_groups=config.lexicon_groups,
        pasted=pasted,
        cross_language_terms=config.cross_language_terms,
    )
    results = run_lanes(indexes, lane_query)
    timings: dict[str, float] = {}
    notes: list[str] = []
    for result in results:
        timings.update(result.timings)
        notes.extend(result.notes)
    ran = [r for r in results if r.ran]
    lanes = {r.name: r.ids for r in ran}
    raw = {r.name: r.scores for r in ran}
    reference = next((r.reference for r in ran if r.reference is not None), None)
    started = time.perf_counter()
    config, note = language_weighted(indexes, query, raw.get("dense"), config, pasted=pasted)
    notes.extend([note] if note else [])
    embedder_id = indexes.dense.embedder.model_id if isinstance(indexes.dense, DenseIndex) else None
    hits = ranked_fusion(
        indexes, query, lanes, raw, config, policy, embedder_id, max(top_k, reranker.depth if reranker else 0)
    )
    timings["fusion"] = _ms(started, time.perf_counter())
    if reranker is not None and hits:
        started = time.perf_counter()
        hits, note = reranked(reranker, query, hits)
        notes.append(note)
        timings["rerank"] = _ms(started, time.perf_counter())
    hits = hits[:top_k]
    # as each lane recorded them (the dense lane's as the store returned them, summary vectors included)
    candidates = {r.name: r.recorded if r.recorded is not None else [(c, r.scores[c]) for c in r.ids] for r in ran}
    return _Run(hits, timings, notes, reference, candidates)


def fuse(
    indexes: Indexes, lanes: dict[str, list[str]], raw: dict[str, dict[str, float]], config: FusionConfig, top_k: int
) -> list[Hit]:
    """Each lane's ranked chunk ids (with the raw scores) fused into the ``top_k`` hits; one lane passes through."""
    if len(lanes) == 1:
        ((lane, ids),) = lanes.items()
        ranked = [(cid, raw[lane][cid], {lane: rank}) for rank, cid in enumerate(ids, 1)]
    elif config.method == "rsf":
        scored = {lane: [(cid, raw[lane][cid]) for cid in ids] for lane, ids in lanes.items()}
        ranked = [(f.chunk_id, f.score, f.ranks) for f in relative_score_fusion(scored, weights=config.weights)]
    else:
        ranked = [(f.chunk_id, f.score, f.ranks) for f in rrf(lanes, k=config.rrf_k, weights=config.weights)]
    if config.document_prior > 0 and len(lanes) > 1:
        fused = [Fused(cid, score, ranks) for cid, score, ranks in ranked]
        doc_of = {f.chunk_id: indexes.chunks[f.chunk_id].document_id for f in fused}
        ranked = [(f.chunk_id, f.score, f.ranks) for f in document_prior(fused, doc_of, weight=config.document_prior)]
    hits = []
    for rank, (chunk_id, score, ranks) in enumerate(ranked[:top_k], 1):
        chunk = indexes.chunks[chunk_id]
        lane_scores = {
            lane: LaneScore(r, raw[lane].get(chunk_id, 0.0), SCORE_LABELS.get(lane, lane)) for lane, r in ranks.items()
        }
        hits.append(Hit(rank, score, chunk, indexes.documents[chunk.document_id].title, lane_scores))
    return hits


def ranked_fusion(
    indexes: Indexes,
    query: str,
    lanes: dict[str, list[str]],
    raw: dict[str, dict[str, float]],
    config: FusionConfig,
    policy: str,
    embedder_id: str | None,
    top_k: int,
) -> list[Hit]:
    """:func:`fuse`, then each document's sections in the order of the embedder's section ranker when the
    configuration asks for it in a hybrid recall (``kbseek.core.ranker``), and its sections of context after the
    others (``ranking.context_later``); the live recall and a replay both rank through it."""
    ranker: RankerModel | None = None
    if config.learned_ranker and policy == "hybrid" and "dense" in lanes:
        ranker = ranker_model_for(embedder_id)
    context = config.context_share < 1
    hits = fuse(indexes, lanes, raw, config, max(top_k, RANKED_DEPTH) if ranker or context else top_k)
    if ranker:
        hits = section_order(indexes, query, hits, ranker)
    if context:
        hits = context_later(query, hits, config.context_share)
    return hits[:top_k]


WORD_LANES = ("bm25", "l0", "clauses")  # lanes that match words (the section lane matches purposes across languages)
DENSE_LANES = ("dense", "dense_clauses", "headings")  # lanes that rank by the embedder's cosines
EVIDENCE_SAMPLE = 10  # the dense lane's best chunks that tell the evidence's language
# a query and its dense evidence are in the knowledge base's minority script when both stand this far (in Chinese
# share) from its mean, and at most MINORITY of its chunks are written in that script: past the middle of the scale,
# and a clear minority, so a knowledge base written in both scripts in like measure never qualifies
OFF_SCRIPT = 0.5
MINORITY = 1 / 3


def language_weighted(
    indexes: Indexes, query: str, dense: dict[str, float] | None, config: FusionConfig, *, pasted: bool = False
) -> tuple[FusionConfig, str | None]:
    """The fusion for this query, with a note when it differs from ``config``.

    When a query not written mostly in Chinese is in another script than the dense lane's best chunks (an English
    question over Chinese runbooks), the word-matching lanes weigh ``config.cross_language`` of their weight. When
    the query and those chunks are both in the knowledge base's minority script (an English question over a mostly
    Chinese docs tree, whose few English chunks are commands and configuration), the dense lanes weigh
    ``config.off_script_dense`` of theirs: e5 prefers text in the question's language, so it ranked those chunks by
    language. A ``pasted`` alert or log line is not prose in a language: its alert names, error strings and log
    keywords are written the same in a Chinese runbook, and the lanes keep their weights. Live recall and replay
    both fuse through it, so a replay ranks as the live recall did."""
    if pasted or not dense:
        return config, None
    evidence = dense_evidence(indexes, dense)
    # a question written mostly in Chinese over English evidence keeps its word lanes: its Latin words are the names
    # and identifiers the English text writes the same way (``named_terms`` reads them so too), and the lexicon
    # adds the English words of its terms; an English question's words over Chinese text match stray English
    if config.cross_language < 1 and other_language(query, evidence) and cjk_share(query) <= CHINESE_QUESTION:
        lexical = {lane: w * config.cross_language for lane, w in config.weights.items() if lane in WORD_LANES}
        note = "the query's language differs from the evidence's: the word-matching lanes weigh less"
        return replace(config, weights={**config.weights, **lexical}), note
    if config.off_script_dense < 1 and _off_script(indexes, query, evidence):
        damped = {lane: w * config.off_script_dense for lane, w in config.weights.items() if lane in DENSE_LANES}
        note = "the query and its closest chunks are in the knowledge base's minority language: dense lanes weigh less"
        return replace(config, weights={**config.weights, **damped}), note
    return config, None


def dense_evidence(indexes: Indexes, cosines: Mapping[str, float]) -> list[float]:
    """The shares of Chinese letters of the dense lane's ``EVIDENCE_SAMPLE`` best chunks (chunk id -> cosine): what
    tells the language of its evidence, to the fusion and to the gate alike."""
    best = sorted((c for c in cosines if c in indexes.chunks), key=lambda c: -cosines[c])[:EVIDENCE_SAMPLE]
    return indexes.chinese_of(best)


def _off_script(indexes: Indexes, query: str, shares: list[float]) -> bool:
    """Whether the query and its dense evidence (its chunks' shares of Chinese letters) are both in the knowledge
    base's minority script."""
    mean, asked = indexes.chinese_share, cjk_share(query)
    # the share of the knowledge base's chunks written in the query's script
    in_its_script = indexes.chinese_chunks if asked >= 0.5 else 1 - indexes.chinese_chunks
    far = abs(asked - mean) > OFF_SCRIPT and abs(sum(shares) / len(shares) - mean) > OFF_SCRIPT
    return far and in_its_script <= MINORITY


def _filtered(
    indexes: Indexes,
    query: str,
    policy: str,
    top_k: int,
    chosen: CategoryFilter,
    hint: KeywordHint | None,
    config: FusionConfig,
    threshold: float | None,
    only: frozenset[str] | None = None,
    reranker: Reranker | None = None,
) -> tuple[_Run, CategoryFilter]:
    run = _recall(indexes, query, policy, top_k, chosen.category, hint, config, threshold, only, reranker)
    if not run.hits and chosen.category and chosen.source == "l0_single_domain":
        retry = _recall(indexes, query, policy, top_k, None, hint, config, threshold, only, reranker)
        retry.timings = {k: run.timings.get(k, 0) + v for k, v in retry.timings.items()}
        return retry, CategoryFilter(chosen.category, chosen.source, relaxed=True)
    return run, chosen


def search(
    indexes: Indexes,
    query: str,
    *,
    top_k: int = 10,
    category: str | None = None,
    policy: str = "hybrid",
    threshold: float | None = None,
    config: FusionConfig | None = None,
    reranker: Reranker | None = None,
) -> RecallResult:
    """Ranked chunks with their lane scores (what ``/api/search/similar`` shows), reordered by ``reranker``
    when one is given."""
    query = check_query(query, top_k, policy)
    config = config or FusionConfig()
    with request_scope() as request_id:
        started = time.perf_counter()
        with indexes.snapshot():
            refreshed = time.perf_counter()
            hint = indexes.keywords.analyze_query(query) if policy == "hybrid" else None
            chosen = CategoryFilter(category, "request" if category else "none")
            run, chosen = _filtered(indexes, query, policy, top_k, chosen, hint, config, threshold, None, reranker)
            done = time.perf_counter()
            timings = {"refresh": _ms(started, refreshed), **run.timings, "total": _ms(started, done)}
            log.info(
                "search: policy=%s query=%r hits=%d time=%.1fms", policy, query[:80], len(run.hits), timings["total"]
            )
            return RecallResult(
                query=query,
                request_id=request_id,
                policy=policy,
                hits=tuple(run.hits),
                filter=chosen,
                index_version=indexes.index_version,
                timings_ms=timings,
                notes=tuple(run.notes),
            )


def lookup(
    indexes: Indexes,
    query: str,
    *,
    top_k: int = 5,
    policy: str = "hybrid",
    category: str | None = None,
    use_domain_filter: bool = False,
    explain: bool = False,
    config: FusionConfig | None = None,
    only: frozenset[str] | None = None,
    reranker: Reranker | None = None,
) -> RecallResult:
    """L0 hint, the policy's lanes, fusion, then ``reranker`` (when given) over the first fused hits; filtered to
    L0's single domain when configured.

    ``only`` (document ids, from frontmatter filters) restricts every lane."""
    query = check_query(query, top_k, policy)
    config = config or FusionConfig()
    with request_scope() as request_id:
        started = time.perf_counter()
        with indexes.snapshot():
            t_refresh = time.perf_counter()
            hint = indexes.keywords.analyze_query(query)
            t_l0 = time.perf_counter()
            log.info(
                "L0 keyword match done: matches=%d exact=%d keywords=%s domains=%s single=%s time=%.1fms",
                len(hint.matches),
                sum(m.exact for m in hint.matches),
                list(hint.matched_keywords)[:5],
                list(hint.domains),
                hint.single_domain,
                _ms(t_refresh, t_l0),
            )
            if category:
                chosen = CategoryFilter(category, "request")
            elif use_domain_filter and hint.single_domain:
                chosen = CategoryFilter(hint.single_domain, "l0_single_domain")
            else:
                chosen = CategoryFilter(None, "none")
            run, chosen = _filtered(indexes, query, policy, top_k, chosen, hint, config, None, only, reranker)
            done = time.perf_counter()
            timings = {
                "refresh": _ms(started, t_refresh),
                "l0": _ms(t_refresh, t_l0),
                **run.timings,
                "total": _ms(started, done),
            }
            details: dict[str, Any] = {}
            if explain:
                details = {
                    "query_tokens": indexes.analyzer.tokens(clean_query(query)),
                    "analyzer_version": indexes.analyzer.version,
                    "fusion": {"rrf_k": config.rrf_k, "weights": dict(config.weights)},
                }
            lane_sizes = " ".join(f"{lane}={len(found)}" for lane, found in (run.candidates or {}).items())
            log.info(
                "L1 recall done: policy=%s lanes: %s fused=%d filter=%s relaxed=%s time=%.1fms",
                policy,
                lane_sizes or "-",
                len(run.hits),
                chosen.category,
                chosen.relaxed,
                timings["total"],
            )
            return RecallResult(
                query=query,
                request_id=request_id,
                policy=policy,
                hits=tuple(run.hits),
                filter=chosen,
                index_version=indexes.index_version,
                timings_ms=timings,
                notes=tuple(run.notes),
                hint=hint,
                explain=details,
                reference_similarity=run.reference_similarity,
                candidates=run.candidates,
            )


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000, 3)
