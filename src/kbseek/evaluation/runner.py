"""``kbseek eval run``: every (policy × configuration) over a dataset, scored with confidence intervals.

A configuration is a set of settings overrides. Those read at query time (``lookup.config.LookupConfig``: fusion,
weights, the domain filter, relevance thresholds, answer caps) are tried on one knowledge base through a lookup tool
of their own (``LookupTool.with_settings``): the knowledge base and its settings are never changed. Any other
override (chunking, BM25, the embedder) opens the dataset's knowledge base with it.

The ranked list scored is what the policy returns (``evaluation.retrievers``), in its order, each judged id counted
at its first occurrence; an unjudged chunk takes a place under its own id (``datasets.JudgmentMapper``).

Answer policies are also measured for what their labels promise (:func:`evidence`): *evidence precision*, the
share of the pieces labelled ``PRECISE`` or ``HIGHLY_RELEVANT`` that are judged relevant (a strong piece given
for a question without an answer counts as wrong), and the characters a default request hands the agent.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kbseek.core import metrics as m
from kbseek.core.modes import is_answer_policy
from kbseek.core.relevance import FIELDS as THRESHOLD_FIELDS
from kbseek.core.relevance import STRONG_LEVELS
from kbseek.errors import DatasetError
from kbseek.evaluation.datasets import Dataset, JudgmentMapper, cached_settings, default_cache_root, open_dataset_kb
from kbseek.evaluation.replay import replay_retriever
from kbseek.evaluation.retrievers import Retriever, ToolRetriever
from kbseek.lookup.tool import IndexRecall
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings
from kbseek.wiring import load_reranker

DEFAULT_K = (1, 3, 5, 10)
# What LookupConfig reads (plus the log level): configurations differing only in these share a knowledge base.
QUERY_TIME_SETTINGS = frozenset(
    {
        "log_level",
        "policy",
        "domain_filter",
        "fusion",
        "rrf_k",
        "weight_bm25",
        "weight_dense",
        "weight_l0",
        "weight_headings",
        "weight_dense_clauses",
        "weight_terms",
        "weight_section",
        "weight_clauses",
        "lexicon_weight",
        "cross_language_terms",
        "lane_depth",
        "answer_budget_chars",
        "answer_per_document",
        "source_url_template",
        "query_rewrite",
        "slow_lookup_ms",
        "answerability_model",
        "answerability_cut",
        "off_topic_floor",
        *THRESHOLD_FIELDS,
    }
)


@dataclass(slots=True)
class RunResult:
    name: str
    policy: str
    overrides: dict[str, Any]
    run: m.Run
    per_query: dict[str, dict[str, float]]
    summary: dict[str, dict[str, float]]
    seconds: float
    no_answer: dict[str, Any] = field(default_factory=dict)
    by_tag: dict[str, dict[str, float]] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    strong: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per query: its strong pieces, judged


def metric_names(ks: tuple[int, ...]) -> list[str]:
    names = ["hit@1"]
    for k in ks:
        names += [f"recall@{k}", f"mrr@{k}", f"ndcg@{k}", f"precision@{k}"]
        if k != 1:
            names += [f"hit@{k}", f"sources@{k}"]
    return names


def run_policy(
    source: KnowledgeBase | Retriever,
    dataset: Dataset,
    *,
    policy: str,
    depth: int,
    names: list[str],
    name: str,
    overrides: dict[str, Any],
) -> RunResult:
    """Score one policy over the dataset's queries. ``source`` is a retriever (``evaluation.retrievers``: in
    process, a replay, a server over HTTP) or a knowledge base, whose own lookup tool is then used."""
    retrieve = ToolRetriever(source.lookup_tool) if isinstance(source, KnowledgeBase) else source
    mapper = JudgmentMapper(dataset.qrels, markdown=dataset.is_markdown)
    run: m.Run = {}
    strong: dict[str, list[dict[str, Any]]] = {}  # per query, its pieces labelled PRECISE or HIGHLY_RELEVANT
    chars: list[int] = []
    started = time.perf_counter()
    for query in dataset.queries + dataset.unanswerable:
        ranked: dict[str, float] = {}
        grades = dataset.qrels.get(query.id, {})
        retrieved = retrieve(query, policy, depth)
        for chunk in retrieved:
            ids = mapper.ids(chunk)
            level = getattr(chunk, "level", None)
            if level in STRONG_LEVELS:
                relevant = any(grades.get(j, 0) > 0 for j in ids)
                piece = {"id": ids[0] if ids else chunk.source_path, "level": level, "relevant": relevant}
                strong.setdefault(query.id, []).append(piece)
            for judged in ids:
                if judged not in ranked:
                    ranked[judged] = 1.0 / (len(ranked) + 1)
        given = getattr(retrieved, "chars", None)  # what an answer hands the agent (answer policies only)
        if given is not None:
            chars.append(given)
        run[query.id] = ranked
    seconds = time.perf_counter() - started
    per_query = m.per_query(dataset.qrels, run, names)
    summary = {}
    for metric in names:
        values = [scores[metric] for scores in per_query.values()]
        low, high = m.bootstrap_ci(values)
        summary[metric] = {"mean": round(m.mean(values), 4), "ci_low": round(low, 4), "ci_high": round(high, 4)}
    return RunResult(
        name,
        policy,
        overrides,
        run,
        per_query,
        summary,
        seconds,
        refusals(dataset, run),
        tag_means(dataset, per_query, names),
        evidence([p["relevant"] for pieces in strong.values() for p in pieces], chars)
        if is_answer_policy(policy)
        else {},
        strong,
    )


def evidence(strong: list[bool], chars: list[int]) -> dict[str, Any]:
    """Evidence precision (``None`` when nothing was labelled strong) with its interval, and answer size.

    >>> evidence([True, True, False, True], [1200, 800])
    {'strong_pieces': 4, 'precision': 0.75, 'precision_ci': [0.25, 1.0], 'chars_mean': 1000.0, 'chars_max': 1200}
    """
    values = [float(x) for x in strong]
    low, high = m.bootstrap_ci(values) if values else (0.0, 0.0)
    return {
        "strong_pieces": len(values),
        "precision": round(m.mean(values), 4) if values else None,
        "precision_ci": [round(low, 4), round(high, 4)] if values else None,
        "chars_mean": round(m.mean([float(c) for c in chars]), 1) if chars else None,
        "chars_max": max(chars) if chars else None,
    }


def refusals(dataset: Dataset, run: m.Run) -> dict[str, Any]:
    """An empty answer is a refusal (*no confident match*): right for a question without an answer, wrong
    for an answerable one. Recall policies return nothing only when no chunk matches at all; answer policies
    (``legacy``, ``answer:…``) refuse below the confidence thresholds."""
    answerable = [q.id for q in dataset.queries]
    out: dict[str, Any] = {
        "answerable": len(answerable),
        "answerable_refused": round(m.mean([float(not run.get(q)) for q in answerable]), 4),
    }
    if dataset.unanswerable:
        out["unanswerable"] = len(dataset.unanswerable)
        out["unanswerable_refused"] = round(m.mean([float(not run.get(q.id)) for q in dataset.unanswerable]), 4)
    return out


def tag_means(
    dataset: Dataset, per_query: dict[str, dict[str, float]], names: list[str]
) -> dict[str, dict[str, float]]:
    """Each metric's mean over the answerable queries of each tag (``queries``: how many)."""
    groups: dict[str, list[str]] = {}
    for query in dataset.queries:
        for tag in query.metadata.get("tags") or []:
            groups.setdefault(str(tag), []).append(query.id)
    return {
        tag: {
            "queries": len(ids),
            **{n: round(m.mean([per_query[q][n] for q in ids if q in per_query]), 4) for n in names},
        }
        for tag, ids in sorted(groups.items())
    }


