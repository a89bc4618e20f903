"""Reciprocal rank fusion: ``score(c) = Σ_lanes weight_lane / (k + rank_lane(c))``, ranks from 1.

Lanes are ranked lists of chunk ids; a chunk in several lanes is one result (merged by id, never
by text). Higher fused scores are better; ties go to the better best-lane rank, then the id. Fused
scores are rounded to ``SCORE_DIGITS`` decimals first: the same terms added in another lane order can
differ in the last bit, and a tie must be decided by the rule above, not by the order of additions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SCORE_DIGITS = 12  # far above the ~1e-16 of a sum's rounding, far below any difference a ranking means


@dataclass(frozen=True, slots=True)
class Fused:
    chunk_id: str
    score: float
    ranks: dict[str, int]  # lane -> rank (1-based) where the chunk appeared


def rrf(lanes: Mapping[str, Sequence[str]], *, k: int = 60, weights: Mapping[str, float] | None = None) -> list[Fused]:
    """Fuse ranked lists of ids.

    >>> [(f.chunk_id, round(f.score, 5)) for f in rrf({"bm25": ["a", "b"], "dense": ["b", "c"]})]
    [('b', 0.03252), ('a', 0.01639), ('c', 0.01613)]
    """
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for lane, ids in lanes.items():
        weight = 1.0 if weights is None else weights.get(lane, 1.0)
        seen: set[str] = set()
        for rank, chunk_id in enumerate(ids, 1):
            if chunk_id in seen:  # a lane lists a chunk once; later repeats are ignored
                continue
            seen.add(chunk_id)
            ranks.setdefault(chunk_id, {})[lane] = rank
            if weight:
                scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (k + rank)
    fused = [Fused(cid, round(scores[cid], SCORE_DIGITS), ranks[cid]) for cid in ranks if scores.get(cid, 0.0) > 0]
    fused.sort(key=lambda f: (-f.score, min(f.ranks.values()), f.chunk_id))
    return fused


def relative_score_fusion(
    lanes: Mapping[str, Sequence[tuple[str, float]]], *, weights: Mapping[str, float] | None = None
) -> list[Fused]:
    """Weighted sum of min-max normalised lane scores (a lane's best is 1, its worst listed is 0).

    Unlike RRF it keeps *how far* ahead a lane's best candidate is, so a lane that is sure of its
    top hit outweighs one that is not.

    >>> [(f.chunk_id, round(f.score, 3)) for f in relative_score_fusion(
    ...     {"bm25": [("a", 9.0), ("b", 3.0), ("c", 1.0)], "dense": [("b", 0.9), ("a", 0.89), ("c", 0.8)]})]
    [('a', 1.9), ('b', 1.25), ('c', 0.0)]
    """
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for lane, ranked in lanes.items():
        weight = 1.0 if weights is None else weights.get(lane, 1.0)
        if not ranked:
            continue
        values = [score for _, score in ranked]
        low, high = min(values), max(values)
        for rank, (chunk_id, score) in enumerate(ranked, 1):
            if lane in ranks.get(chunk_id, {}):
                continue
            ranks.setdefault(chunk_id, {})[lane] = rank
            normalised = (score - low) / (high - low) if high > low else 1.0
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight * normalised
    fused = [Fused(cid, round(scores.get(cid, 0.0), SCORE_DIGITS), ranks[cid]) for cid in ranks]
    fused.sort(key=lambda f: (-f.score, min(f.ranks.values()), f.chunk_id))
    return fused


def l0_lane(
    document_ranking: Sequence[str], chunks_by_document: Mapping[str, Sequence[str]], *, per_document: int = 2
) -> list[str]:
    """The L0 lane: each matched document's chunks (already in lexical order), in L0 document order.

    >>> l0_lane(["d2", "d1"], {"d1": ["c1", "c2", "c3"], "d2": ["c9"]})
    ['c9', 'c1', 'c2']
    """
    lane: list[str] = []
    for doc_id in document_ranking:
        lane.extend(list(chunks_by_document.get(doc_id, ()))[:per_document])
    return lane


def document_prior(
    fused: Sequence[Fused], document_of: Mapping[str, str], *, weight: float, per_document: int = 3
) -> list[Fused]:
    """Fused chunks re-scored with their document's aggregate evidence: ``score + weight * doc / best_doc``,
    where a document's evidence is the sum of its ``per_document`` best fused scores. A section of the document
    most of the evidence points to moves up past a lone stray hit in another document.

    >>> ranked = [Fused("x1", 1.0, {}), Fused("a1", 0.9, {}), Fused("a2", 0.8, {})]
    >>> [f.chunk_id for f in document_prior(ranked, {"x1": "X", "a1": "A", "a2": "A"}, weight=0.5)]
    ['a1', 'a2', 'x1']
    """
    if weight <= 0 or not fused:
        return list(fused)
    taken: dict[str, list[float]] = {}
    for f in fused:
        scores = taken.setdefault(document_of.get(f.chunk_id, f.chunk_id), [])
        if len(scores) < per_document:
            scores.append(f.score)
    evidence = {doc: sum(scores) for doc, scores in taken.items()}
    best = max(evidence.values()) or 1.0
    out = [
        Fused(
            f.chunk_id,
            round(f.score + weight * evidence[document_of.get(f.chunk_id, f.chunk_id)] / best, SCORE_DIGITS),
            f.ranks,
        )
        for f in fused
    ]
    out.sort(key=lambda f: (-f.score, min(f.ranks.values(), default=0), f.chunk_id))
    return out
