"""Search and lookup over the in-memory indexes: the lexical policy of the retrieval flow."""

from __future__ import annotations

import logging
import time
from typing import Any

from kbseek.core.results import CategoryFilter, Hit, LaneScore, LookupResult, SearchResult
from kbseek.errors import KbseekError
from kbseek.indexes import Indexes
from kbseek.logs import request_scope

log = logging.getLogger("kbseek")
POLICIES = ("lexical",)
MAX_TOP_K = 1000
MAX_QUERY_CHARS = 4000


class QueryError(KbseekError):
    """A query parameter is out of range."""

    code = "invalid_query"


def check_query(query: str, top_k: int) -> str:
    if not isinstance(query, str) or not query.strip():
        raise QueryError("query is empty", hint="ask with some words, an error code or an alert name")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"query is {len(query)} characters, over the limit of {MAX_QUERY_CHARS}")
    if not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise QueryError(f"top_k must be an integer in 1..{MAX_TOP_K}, got {top_k!r}")
    return query.strip()


def bm25_hits(indexes: Indexes, query: str, top_k: int, category: str | None) -> list[Hit]:
    tokens = indexes.analyzer.tokens(query)
    groups = [category] if category else None
    results = indexes.bm25.search(tokens, k=top_k, groups=groups)
    hits = []
    for rank, result in enumerate(results, 1):
        chunk = indexes.chunks[result.chunk_id]
        title = indexes.documents[chunk.document_id].title
        lane = LaneScore(rank, result.score, "bm25")
        hits.append(Hit(rank, result.score, chunk, title, {"bm25": lane}))
    return hits


def search(indexes: Indexes, query: str, *, top_k: int = 10, category: str | None = None) -> SearchResult:
    """Ranked chunks for ``query`` by BM25 (the seeds' ``/api/search/similar`` view)."""
    query = check_query(query, top_k)
    with request_scope() as request_id:
        started = time.perf_counter()
        indexes.refresh()
        refreshed = time.perf_counter()
        hits = bm25_hits(indexes, query, top_k, category)
        done = time.perf_counter()
        timings = {"refresh": _ms(started, refreshed), "bm25": _ms(refreshed, done), "total": _ms(started, done)}
        log.info("search: query=%r hits=%d time=%.1fms", query[:80], len(hits), timings["total"])
        source = "request" if category else "none"
        return SearchResult(query, request_id, tuple(hits), CategoryFilter(category, source), indexes.index_version, timings)


def lookup(
    indexes: Indexes,
    query: str,
    *,
    top_k: int = 5,
    policy: str = "lexical",
    category: str | None = None,
    use_domain_filter: bool = True,
    explain: bool = False,
) -> LookupResult:
    """L0 hint, then the lexical lane, filtered to L0's single domain when there is one.

    The filter is relaxed (dropped) when it leaves no result, so a wrong domain guess costs
    nothing but the attempt.
    """
    query = check_query(query, top_k)
    if policy not in POLICIES:
        raise QueryError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    with request_scope() as request_id:
        started = time.perf_counter()
        indexes.refresh()
        t_refresh = time.perf_counter()
        hint = indexes.keywords.analyze_query(query)
        t_l0 = time.perf_counter()
        log.info("L0 hint: matches=%d keywords=%s domains=%s single=%s", len(hint.matches),
                 list(hint.matched_keywords)[:5], list(hint.domains), hint.single_domain)
        if category:
            chosen = CategoryFilter(category, "request")
        elif use_domain_filter and hint.single_domain:
            chosen = CategoryFilter(hint.single_domain, "l0_single_domain")
        else:
            chosen = CategoryFilter(None, "none")
        hits = bm25_hits(indexes, query, top_k, chosen.category)
        if not hits and chosen.source == "l0_single_domain":
            chosen = CategoryFilter(chosen.category, chosen.source, relaxed=True)
            hits = bm25_hits(indexes, query, top_k, None)
        done = time.perf_counter()
        timings = {"refresh": _ms(started, t_refresh), "l0": _ms(t_refresh, t_l0),
                   "bm25": _ms(t_l0, done), "total": _ms(started, done)}
        details: dict[str, Any] = {}
        if explain:
            details = {"query_tokens": indexes.analyzer.tokens(query), "analyzer_version": indexes.analyzer.version}
        log.info("lookup: policy=%s evidence=%d filter=%s relaxed=%s time=%.1fms", policy, len(hits),
                 chosen.category, chosen.relaxed, timings["total"])
        return LookupResult(query, request_id, policy, hint, tuple(hits), chosen, indexes.index_version, timings, details)


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000, 3)