def _strong_view(run: RunResult, query_id: str) -> dict[str, Any]:
    """An answer policy's strong pieces for one query (``strong``: id, level, judged relevant), so a precision
    figure can be traced to its questions; a recall policy labels nothing and shows none."""
    return {"strong": run.strong.get(query_id, [])} if is_answer_policy(run.policy) else {}


def _same_index(current: Settings, wanted: Settings) -> bool:
    """Whether ``wanted`` differs from ``current`` only in settings applied at query time."""
    return current.model_dump(exclude=set(QUERY_TIME_SETTINGS)) == wanted.model_dump(exclude=set(QUERY_TIME_SETTINGS))


def evaluate(
    dataset: Dataset,
    *,
    policies: list[str],
    configs: list[tuple[str, dict[str, Any]]] | None = None,
    ks: tuple[int, ...] = DEFAULT_K,
    depth: int = 100,
    cache_root: Path | None = None,
    base: Settings | None = None,
    fixture: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every (policy × configuration) over the dataset; the JSON of ``kbseek eval run --json``. With ``fixture``
    (``evaluation.replay``) the recorded lane candidates are re-scored instead of recalled."""
    base = base or Settings()
    configs = configs or [("default", {})]
    names = metric_names(tuple(sorted(set(ks))))
    runs = []
    timings: dict[str, float] = {}
    kb: KnowledgeBase | None = None
    try:
        for config_name, overrides in configs:
            settings = cached_settings(dataset, base.model_copy(update=overrides), cache_root or default_cache_root())
            if kb is None or not _same_index(kb.settings, settings):
                if kb is not None:
                    kb.close()
                started = time.perf_counter()
                kb = open_dataset_kb(dataset, settings)
                timings[f"build:{config_name}"] = round(time.perf_counter() - started, 3)
            tool = kb.lookup_tool.with_settings(settings)
            if isinstance(tool.recall, IndexRecall):  # the reranker belongs to the recall, not the configuration
                tool = replace(tool, recall=replace(tool.recall, reranker=load_reranker(settings)))
            retrieve = ToolRetriever(tool) if fixture is None else replay_retriever(tool, dataset, fixture, settings)
            for policy in policies:
                name = policy if len(configs) == 1 else f"{policy}/{config_name}"
                runs.append(
                    run_policy(
                        retrieve, dataset, policy=policy, depth=depth, names=names, name=name, overrides=overrides
                    )
                )
    finally:
        if kb is not None:
            kb.close()
    return report(dataset, runs, ks=ks, depth=depth, base=base, timings=timings)


def report(
    dataset: Dataset,
    runs: list[RunResult],
    *,
    ks: tuple[int, ...],
    depth: int,
    base: Settings,
    timings: dict[str, float],
) -> dict[str, Any]:
    """The JSON of ``kbseek eval run --json`` (schemas/eval-run.schema.json)."""
    return {
        "dataset": dataset.name,
        "files": dataset.files(),
        "config": {
            "k": list(sorted(set(ks))),
            "depth": depth,
            "queries": len(dataset.queries),
            "chunk_size": base.chunk_size,
            "chunk_overlap": base.chunk_overlap,
        },
        "timings_s": timings,
        "runs": [
            {
                "name": r.name,
                "policy": r.policy,
                "overrides": r.overrides,
                "seconds": round(r.seconds, 3),
                "metrics": r.summary,
                "no_answer": r.no_answer,
                "evidence": r.evidence,
                "by_tag": r.by_tag,
                "per_query": [
                    {
                        "query_id": q.id,
                        "query": q.text,
                        "metrics": r.per_query.get(q.id, {}),
                        "ranking": list(m.ranking(r.run.get(q.id, {})))[:10],
                        "relevant": sorted(d for d, g in dataset.qrels[q.id].items() if g > 0),
                        **_strong_view(r, q.id),
                    }
                    for q in dataset.queries
                ],
                "unanswerable": [
                    {
                        "query_id": q.id,
                        "query": q.text,
                        "ranking": list(m.ranking(r.run.get(q.id, {})))[:10],
                        **_strong_view(r, q.id),
                    }
                    for q in dataset.unanswerable
                ],
            }
            for r in runs
        ],
    }


def parse_configs(specs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """``["nofilter:domain_filter=false", "k1:bm25_k1=0.9,bm25_b=0.6"]`` → named settings overrides."""
    configs = []
    for spec in specs:
        name, sep, assignments = spec.partition(":")
        if not sep or not name:
            raise DatasetError(f"--set {spec!r} must look like NAME:key=value[,key=value]")
        overrides: dict[str, Any] = {}
        for assignment in assignments.split(","):
            key, eq, value = assignment.partition("=")
            if not eq or key.strip() not in Settings.model_fields:
                raise DatasetError(f"--set {spec!r}: {key.strip()!r} is not a setting")
            overrides[key.strip()] = (
                json.loads(value) if value.strip() in ("true", "false") or _is_number(value) else value
            )
        configs.append((name, overrides))
    return configs


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
