import json
import random

import bm25s
import numpy as np
import pytest

from kbseek.core.analysis import Analyzer
from kbseek.core.lexical import BM25Index


def corpus(seed=7, n=300):
    rng = random.Random(seed)
    vocab = [f"t{i}" for i in range(400)]
    return [[rng.choice(vocab[: rng.randint(3, 400)]) for _ in range(rng.randint(1, 80))] for _ in range(n)]


@pytest.mark.parametrize("k1, b", [(1.2, 0.75), (1.5, 0.75), (0.9, 0.4)])
def test_scores_equal_bm25s_lucene(k1, b):
    docs = corpus()
    index = BM25Index(k1=k1, b=b)
    for i, tokens in enumerate(docs):
        index.add(f"d{i}", tokens)
    reference = bm25s.BM25(k1=k1, b=b, method="lucene")
    reference.index(docs, show_progress=False)
    for query in (["t1", "t2", "t1"], ["t3"], ["t10", "t100", "t399", "t0"]):
        ours = index.scores(query)
        np.testing.assert_allclose(ours, reference.get_scores(query), rtol=1e-5, atol=1e-6)


def test_scores_equal_bm25s_on_real_bilingual_text():
    analyzer = Analyzer()
    texts = [
        "支付网关请求超时 ERR_TIMEOUT",
        "磁盘空间不足 DiskSpaceUsageHigh",
        "CPU 使用率过高 HighCPUUsage 告警",
        "Kafka consumer lag 消费积压",
        "ERR_TIMEOUT 重试 幂等",
    ]
    docs = [analyzer.tokens(t) for t in texts]
    index = BM25Index()
    for i, tokens in enumerate(docs):
        index.add(str(i), tokens)
    reference = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    reference.index(docs, show_progress=False)
    query = analyzer.tokens("支付超时 timeout")
    np.testing.assert_allclose(index.scores(query), reference.get_scores(query), rtol=1e-5)
    assert [h.chunk_id for h in index.search(query, k=2)] == ["0", "4"]


def test_incremental_updates_equal_a_fresh_build():
    docs = corpus(seed=3, n=1500)
    live = BM25Index()
    for i, tokens in enumerate(docs):
        live.add(f"d{i}", tokens)
    removed = [f"d{i}" for i in range(0, 1500, 2)]  # enough to trigger compaction
    assert live.remove(removed) == 750
    live.add("d1", docs[0])  # re-index an existing id with other tokens
    fresh = BM25Index()
    for i, tokens in enumerate(docs):
        if i % 2:
            fresh.add(f"d{i}", docs[0] if i == 1 else tokens)
    query = ["t1", "t5", "t9"]
    assert [(h.chunk_id, round(h.score, 4)) for h in live.search(query, k=20)] == [
        (h.chunk_id, round(h.score, 4)) for h in fresh.search(query, k=20)
    ]
    assert len(live) == 750


def test_group_filter_and_empty_cases():
    index = BM25Index()
    index.add("a", ["x", "y"], group="api")
    index.add("b", ["x"], group="ops")
    assert [h.chunk_id for h in index.search(["x"], k=5, groups=["ops"])] == ["b"]
    assert index.search(["x"], k=5, groups=["nope"]) == []
    assert index.search(["zzz"], k=5) == [] and index.search([], k=5) == []
    with pytest.raises(ValueError):
        BM25Index(b=2)


def test_idf_ranks_rare_terms_above_common_ones():
    from kbseek.core.lexical import BM25Index

    index = BM25Index()
    index.add("c1", ["disk", "full"])
    index.add("c2", ["disk", "inode"])
    assert index.idf("inode") > index.idf("disk") > 0
    assert index.idf("never-seen") >= index.idf("inode")


def test_a_term_is_held_once_whatever_list_it_came_in():
    # token lists decoded from storage hold their own copy of every word; the index keeps one per distinct term
    first, second = json.loads('["超时", "err_timeout"]'), json.loads('["超时", "err_timeout"]')
    assert first[0] is not second[0]
    index = BM25Index()
    index.add("c1", first)
    index.add("c2", second)
    assert index._terms[0][0] is index._terms[1][0]
    assert [hit.chunk_id for hit in index.search(["超时"], k=5)] == ["c1", "c2"]
