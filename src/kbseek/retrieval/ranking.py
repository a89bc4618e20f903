"""The section ranker over the first fused hits (the model and why: ``kbseek.core.ranker``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from kbseek.core.alertline import clean as clean_query
from kbseek.core.answerability import contains_any, identifiers
from kbseek.core.ranker import FEATURES, RankerModel, within_documents
from kbseek.core.results import Hit
from kbseek.core.section_roles import context_section, heading_roles, query_roles
from kbseek.retrieval.indexes import Indexes

DEPTH = 20  # the fused hits the ranker reorders; the rest keep their place after them

__all__ = ["DEPTH", "FEATURES", "context_later", "hit_features", "section_order"]


def hit_features(indexes: Indexes, query: str, hits: Sequence[Hit]) -> list[list[float]]:
    """One row of :data:`FEATURES` per hit, from the hits' lane scores and chunks alone."""
    query = clean_query(query)
    chunks = [h.chunk for h in hits]
    coverage = indexes.bm25.coverage(indexes.analyzer.tokens(query), [c.id for c in chunks])
    names, asked = identifiers(query), query_roles(query)
    top_score = max((h.score for h in hits), default=0.0) or 1.0
    cosines = [h.lanes["dense"].score for h in hits if "dense" in h.lanes]
    best_cosine, floor = (max(cosines), min(cosines)) if cosines else (0.0, 0.0)
    top_bm25 = max((h.lanes["bm25"].score for h in hits if "bm25" in h.lanes), default=0.0) or 1.0
    rows = []
    for hit, chunk in zip(hits, chunks, strict=True):
        declared = heading_roles(chunk.heading_path[-1] if chunk.heading_path else chunk.title)
        per_question = hit.lanes.get("dense_clauses")
        rows.append(
            [
                hit.score / top_score,
                (hit.lanes["dense"].score if "dense" in hit.lanes else floor) - best_cosine,
                hit.lanes["bm25"].score / top_bm25 if "bm25" in hit.lanes else 0.0,
                coverage[chunk.id],
                1.0 if asked & declared else 0.0,
                1.0 if asked and declared and not asked & declared else 0.0,
                1.0 if names and contains_any(f"{chunk.breadcrumb}\n{chunk.text}", names) else 0.0,
                1.0 / per_question.rank if per_question is not None and per_question.rank else 0.0,
                math.log1p(len(chunk.text)) / 8,
            ]
        )
    return rows


def section_order(indexes: Indexes, query: str, hits: list[Hit], model: RankerModel) -> list[Hit]:
    """The first :data:`DEPTH` hits with each document's sections in the model's order (documents keep their
    places), the rest after them, renumbered."""
    head = hits[:DEPTH]
    if len(head) < 2:
        return hits
    scores = model.scores(hit_features(indexes, query, head))
    order = within_documents([h.chunk.document_id for h in head], scores)
    return [replace(hit, rank=rank) for rank, hit in enumerate([head[i] for i in order] + hits[DEPTH:], 1)]


def context_later(query: str, hits: list[Hit], share: float) -> list[Hit]:
    """The first :data:`DEPTH` hits with each document's sections of context (its overview, related alerts,
    references: ``section_roles.context_section``) counting ``share`` of their fused score among that document's
    sections; documents keep their places, so a document-level ranking is unchanged, and hits keep their scores.

    Such a section resembles every question about its document, so it often tops the document's sections, yet it
    rarely holds the answer; a question that asks for it (what the alert means, which alerts fire with it) keeps
    it where the lanes put it."""
    head = hits[:DEPTH]
    asked = query_roles(clean_query(query))
    context = [context_section(h.chunk.headings, asked) for h in head]
    if not any(context):
        return hits
    scores = [h.score * share if c else h.score for h, c in zip(head, context, strict=True)]
    order = within_documents([h.chunk.document_id for h in head], scores)
    if order == list(range(len(head))):
        return hits
    return [replace(hit, rank=rank) for rank, hit in enumerate([head[i] for i in order] + hits[DEPTH:], 1)]
