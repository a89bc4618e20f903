"""Offline runs from fixtures: every case's lane candidates recorded once, then fusion, relevance levels and answer
assembly re-scored from them in seconds, without embedding anything.

A replay is the lookup tool itself with its recall swapped for the recording (:class:`FixtureRecall`): lanes cut
to the depth a live recall fetches and fused by the live fusion, then the tool's own steps (levels, placement,
assembly) under the configuration being tried. So a replay gives the live answer on the same candidates by
construction. A fixture names the index version (database change counter + analyser rules and dictionary) and the
embedding model it came from, and the settings that shaped its lanes; replaying it against a knowledge base at
another version, or under settings that would have recorded other lanes, is refused (record again).
Lanes are recorded ``RECORD_DEPTH`` deep, the depth ``lookup_knowledge`` recalls at ``top_k`` 50. The section
lane, which reads only the BM25 and dense candidates, the keyword hint and the index, is run again by today's code
rather than read from the recording, so a change to the purposes a question or a section declares replays too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kbseek.core.alertline import clean as clean_query
from kbseek.core.alertline import looks_like_alert
from kbseek.core.ids import sha256_hex
from kbseek.core.keywords import DocumentMatch, KeywordHint
from kbseek.core.results import CategoryFilter, RecallResult
from kbseek.errors import DatasetError
from kbseek.evaluation.datasets import Dataset
from kbseek.evaluation.retrievers import ANSWER_TOP_K, ToolRetriever
from kbseek.lookup.answering import recall_depth
from kbseek.lookup.config import LookupConfig
from kbseek.lookup.tool import LookupTool
from kbseek.lookup.views import hint_view
from kbseek.observability.logs import current_request_id
from kbseek.ports import VectorHit
from kbseek.retrieval import recall as retrieval
from kbseek.retrieval.indexes import Indexes
from kbseek.retrieval.lanes import LANES, POOL_SOURCES, LaneQuery, LaneResult, section_lane
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

FORMAT = 1
RECORD_DEPTH = recall_depth(ANSWER_TOP_K)  # what lookup_knowledge recalls for the largest answer
# Settings that shape the recorded lanes, which a replay reads as recorded and cannot run again: the chunks and
# their vectors, BM25's scoring, the words a query's lanes read and the filter a live recall applies. Not the
# embedder: a replay runs without one, and the fixture names the model its cosines came from.
EMBEDDING_SETTINGS = ("embedder_model", "embedding_engine", "embedding_input", "embed_summaries", "latent_terms")
LANE_SETTINGS = (
    "chunk_size",
    "chunk_overlap",
    "bm25_k1",
    "bm25_b",
    *EMBEDDING_SETTINGS,
    "lexicon_weight",
    "cross_language_terms",
    "synonyms_file",
    "domain_filter",
)
# A lane weighted 0 does not run, so a fixture recorded so holds none of its hits (the section lane is run again)
LANE_WEIGHTS = tuple(f"weight_{lane.name}" for lane in LANES if lane.name != "section")
_ORDER = [lane.name for lane in LANES]
# Recorded lanes that pool other lanes' candidates: turned off, a lane they read changes what they recall live
POOLS = {"dense_clauses": POOL_SOURCES, **{n: tuple(_ORDER[: _ORDER.index(n)]) for n in ("headings", "terms")}}


def record(kb: KnowledgeBase, dataset: Dataset) -> dict[str, Any]:
    """Each case's hybrid lane candidates (ids and raw scores), its L0 hint and the query's reference cosine."""
    cases = {}
    for query in dataset.queries + dataset.unanswerable:
        result = kb.lookup(query.text, top_k=RECORD_DEPTH, policy="hybrid")
        cases[query.id] = {
            "query": query.text,
            "hint": hint_view(result.hint),
            "candidates": {lane: [[cid, score] for cid, score in found] for lane, found in result.candidates.items()},
            "reference_similarity": result.reference_similarity,
        }
    dense = kb.indexes.dense
    return {
        "format": FORMAT,
        "dataset": dataset.name,
        "index_version": kb.indexes.index_version,
        "embedding_model": dense.model_id if dense is not None else None,
        "embedder": dense.embedder.model_id if dense is not None else None,
        "depth": max(RECORD_DEPTH, kb.settings.lane_depth),  # a live recall fetches the deeper of the two
        "settings": lane_settings(kb.settings),
        "cases": cases,
    }


def lane_settings(settings: Settings) -> dict[str, Any]:
    """The settings a fixture's lanes were recorded under, as JSON; of a synonyms file its content's digest."""
    values = {name: getattr(settings, name) for name in (*LANE_SETTINGS, *LANE_WEIGHTS)}
    file = settings.synonyms_file
    values["synonyms_file"] = sha256_hex(file.read_bytes())[:16] if file is not None and file.is_file() else file
    return {name: str(value) if isinstance(value, Path) else value for name, value in values.items()}


def check_settings(fixture: dict[str, Any], settings: Settings) -> None:
    """Refuse to replay ``fixture`` under ``settings`` that would have recorded other lanes, naming each setting: a
    replay reads the lanes as recorded, so it would report the recorded configuration's scores under the tried
    one's name. A fixture from before settings were recorded is taken as recorded under the defaults."""
    if settings.reranker_url:
        raise DatasetError(
            "a replay does not rerank: it reads the recorded lanes and fuses them, and a reranker reorders a live "
            "recall's fused hits",
            hint="evaluate a reranker live (without --replay)",
        )
    assumed = "settings" not in fixture
    recorded = lane_settings(Settings.model_construct()) if assumed else fixture["settings"]
    wanted = lane_settings(settings)
    names = [n for n in LANE_SETTINGS if fixture.get("embedding_model") or n not in EMBEDDING_SETTINGS]
    differ = [name for name in names if name in recorded and recorded[name] != wanted[name]]
    # a lane recorded off holds no hits; one recorded on replays at any weight (at 0 it is left out), except a lane
    # that a recorded pooling lane read
    differ += [name for name in LANE_WEIGHTS if wanted[name] > 0 and recorded.get(name, 1) == 0]
    ran = {lane for case in fixture["cases"].values() for lane in case["candidates"]}
    for pooling, read in POOLS.items():
        if pooling in ran and wanted[f"weight_{pooling}"] > 0:
            differ += [f"weight_{n}" for n in read if n in ran and wanted[f"weight_{n}"] == 0]
    differ = list(dict.fromkeys(differ))  # a weight can be named by two rules
    if differ:
        said = ", ".join(f"{name}={recorded.get(name)!r} (tried: {wanted[name]!r})" for name in differ)
        raise DatasetError(
            f"the fixture's lanes were recorded under {said}"
            + (" (assumed: the fixture is older than recorded settings)" if assumed else "")
            + "; a replay cannot run its lanes again",
            hint=f"record it again with {', '.join(f'KBSEEK_{name.upper()}' for name in differ)} "
            "set as tried ('kbseek eval record' reads the environment), or replay only what a replay scores again: "
            "fusion, lane weights (not a lane recorded off, nor one a pooling lane read), relevance thresholds and "
            "the answer's shape",
        )


