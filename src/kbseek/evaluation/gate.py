"""The regression gate: a run against the committed baseline, with margins that say what embedding noise can move.

What is reproducible and what is not (``benchmarks/embedding_noise.py``; figures in docs/evaluation.md): one build
of the embedding engine gives bit-identical vectors whatever its thread count and however texts are batched, and
everything after the vectors (cosines, BM25, L0, fusion, levels, assembly) is exact or breaks ties by id, so one
machine repeats a run bit for bit. Across machines it does not: the 4-bit engine re-quantises its activations to
int8 at every layer, so a last-bit difference in one float (another C library's ``expf`` or ``erff``, another
compiler or instruction set) becomes a different int8 and grows. Builds of the same engine source differ by up to
1.55e-3 in cosine (median 2e-4) while a query's 50 best cosines lie a median 3.4e-4 apart: dense neighbours swap,
and a case whose best cosine sits near a confidence threshold is refused on one machine and answered on another.
Rounding cannot remove that (a value near a rounding boundary flips as a value near a neighbour does), so the gate
does not compare exact outcomes.

It asks, per case, what the outcome could have been had the noise fallen otherwise. The run's lane candidates
(``kbseek.evaluation.replay``) are replayed with every dense cosine pushed by ``±noise``: the case's relevant
evidence up and the rest down, and the reverse; the nine best up and the rest down, which raises the cosine and the
gap the confidence gate reads, and the reverse; and a few seeded random sign patterns. Each case gets a *band*: its
best and worst value of each metric, and the refusals seen. Another machine's outcome for a case lies within this
machine's band, so the baseline is compared case by case (:func:`gate`): only what falls outside a band counts.
Cases whose band is not a single point are *fragile*: a change of machine can move them.

The pushes are extremes of the noise box, not a search of it (the order among several relevant pieces, or the
confidence gate, can make a middle point better); the tolerance absorbs that remainder.
``tests/test_regression_gate.py`` shows cosines moved by the largest measured noise passing while meaningfully
worse configurations fail.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kbseek.core import metrics as m
from kbseek.core.relevance import GAP_RANK
from kbseek.evaluation.datasets import Dataset, JudgmentMapper
from kbseek.evaluation.replay import replay_retriever
from kbseek.evaluation.runner import run_policy
from kbseek.retrieval.vectors import DOCUMENT_PREFIX
from kbseek.service import KnowledgeBase

# How far a cosine may differ between machines: the largest difference measured between builds of the engine
# (1.55e-3, benchmarks/embedding_noise.py), with a margin.
EMBEDDING_NOISE = 0.002
GATED_METRICS = ("ndcg@10", "recall@10", "mrr@10", "hit@1")
TOLERANCE = 0.01  # what the pushes do not reach (see the module docstring), not float noise
RANDOM_PUSHES = 4


@dataclass(slots=True)
class NoiseBand:
    """One policy's outcomes over the pushed replays: per case the best and worst of each gated metric, and the
    refusal outcomes seen."""

    policy: str
    noise: float
    best: dict[str, dict[str, float]]  # answerable case -> metric -> best value within noise
    worst: dict[str, dict[str, float]]
    refused: dict[str, set[bool]]  # case -> the refusal outcomes seen (True: refused)
    answerable: list[str]
    unanswerable: list[str]
    fragile: list[str] = field(default_factory=list)  # cases whose metrics or refusal moved within noise


def pushes(case: dict[str, Any], relevant: set[str], *, seeds: int = RANDOM_PUSHES) -> dict[str, dict[str, int]]:
    """Sign patterns for one case's dense and latent-terms candidates (vector id -> +1 or -1), by name.

    >>> case = {"candidates": {"dense": [["a", 0.9], ["b", 0.8]]}}
    >>> p = pushes(case, {"b"}, seeds=0)
    >>> p["relevant_up"], p["accept"]
    ({'a': -1, 'b': 1}, {'a': 1, 'b': 1})
    """
    dense_ids = [vector_id for vector_id, _ in case["candidates"].get("dense", [])]
    ids = list(dict.fromkeys([*dense_ids, *(chunk_id for chunk_id, _ in case["candidates"].get("terms", []))]))
    top = set(dense_ids[: GAP_RANK - 1])  # above the reference cosine (the GAP_RANK-th best)
    patterns = {
        "relevant_up": {i: 1 if i in relevant else -1 for i in ids},
        "relevant_down": {i: -1 if i in relevant else 1 for i in ids},
        "accept": {i: 1 if i in top else -1 for i in ids},
        "refuse": {i: -1 if i in top else 1 for i in ids},
    }
    for seed in range(seeds):
        signs = np.random.default_rng([seed, len(ids), len(relevant)]).choice((-1, 1), size=len(ids))
        patterns[f"random{seed}"] = dict(zip(ids, signs.tolist()))
    return patterns


def pushed_case(case: dict[str, Any], signs: dict[str, int], noise: float) -> dict[str, Any]:
    """The case with each dense cosine moved by ``sign × noise`` (each latent-terms score by ``sign × noise`` of
    itself), re-ranked (ties by id) as the vector store ranks, and the reference cosine (the ``GAP_RANK``-th best)
    taken from the moved values.

    >>> c = pushed_case({"candidates": {"dense": [["a", 0.9], ["b", 0.899]]}, "reference_similarity": 0.899},
    ...                 {"a": -1, "b": 1}, 0.001)
    >>> c["candidates"]["dense"], c["reference_similarity"]
    ([['b', 0.9], ['a', 0.899]], 0.899)
    """
    moved = copy.copy(case)
    dense = [
        [vector_id, round(score + signs.get(vector_id, 0) * noise, 9)]
        for vector_id, score in case["candidates"].get("dense", [])
    ]
    dense.sort(key=lambda item: (-item[1], item[0]))
    moved["candidates"] = {**case["candidates"], "dense": dense}
    if "terms" in case["candidates"]:  # the same engine's sparse head: the same noise, relative to its scale
        terms = [
            [chunk_id, round(score * (1 + signs.get(chunk_id, 0) * noise), 9)]
            for chunk_id, score in case["candidates"]["terms"]
        ]
        moved["candidates"]["terms"] = sorted(terms, key=lambda item: (-item[1], item[0]))
    if dense:
        moved["reference_similarity"] = dense[min(GAP_RANK, len(dense)) - 1][1]
    return moved


def relevant_vectors(kb: KnowledgeBase, dataset: Dataset, case_id: str, query: str, dense: list[list[Any]]) -> set[str]:
    """The dense candidates (chunk or document-summary vectors) that stand for judged relevant evidence."""
    grades = dataset.qrels.get(case_id, {})
    if not grades:
        return set()
    mapper = JudgmentMapper({case_id: grades}, markdown=dataset.is_markdown)
    tokens = kb.indexes.analyzer.tokens(query)
    relevant = set()
    for vector_id, _ in dense:
        chunk_id = vector_id
        if vector_id.startswith(DOCUMENT_PREFIX):  # a summary stands for its document's best chunk, as in the lane
            doc = kb.indexes.documents.get(vector_id[len(DOCUMENT_PREFIX) :])
            if doc is None or not doc.chunk_ids:
                continue
            chunk_id = kb.indexes.bm25.order_within(tokens, doc.chunk_ids)[0]
        chunk = kb.indexes.chunks.get(chunk_id)
        if chunk is not None and any(grades.get(j, 0) > 0 for j in mapper.ids(chunk)):
            relevant.add(vector_id)
    return relevant


def noise_band(
    kb: KnowledgeBase,
    dataset: Dataset,
    fixture: dict[str, Any],
    *,
    policy: str,
    noise: float = EMBEDDING_NOISE,
    depth: int = 100,
    seeds: int = RANDOM_PUSHES,
    overrides: dict[str, Any] | None = None,
) -> NoiseBand:
    """Replay ``fixture`` (recorded from ``kb``) with every push of :func:`pushes` and collect each case's range;
    ``overrides`` are query-time settings (fusion, weights, relevance thresholds) replayed instead of ``kb``'s (on a
    lookup tool of their own: ``kb`` is not changed)."""
    settings = kb.settings.model_copy(update=overrides) if overrides else kb.settings
    tool = kb.lookup_tool.with_settings(settings) if overrides else kb.lookup_tool
    names = list(GATED_METRICS)
    cases = dataset.queries + dataset.unanswerable
    patterns = {}
    for q in cases:
        case = fixture["cases"][q.id]
        found = [*case["candidates"].get("dense", []), *case["candidates"].get("terms", [])]
        relevant = relevant_vectors(kb, dataset, q.id, q.text, found)
        patterns[q.id] = pushes(case, relevant, seeds=seeds)
    replays = [fixture]
    for push in next(iter(patterns.values())):
        moved = dict(fixture, cases={**fixture["cases"]})
        for q in cases:
            moved["cases"][q.id] = pushed_case(fixture["cases"][q.id], patterns[q.id][push], noise)
        replays.append(moved)
    best: dict[str, dict[str, float]] = {}
    worst: dict[str, dict[str, float]] = {}
    refused: dict[str, set[bool]] = {q.id: set() for q in cases}
    for replay in replays:
        result = run_policy(
            replay_retriever(tool, dataset, replay, settings),
            dataset,
            policy=policy,
            depth=depth,
            names=names,
            name=policy,
            overrides={},
        )
        for case_id, values in result.per_query.items():
            _merge(best.setdefault(case_id, {}), values, max)
            _merge(worst.setdefault(case_id, {}), values, min)
        for q in cases:
            refused[q.id].add(not result.run.get(q.id))
    fragile = sorted(q.id for q in cases if len(refused[q.id]) > 1 or best.get(q.id) != worst.get(q.id))
    return NoiseBand(
        policy,
        noise,
        best,
        worst,
        refused,
        [q.id for q in dataset.queries],
        [q.id for q in dataset.unanswerable],
        fragile,
    )


def _merge(into: dict[str, float], values: dict[str, float], pick: Callable[[float, float], float]) -> None:
    for name, value in values.items():
        into[name] = pick(into[name], value) if name in into else value


def gate(
    band: NoiseBand, baseline: dict[str, Any], *, tolerance: float = TOLERANCE, metrics: tuple[str, ...] = GATED_METRICS
) -> list[str]:
    """What embedding noise cannot explain, against ``baseline`` (a run of ``kbseek eval run --json`` of the same
    policy), as messages (empty: the gate passes).

    Per answerable case and metric, the baseline's value is compared with the band: below the case's best within
    noise is a loss *beyond noise* (by how much), above its worst a gain beyond noise; a case whose baseline value
    lies within its band counts for nothing. A metric fails when the mean over the cases of gains minus losses
    beyond noise is below ``-tolerance``. Refusals of answerable cases are compared the same way (the baseline
    refused a case when its ranking is empty): refused in every replay where the baseline answered is a loss,
    answered in every replay where it refused a gain. The baseline keeps no per-case record of the cases without
    an answer, so their refusal rate is compared with the band's best (a case refused in any replay counts).
    Cases only in one of the two are ignored: added cases wait for a baseline refresh.

    >>> band = NoiseBand("hybrid", 0.002, {"a": {"hit@1": 1.0}, "b": {"hit@1": 0.0}}, {"a": {"hit@1": 0.0},
    ...                  "b": {"hit@1": 0.0}}, {"a": {False}, "b": {False}}, ["a", "b"], [])
    >>> gate(band, {"per_query": [{"query_id": "a", "metrics": {"hit@1": 1.0}, "ranking": ["x"]},
    ...                           {"query_id": "b", "metrics": {"hit@1": 1.0}, "ranking": ["y"]}]}, metrics=("hit@1",))
    ... # doctest: +NORMALIZE_WHITESPACE
    ['hybrid: hit@1 fell 0.5000 beyond embedding noise (±0.002; tolerance 0.01):
      below the baseline whatever the noise in 1 case(s) (b), above it in 0']
    """
    before = {q["query_id"]: q for q in baseline.get("per_query", [])}
    shared = [q for q in band.answerable if q in before and q in band.best]
    problems = []
    for metric in metrics:
        losses = {
            q: before[q]["metrics"][metric] - band.best[q][metric]
            for q in shared
            if band.best[q][metric] < before[q]["metrics"][metric]
        }
        gains = {
            q: band.worst[q][metric] - before[q]["metrics"][metric]
            for q in shared
            if band.worst[q][metric] > before[q]["metrics"][metric]
        }
        net = (sum(gains.values()) - sum(losses.values())) / max(len(shared), 1)
        if net < -tolerance:
            problems.append(
                f"{band.policy}: {metric} fell {-net:.4f} beyond embedding noise (±{band.noise}; tolerance "
                f"{tolerance}): below the baseline whatever the noise in {len(losses)} case(s) "
                f"({_listed(losses)}), above it in {len(gains)}"
            )
    refused_before = {q: not before[q].get("ranking") for q in shared}
    newly_refused = [q for q in shared if not refused_before[q] and band.refused[q] == {True}]
    newly_answered = [q for q in shared if refused_before[q] and band.refused[q] == {False}]
    net = (len(newly_refused) - len(newly_answered)) / max(len(shared), 1)
    if net > tolerance:
        problems.append(
            f"{band.policy}: {net:.4f} more answerable cases refused beyond embedding noise: refused "
            f"whatever the noise in {len(newly_refused)} case(s) the baseline answered "
            f"({_listed(newly_refused)}), answered in {len(newly_answered)} it refused"
        )
    rate = baseline.get("no_answer", {}).get("unanswerable_refused")
    if rate is not None and band.unanswerable:
        best = m.mean([float(True in band.refused[q]) for q in band.unanswerable])
        if best < rate - tolerance:
            problems.append(
                f"{band.policy}: cases without an answer refused {best:.4f} at best within embedding "
                f"noise < baseline {rate:.4f} - {tolerance}"
            )
    return problems


def _listed(cases: Any, limit: int = 10) -> str:
    names = sorted(cases)
    return ", ".join(names[:limit]) + (" …" if len(names) > limit else "")
