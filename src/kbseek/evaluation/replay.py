"""Offline runs from fixtures: every case's lane candidates recorded once, fusion, relevance levels and answer
assembly re-scored from them in seconds, without embedding anything.

A fixture names the index version (database change counter + analyser rules and dictionary) and the embedding
model it came from; replaying it against a knowledge base at another version is refused (record again). Lanes
are recorded ``RECORD_DEPTH`` deep, the depth ``lookup_knowledge`` asks for at ``top_k`` 50, and cut to the depth a
live run would use, so a replay gives the live pipeline's output on the same candidates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kbseek.errors import DatasetError
from kbseek.retrieval import recall as retrieval
from kbseek.core import metrics as m
from kbseek.core.analysis import clean_query
from kbseek.core.answer import assemble
from kbseek.core.keywords import DocumentMatch, KeywordHint
from kbseek.evaluation.runner import ANSWER_PREFIX, Dataset, JudgmentMapper, answer_chunks
from kbseek.lookup.views import hint_view
from kbseek.ports import VectorHit
from kbseek.service import KnowledgeBase
from kbseek.lookup.tool import document_info, levelled

FORMAT = 1
ANSWER_TOP_K = 50
RECORD_DEPTH = ANSWER_TOP_K * 3  # LookupTool asks retrieval for max(top_k * 3, 15)


def record(kb: KnowledgeBase, dataset: Dataset) -> dict[str, Any]:
    """Each case's hybrid lane candidates (ids and raw scores), its L0 hint and the query's reference cosine."""
    cases = {}
    for query in dataset.queries + dataset.unanswerable:
        result = kb.lookup(query.text, top_k=RECORD_DEPTH, policy="hybrid")
        cases[query.id] = {"query": query.text, "hint": hint_view(result.hint),
                           "candidates": {lane: [[cid, score] for cid, score in found]
                                          for lane, found in result.candidates.items()},
                           "reference_similarity": result.reference_similarity}
    dense = kb.indexes.dense
    return {"format": FORMAT, "dataset": dataset.name, "index_version": kb.indexes.index_version,
            "embedding_model": dense.model_id if dense is not None else None,
            "embedder": dense.embedder.model_id if dense is not None else None, "depth": RECORD_DEPTH, "cases": cases}


def load(path: Path) -> dict[str, Any]:
    try:
        fixture = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: not a fixture file ({exc})") from None
    if not isinstance(fixture, dict) or fixture.get("format") != FORMAT or "cases" not in fixture:
        raise DatasetError(f"{path}: not a kbseek fixture of format {FORMAT}; record it again")
    return fixture


def check_fresh(fixture: dict[str, Any], kb: KnowledgeBase, dataset: Dataset) -> None:
    """Refuse a fixture recorded from another index or for other cases."""
    kb.indexes.refresh()
    if fixture["index_version"] != kb.indexes.index_version:
        raise DatasetError(f"stale fixture: recorded at index {fixture['index_version']}, the knowledge base is at "
                           f"{kb.indexes.index_version}", hint="record it again with 'kbseek eval record'")
    missing = [q.id for q in dataset.queries + dataset.unanswerable if q.id not in fixture["cases"]]
    if missing:
        raise DatasetError(f"stale fixture: {len(missing)} case(s) not recorded, e.g. {missing[0]}",
                           hint="record it again with 'kbseek eval record'")


def _hint(view: dict[str, Any], query: str) -> KeywordHint:
    matches = tuple(DocumentMatch(x["document_id"], x["path"], x["title"], x["category"], x["score"], x["field"],
                                  x["exact"], tuple(x["matched_keywords"])) for x in view["matches"])
    return KeywordHint(query, matches, tuple(view["matched_keywords"]), tuple(view["domains"]), view["single_domain"])


def replay(kb: KnowledgeBase, dataset: Dataset, fixture: dict[str, Any], *, policy: str, depth: int) -> m.Run:
    """The run ``policy`` (``hybrid`` or ``answer:hybrid``) gives on the recorded candidates, with the
    knowledge base's current fusion settings and relevance thresholds."""
    if policy not in ("hybrid", ANSWER_PREFIX + "hybrid"):
        raise DatasetError(f"fixtures replay 'hybrid' and 'answer:hybrid', not {policy!r}")
    check_fresh(fixture, kb, dataset)
    answer = policy.startswith(ANSWER_PREFIX)
    config, thresholds = kb.fusion_config(), kb.relevance_thresholds_for(fixture["embedder"])
    top_k = RECORD_DEPTH if answer else depth
    lane_depth = max(top_k, config.lane_depth)
    mapper = JudgmentMapper(dataset.qrels, markdown=dataset.is_markdown)
    infos = {d: document_info(doc) for d, doc in kb.indexes.documents.items()}
    run: m.Run = {}
    for query in dataset.queries + dataset.unanswerable:
        case = fixture["cases"][query.id]
        lanes: dict[str, list[str]] = {}
        raw: dict[str, dict[str, float]] = {}
        for lane, found in case["candidates"].items():  # in the recorded (live) lane order
            found = found if lane == "l0" else found[:lane_depth]
            if lane == "dense":  # recorded as the store returned them: map summary vectors as a live lookup does
                tokens = kb.indexes.analyzer.tokens(clean_query(query.text))
                lanes[lane], raw[lane] = retrieval.dense_lane(kb.indexes, tokens, [VectorHit(c, s) for c, s in found])
            else:
                lanes[lane], raw[lane] = [cid for cid, _ in found], {cid: score for cid, score in found}
        hits = retrieval.fuse(kb.indexes, lanes, raw, config, top_k) if any(lanes.values()) else []
        if answer:
            candidates = levelled(kb.indexes, query.text, hits, _hint(case["hint"], query.text), thresholds,
                                  case["reference_similarity"])
            result = assemble(candidates[:ANSWER_TOP_K], infos, seen={}, budget_chars=100_000,
                              per_document=kb.settings.answer_per_document)
            chunks = answer_chunks(kb, result)
        else:
            chunks = [h.chunk for h in hits]
        ranked: dict[str, float] = {}
        for chunk in chunks:
            for judged in mapper.ids(chunk):
                ranked.setdefault(judged, 1.0 / (len(ranked) + 1))
        run[query.id] = ranked
    return run