def load(path: Path) -> dict[str, Any]:
    try:
        fixture = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: not a fixture file ({exc})") from None
    if not isinstance(fixture, dict) or fixture.get("format") != FORMAT or "cases" not in fixture:
        raise DatasetError(f"{path}: not a kbseek fixture of format {FORMAT}; record it again")
    return fixture


def check_fresh(fixture: dict[str, Any], indexes: Indexes, dataset: Dataset) -> None:
    """Refuse a fixture recorded from another index or for other cases."""
    indexes.refresh()
    if fixture["index_version"] != indexes.index_version:
        raise DatasetError(
            f"stale fixture: recorded at index {fixture['index_version']}, the knowledge base is at "
            f"{indexes.index_version}",
            hint="record it again with 'kbseek eval record'",
        )
    missing = [q.id for q in dataset.queries + dataset.unanswerable if q.id not in fixture["cases"]]
    if missing:
        raise DatasetError(
            f"stale fixture: {len(missing)} case(s) not recorded, e.g. {missing[0]}",
            hint="record it again with 'kbseek eval record'",
        )


def replay_retriever(tool: LookupTool, dataset: Dataset, fixture: dict[str, Any], settings: Settings) -> ToolRetriever:
    """``tool`` (configured by ``settings``) reading ``fixture``'s lanes instead of its own, recording nothing: the
    retriever the runner scores a replay with. Refused when the fixture is stale or ``settings`` would have recorded
    other lanes."""
    check_fresh(fixture, tool.indexes, dataset)
    check_settings(fixture, settings)
    recall = FixtureRecall(tool.indexes, fixture)
    return ToolRetriever(replace(tool, recall=recall, sessions=None, invocations=None, telemetry=None))


