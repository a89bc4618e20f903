"""Retrieval metrics over qrels and runs shaped as ranx/pytrec_eval shape them.

``qrels``: ``{query_id: {doc_id: grade}}`` (grade > 0 is relevant); ``run``: ``{query_id: {doc_id:
score}}`` (higher first). Metric names are lower-case ``name@k``: ``recall@10``, ``mrr@10``,
``ndcg@10`` (linear gains, log2 discount, as trec_eval), ``hit@1``, ``precision@5``, and ``sources@5``, the
number of distinct documents (the part of an id before ``#``) among the top five, how varied the evidence is.
A query in the qrels but absent from the run scores 0; queries without a relevant document are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]
METRICS = ("recall", "mrr", "ndcg", "hit", "precision", "sources")


def ranking(scores: dict[str, float]) -> list[str]:
    """Document ids best first; ties broken by id so every run is reproducible."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def recall(grades: dict[str, int], ranked: Sequence[str], k: int) -> float:
    relevant = {d for d, g in grades.items() if g > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr(grades: dict[str, int], ranked: Sequence[str], k: int) -> float:
    for position, doc in enumerate(ranked[:k], 1):
        if grades.get(doc, 0) > 0:
            return 1.0 / position
    return 0.0


def ndcg(grades: dict[str, int], ranked: Sequence[str], k: int) -> float:
    dcg = sum(grades.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]) if grades.get(doc, 0) > 0)
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def hit(grades: dict[str, int], ranked: Sequence[str], k: int) -> float:
    return 1.0 if any(grades.get(doc, 0) > 0 for doc in ranked[:k]) else 0.0


def precision(grades: dict[str, int], ranked: Sequence[str], k: int) -> float:
    return sum(1 for doc in ranked[:k] if grades.get(doc, 0) > 0) / k


def sources(grades: dict[str, int], ranked: Sequence[str], k: int) -> float:
    """Distinct documents among the top ``k``: ``a.md#x`` and ``a.md#y`` are one source.

    >>> sources({}, ["a.md#x", "a.md#y", "b.md", "c.md#z"], 3)
    2.0
    """
    return float(len({doc.split("#", 1)[0] for doc in ranked[:k]}))


FUNCTIONS: dict[str, Callable[[dict[str, int], Sequence[str], int], float]] = {
    "recall": recall,
    "mrr": mrr,
    "ndcg": ndcg,
    "hit": hit,
    "precision": precision,
    "sources": sources,
}


def parse_metric(name: str) -> tuple[str, int]:
    """``"ndcg@10"`` → ``("ndcg", 10)``; a clear error for anything else."""
    base, _, cutoff = name.partition("@")
    if base not in FUNCTIONS or not cutoff.isdigit() or int(cutoff) < 1:
        raise ValueError(f"unknown metric {name!r}; use one of {', '.join(METRICS)} with @k, e.g. ndcg@10")
    return base, int(cutoff)


def per_query(qrels: Qrels, run: Run, metrics: Sequence[str]) -> dict[str, dict[str, float]]:
    """``{query_id: {metric: value}}`` for every query with at least one relevant document.

    >>> per_query({"q": {"a": 1}}, {"q": {"b": 2.0, "a": 1.0}}, ["mrr@10", "hit@1"])
    {'q': {'mrr@10': 0.5, 'hit@1': 0.0}}
    """
    parsed = [(name, *parse_metric(name)) for name in metrics]
    results = {}
    for query_id, grades in qrels.items():
        if not any(g > 0 for g in grades.values()):
            continue
        ranked = ranking(run.get(query_id, {}))
        results[query_id] = {name: FUNCTIONS[base](grades, ranked, k) for name, base, k in parsed}
    return results


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def bootstrap_ci(
    values: Sequence[float], *, resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean (queries resampled with replacement)."""
    if not values:
        return 0.0, 0.0
    data = np.asarray(values, dtype=np.float64)
    samples = np.random.default_rng(seed).integers(0, len(data), size=(resamples, len(data)))
    means = data[samples].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)
