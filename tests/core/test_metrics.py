import math
import random

import pytest
import pytrec_eval

from kbseek.core import metrics


def test_metrics_by_hand():
    grades = {"a": 2, "b": 1, "z": 0}
    ranked = ["x", "a", "y", "b"]
    assert metrics.recall(grades, ranked, 2) == 0.5
    assert metrics.mrr(grades, ranked, 10) == 0.5 and metrics.mrr(grades, ranked, 1) == 0.0
    assert metrics.hit(grades, ranked, 1) == 0.0 and metrics.hit(grades, ranked, 2) == 1.0
    assert metrics.precision(grades, ranked, 4) == 0.5
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert metrics.ndcg(grades, ranked, 10) == pytest.approx(dcg / idcg)


def test_no_metric_can_exceed_one_and_missing_runs_score_zero():
    result = metrics.per_query({"q": {"a": 1}, "empty": {"b": 0}}, {}, ["ndcg@10", "recall@10"])
    assert result == {"q": {"ndcg@10": 0.0, "recall@10": 0.0}}


def test_unknown_metric_is_a_clear_error():
    with pytest.raises(ValueError, match="ndcg@10"):
        metrics.parse_metric("map@x")


def test_metrics_agree_with_pytrec_eval():
    rng = random.Random(11)
    docs = [f"d{i}" for i in range(40)]
    qrels, run = {}, {}
    for q in range(60):
        qrels[f"q{q}"] = {d: rng.choice([1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 6))}
        # distinct scores: trec_eval breaks ties by doc id in reverse, we by id ascending
        run[f"q{q}"] = {d: 1.0 / (i + 1) for i, d in enumerate(rng.sample(docs, rng.randint(0, 25)))}
    ours = metrics.per_query(qrels, run, ["ndcg@10", "mrr@10", "recall@10", "precision@5", "hit@1"])
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_10", "P_5", "recip_rank", "P_1"})
    reference = evaluator.evaluate({q: r for q, r in run.items() if r})
    for q in qrels:
        ref = reference.get(q, {"ndcg_cut_10": 0, "recall_10": 0, "P_5": 0, "P_1": 0, "recip_rank": 0})
        assert ours[q]["ndcg@10"] == pytest.approx(ref["ndcg_cut_10"])
        assert ours[q]["recall@10"] == pytest.approx(ref["recall_10"])
        assert ours[q]["precision@5"] == pytest.approx(ref["P_5"])
        assert ours[q]["hit@1"] == pytest.approx(ref["P_1"])
        ranked = metrics.ranking(run[q])
        if any(qrels[q].get(d, 0) > 0 for d in ranked[:10]):  # recip_rank has no cut-off
            assert ours[q]["mrr@10"] == pytest.approx(ref["recip_rank"])


def test_bootstrap_interval_contains_the_mean():
    values = [0.0, 1.0] * 50
    low, high = metrics.bootstrap_ci(values)
    assert low < 0.5 < high and high - low < 0.3
    assert metrics.bootstrap_ci([1.0, 1.0]) == (1.0, 1.0)