@dataclass(frozen=True)
class FixtureRecall:
    """The recall of a query as recorded: its lanes, cut to the depth a live recall fetches, fused by the
    configured fusion (``retrieval.recall.fuse``); its L0 hint and reference cosine as recorded."""

    indexes: Indexes
    fixture: dict[str, Any]
    _by_query: dict[str, dict[str, Any]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_query", {c["query"].strip(): c for c in self.fixture["cases"].values()})

    @property
    def embedder_id(self) -> str | None:
        """The model the recorded cosines came from: its calibrated thresholds apply."""
        return self.fixture["embedder"]

    def __call__(
        self,
        query: str,
        *,
        top_k: int,
        policy: str,
        category: str | None,
        only: frozenset[str] | None,
        config: LookupConfig,
    ) -> RecallResult:
        if policy != "hybrid":
            raise DatasetError(
                f"fixtures hold the hybrid recall: they replay 'hybrid', 'answer:hybrid' and 'legacy', "
                f"not the {policy!r} recall"
            )
        if category is not None or only is not None:
            raise DatasetError("fixtures hold unfiltered lanes: a replay takes no category or filters")
        lane_depth = max(top_k, config.fusion.lane_depth)  # as a live hybrid recall fetches
        if lane_depth > self.fixture["depth"]:
            raise DatasetError(
                f"the fixture holds {self.fixture['depth']} candidates per lane; a recall of {top_k} at "
                f"lane_depth {config.fusion.lane_depth} needs {lane_depth}",
                hint="use a smaller --depth or lane_depth, or record again",
            )
        case = self._by_query.get(query.strip())
        if case is None:
            raise DatasetError(
                f"stale fixture: no case recorded for the query {query[:80]!r}",
                hint="query rewriting asks for variants no fixture holds: replay with query_rewrite=off",
            )
        pasted = looks_like_alert(query)
        cleaned = clean_query(query, pasted=pasted)  # what the live lanes and fusion saw
        lanes: dict[str, list[str]] = {}
        raw: dict[str, dict[str, float]] = {}
        for lane, found in case["candidates"].items():  # in the recorded (live) lane order
            if config.fusion.weights.get(lane, 1.0) <= 0:  # the configuration holds every registered lane's weight
                continue  # a lane weighted 0 does not run in a live recall (``lanes.run_lanes``)
            found = found if lane == "l0" else found[:lane_depth]
            if lane == "dense":  # recorded as the store returned them: map summary vectors as a live lookup does
                tokens = self.indexes.analyzer.tokens(cleaned)
                lanes[lane], raw[lane] = retrieval.dense_lane(self.indexes, tokens, [VectorHit(c, s) for c, s in found])
            else:
                lanes[lane], raw[lane] = [cid for cid, _ in found], {cid: score for cid, score in found}
        # a lane over the other lanes' candidates: run by today's code, not as recorded, and only where a live recall
        # runs it (kept when it ran and found nothing, as the live recall keeps it)
        hint = _hint(case["hint"], query)
        section = config.fusion.weights.get("section", 0)
        found = self._section_lane(cleaned, lanes, raw, hint, lane_depth, config) if section else None
        lanes.pop("section", None), raw.pop("section", None)
        if found is not None:
            lanes["section"], raw["section"] = found
        fusion, _ = retrieval.language_weighted(self.indexes, cleaned, raw.get("dense"), config.fusion, pasted=pasted)
        hits = (
            retrieval.ranked_fusion(self.indexes, cleaned, lanes, raw, fusion, policy, self.embedder_id, top_k)
            if any(lanes.values())
            else []
        )
        return RecallResult(
            query=query,
            request_id=current_request_id(),
            policy=policy,
            hits=tuple(hits),
            filter=CategoryFilter(None, "none"),
            index_version=self.indexes.index_version,
            timings_ms={},
            hint=hint,
            reference_similarity=case["reference_similarity"],
            candidates={lane: [(c, s) for c, s in found] for lane, found in case["candidates"].items()},
        )

    def _section_lane(
        self,
        cleaned: str,
        lanes: dict[str, list[str]],
        raw: dict[str, dict[str, float]],
        hint: KeywordHint,
        depth: int,
        config: LookupConfig,
    ) -> tuple[list[str], dict[str, float]] | None:
        """The section lane run again over the recorded BM25 and dense candidates and keyword hint, under the
        configured lane weights and domain filter (``None`` when it has nothing to say): it reads only those and the
        index, so a change to it (or to the purposes it reads) replays without recording again."""
        earlier = [LaneResult(name, lanes[name], raw[name]) for name in POOL_SOURCES if name in lanes]
        category = hint.single_domain if config.domain_filter else None  # the hint as a live recall filters it
        query = LaneQuery(
            cleaned, [], "hybrid", depth, category, hint, None, None, weights=config.fusion.weights, earlier=earlier
        )
        result = section_lane(self.indexes, query)
        return (result.ids, result.scores) if result is not None else None


def _hint(view: dict[str, Any], query: str) -> KeywordHint:
    matches = tuple(
        DocumentMatch(
            x["document_id"],
            x["path"],
            x["title"],
            x["category"],
            x["score"],
            x["field"],
            x["exact"],
            tuple(x["matched_keywords"]),
        )
        for x in view["matches"]
    )
    return KeywordHint(query, matches, tuple(view["matched_keywords"]), tuple(view["domains"]), view["single_domain"])
