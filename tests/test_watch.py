"""Watching a folder (``kbseek watch``, ``kbseek serve --watch``) with real files on disk: a save becomes searchable,
a torn write is stored only whole, a temp file renamed over the original, deletions (only of the folder's own
documents), editors' swap and backup files ignored, bad frontmatter reported with the stored version kept.

Most tests drive ``FolderWatcher.poll`` with a clock of their own, so "the file stayed unchanged for the settle
time" is decided by the test, not by how fast the machine is; the threaded ones wait on events or poll with
generous timeouts."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient
from serving import running_server
from support import ROOT, doc
from typer.testing import CliRunner

from kbseek.errors import WriteConflictError
from kbseek.home.ownership import HomeLock
from kbseek.home.watch import RETRY_AFTER_S, FolderWatcher, WatchReport
from kbseek.interfaces.cli import app as cli_app
from kbseek.interfaces.http.app import create_app
from kbseek.maintenance.live import watch_folders
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DISK = doc("磁盘满", "DISK_FULL", "磁盘写满", "# 磁盘满\n\n清理 /var/log 下的旧日志 (logrotate)。\n")
DISK2 = doc("磁盘满", "DISK_FULL", "磁盘写满", "# 磁盘满\n\n扩容数据盘 (resize2fs)，再检查 inode。\n")
OOM = doc("内存溢出", "OOM_KILLED", "OOM", "# OOM\n\n调大 memory limit，查看 dmesg。\n")
SETTLE = 0.4
TIMEOUT = 30.0  # a safety net only: the threaded tests end as soon as the change is seen


def schema(name: str) -> dict:
    return json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text("utf-8"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "runbooks"
    (path / "ops").mkdir(parents=True)
    return path


def watcher(kb: KnowledgeBase, folder: Path, clock: Clock, **kwargs: object) -> FolderWatcher:
    return FolderWatcher(kb.writer, kb.indexes.refresh, folder, settle_s=SETTLE, clock=clock, **kwargs)  # type: ignore[arg-type]


def settle(w: FolderWatcher, clock: Clock) -> WatchReport | None:
    """Poll, let the settle time pass on the test's clock, poll again: what a file unchanged meanwhile gives."""
    w.poll()
    clock.now += SETTLE + 0.01
    return w.poll()


def hits(kb: KnowledgeBase, query: str) -> list[str]:
    return [h.chunk.source_path for h in kb.search(query).hits]


def versions(kb: KnowledgeBase, path: str) -> list[tuple[str, str]]:
    return [(v["action"], v["via"]) for v in kb.document_history(path)["versions"]]


def test_a_saved_file_is_stored_once_it_settles_as_an_ingest_of_the_folder_would(kb, folder):
    clock = Clock()
    w = watcher(kb, folder, clock)
    (folder / "ops" / "disk.md").write_text(DISK, encoding="utf-8")
    assert w.poll() is None and kb.list_documents() == []  # seen, not yet settled
    report = settle(w, clock)
    assert report is not None and [(f.path, f.status) for f in report.files] == [("ops/disk.md", "added")]
    stored = kb.get_document("ops/disk.md")
    assert stored.origin == str((folder / "ops" / "disk.md").resolve())  # what 'kbseek ingest DIR' records
    assert hits(kb, "logrotate") == ["ops/disk.md"] and versions(kb, "ops/disk.md") == [("added", "watch")]
    jsonschema.validate(report.to_dict(), schema("watch-change"))
    assert w.poll() is None  # nothing changed: nothing read or written again
    assert [f.status for f in kb.ingest([folder]).files] == ["unchanged"]


def test_a_torn_write_is_stored_only_whole(kb, folder):
    clock = Clock()
    w = watcher(kb, folder, clock)
    file = folder / "ops" / "disk.md"
    half = len(DISK.encode()) // 2
    with file.open("wb") as handle:
        handle.write(DISK.encode()[:half])
        handle.flush()
        assert w.poll() is None
        clock.now += SETTLE / 2  # the editor pauses, but for less than the settle time
        assert w.poll() is None
        handle.write(DISK.encode()[half:])
    clock.now += SETTLE / 2
    assert w.poll() is None  # it changed: the settle time starts again
    assert kb.list_documents() == []
    clock.now += SETTLE + 0.01
    report = w.poll()
    assert report is not None and [f.status for f in report.files] == ["added"]
    assert kb.document_markdown("ops/disk.md") == DISK and versions(kb, "ops/disk.md") == [("added", "watch")]


def test_a_file_written_to_while_it_is_read_is_read_again_later(kb, folder, monkeypatch):
    clock = Clock()
    w = watcher(kb, folder, clock)
    file = folder / "ops" / "disk.md"
    file.write_text(DISK[:40], encoding="utf-8")
    real_read = Path.read_bytes

    def read_then_the_editor_writes(self: Path) -> bytes:
        data = real_read(self)
        if self == file:
            with file.open("a", encoding="utf-8") as handle:  # the rest lands right after the read
                handle.write(DISK[40:])
            monkeypatch.setattr(Path, "read_bytes", real_read)
        return data

    w.poll()
    clock.now += SETTLE + 0.01
    monkeypatch.setattr(Path, "read_bytes", read_then_the_editor_writes)
    assert w.poll() is None and kb.list_documents() == []  # the half it read is not stored
    assert file.read_text(encoding="utf-8") == DISK
    clock.now += SETTLE + 0.01
    report = w.poll()
    assert report is not None and kb.document_markdown("ops/disk.md") == DISK


def test_a_temp_file_renamed_over_the_original_and_editor_files_ignored(kb, folder):
    clock = Clock()
    w = watcher(kb, folder, clock)
    file = folder / "ops" / "disk.md"
    file.write_text(DISK, encoding="utf-8")
    settle(w, clock)
    for name in (".disk.md.swp", ".disk.md.swx", "4913", "disk.md~", ".#disk.md", "#disk.md#", "disk.md.tmp"):
        (folder / "ops" / name).write_text(OOM, encoding="utf-8")
    temp = folder / "ops" / ".disk.md.kbtmp"
    temp.write_text(DISK2, encoding="utf-8")
    os.replace(temp, file)  # how many editors save: write a temp file, rename it over the original
    report = settle(w, clock)
    assert report is not None and [(f.path, f.status) for f in report.files] == [("ops/disk.md", "updated")]
    assert [d.path for d in kb.list_documents()] == ["ops/disk.md"]  # none of the swap or backup files
    assert hits(kb, "resize2fs") == ["ops/disk.md"] and hits(kb, "dmesg") == []


def test_a_deleted_file_removes_only_this_folders_document(kb, folder, tmp_path):
    other = tmp_path / "other"
    (other / "ops").mkdir(parents=True)
    (other / "ops" / "oom.md").write_text(OOM, encoding="utf-8")
    kb.ingest([other])  # from another folder: never the watcher's to delete
    kb.upload(DISK2.encode(), "uploaded.md", category="ops")
    clock = Clock()
    w = watcher(kb, folder, clock)
    (folder / "ops" / "disk.md").write_text(DISK, encoding="utf-8")
    settle(w, clock)
    (folder / "ops" / "disk.md").unlink()
    assert w.poll() is None  # gone, but not yet for the settle time
    clock.now += SETTLE + 0.01
    report = w.poll()
    assert report is not None and report.deleted == ["ops/disk.md"]
    assert sorted(d.path for d in kb.list_documents()) == ["ops/oom.md", "ops/uploaded.md"]
    assert versions(kb, "ops/disk.md")[-1] == ("deleted", "watch") and hits(kb, "logrotate") == []


def test_an_editor_moving_the_original_aside_does_not_delete_it(kb, folder):
    clock = Clock()
    w = watcher(kb, folder, clock)
    file = folder / "ops" / "disk.md"
    file.write_text(DISK, encoding="utf-8")
    settle(w, clock)
    os.replace(file, folder / "ops" / "disk.md~")  # vim without backupcopy: the original becomes the backup…
    w.poll()
    file.write_text(DISK2, encoding="utf-8")  # …and the new text is written under the old name
    settle(w, clock)
    assert versions(kb, "ops/disk.md") == [("added", "watch"), ("updated", "watch")]


def test_no_prune_keeps_the_documents_of_deleted_files(kb, folder):
    clock = Clock()
    w = watcher(kb, folder, clock, prune=False)
    (folder / "ops" / "disk.md").write_text(DISK, encoding="utf-8")
    settle(w, clock)
    (folder / "ops" / "disk.md").unlink()
    assert settle(w, clock) is None and [d.path for d in kb.list_documents()] == ["ops/disk.md"]


def test_bad_frontmatter_is_reported_naming_the_file_and_the_stored_version_stays(kb, folder):
    clock = Clock()
    w = watcher(kb, folder, clock)
    file = folder / "ops" / "disk.md"
    file.write_text(DISK, encoding="utf-8")
    settle(w, clock)
    file.write_text("---\ntitle: [unclosed\nkeywords: x\n---\n# 坏\n", encoding="utf-8")
    report = settle(w, clock)
    assert report is not None and [f.status for f in report.files] == ["failed"]
    assert str(file.resolve()) in (report.files[0].reason or "")
    assert kb.document_markdown("ops/disk.md") == DISK and hits(kb, "logrotate") == ["ops/disk.md"]
    assert w.poll() is None  # reported once, not at every poll
    file.write_text(DISK2, encoding="utf-8")
    report = settle(w, clock)
    assert report is not None and [f.status for f in report.files] == ["updated"]


def test_a_write_conflict_is_retried_later_not_taken_as_the_files_fault(kb, folder, monkeypatch):
    clock = Clock()
    w = watcher(kb, folder, clock)
    (folder / "ops" / "disk.md").write_text(DISK, encoding="utf-8")
    real = kb.writer.writes.writing

    @contextlib.contextmanager
    def busy(path: str, **kwargs: object) -> Iterator[None]:
        monkeypatch.setattr(kb.writer.writes, "writing", real)  # once
        raise WriteConflictError(f"another write to {path} is still running")
        yield

    monkeypatch.setattr(kb.writer.writes, "writing", busy)
    report = settle(w, clock)
    assert report is not None and [f.error_code for f in report.files] == ["conflict"]
    clock.now += SETTLE + 0.01
    assert w.poll() is None and kb.list_documents() == []  # not at once: a while later
    clock.now += RETRY_AFTER_S
    report = w.poll()
    assert report is not None and [f.status for f in report.files] == ["added"]


def test_an_unreadable_file_is_reported_once(kb, folder, monkeypatch):
    clock = Clock()
    w = watcher(kb, folder, clock)
    file = folder / "ops" / "disk.md"
    file.write_text(DISK, encoding="utf-8")
    real_read = Path.read_bytes

    def denied(self: Path) -> bytes:  # as chmod 000 would for anyone but root, who runs these tests here
        if self == file:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    report = settle(w, clock)
    assert report is not None and [(f.status, f.error_code) for f in report.files] == [("failed", "io_error")]
    assert str(file) in (report.files[0].reason or "") and "Permission denied" in (report.files[0].reason or "")
    clock.now += SETTLE + 0.01
    assert w.poll() is None and kb.list_documents() == []


def test_the_first_poll_catches_up_with_the_folder(kb, folder):
    (folder / "ops" / "disk.md").write_text(DISK, encoding="utf-8")
    (folder / "ops" / "oom.md").write_text(OOM, encoding="utf-8")
    kb.ingest([folder])
    (folder / "ops" / "oom.md").unlink()  # deleted while nobody watched
    (folder / "ops" / "disk.md").write_text(DISK2, encoding="utf-8")  # edited meanwhile
    clock = Clock()
    report = settle(watcher(kb, folder, clock), clock)
    assert report is not None and report.deleted == ["ops/oom.md"]
    assert [(f.path, f.status) for f in report.files] == [("ops/disk.md", "updated")]


def test_a_save_is_searchable_within_the_running_watcher(kb, folder):
    changes: queue.Queue[WatchReport] = queue.Queue()
    watching = watch_folders(kb, [folder], on_report=changes.put).start()
    try:
        saved = time.monotonic()
        (folder / "ops" / "disk.md").write_text(DISK, encoding="utf-8")
        report = changes.get(timeout=TIMEOUT)
        took = time.monotonic() - saved
        assert [f.path for f in report.files] == ["ops/disk.md"] and hits(kb, "logrotate") == ["ops/disk.md"]
        assert took >= SETTLE  # never read before it settled
        (folder / "ops" / "disk.md").unlink()
        gone = changes.get(timeout=TIMEOUT)
        assert gone.deleted == ["ops/disk.md"]
        jsonschema.validate(gone.to_dict(), schema("watch-change"))
    finally:
        watching.stop()


def test_watch_refuses_while_a_server_owns_the_home(tmp_path, folder):
    home = tmp_path / "home"
    with HomeLock(home).held("kbseek serve", "http://127.0.0.1:9"):
        result = CliRunner().invoke(cli_app, ["--home", str(home), "watch", str(folder)])
    assert result.exit_code == 2 and "serve --watch" in result.output
    for command in (["watch", str(tmp_path / "nope")], ["serve", "--port", "0", "--watch", str(tmp_path / "nope")]):
        result = CliRunner().invoke(cli_app, ["--home", str(home), *command])
        assert result.exit_code == 2 and "no such folder" in result.output, command
    assert not (home / "kbseek.db").exists()  # refused before anything was opened


def test_serve_watch_makes_a_save_searchable(tmp_path, folder):
    settings = Settings(home=tmp_path / "home", watch_dirs=[folder])
    with TestClient(create_app(settings, mcp=False)) as client:
        deadline = time.monotonic() + TIMEOUT
        while client.get("/ready").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        (folder / "ops" / "disk.md").write_text(DISK, encoding="utf-8")
        found: list[str] = []
        while not found and time.monotonic() < deadline:
            answer = client.get("/api/search/similar", params={"query": "logrotate"}).json()
            found = [h["path"] for h in answer.get("hits", [])]
            time.sleep(0.05)
        assert found == ["ops/disk.md"]


@pytest.mark.slow
def test_the_watch_command_prints_each_change_as_json(tmp_path, folder):
    env = os.environ | {"KBSEEK_HOME": str(tmp_path / "home"), "KBSEEK_EMBEDDER": "none"}
    command = [sys.executable, "-c", "from kbseek.interfaces.cli import main; main()", "watch", str(folder), "--json"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) as process:
        try:
            (folder / "ops" / "disk.md").write_text(DISK, encoding="utf-8")
            assert process.stdout is not None
            assert select.select([process.stdout], [], [], TIMEOUT)[0], "kbseek watch printed nothing"
            line = json.loads(process.stdout.readline())
            jsonschema.validate(line, schema("watch-change"))
            assert [(f["path"], f["status"]) for f in line["files"]] == [("ops/disk.md", "added")]
        finally:
            process.terminate()
            assert process.wait(timeout=TIMEOUT) == 0


@pytest.mark.slow
def test_a_real_server_watches_the_folders_of_its_settings(tmp_path, folder):
    env = os.environ | {
        "KBSEEK_HOME": str(tmp_path / "home"),
        "KBSEEK_EMBEDDER": "none",
        "KBSEEK_WATCH_DIRS": json.dumps([str(folder)]),
    }
    log = tmp_path / "serve.log"
    with running_server(env, log) as base:
        assert f"watching: {folder}" in log.read_text("utf-8")
        (folder / "ops" / "oom.md").write_text(OOM, encoding="utf-8")

        def found() -> list[str]:
            answer = httpx.get(f"{base}/api/search/similar", params={"query": "dmesg"}, timeout=10).json()
            return [h["path"] for h in answer["hits"]]

        deadline = time.monotonic() + TIMEOUT
        while not found() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert found() == ["ops/oom.md"]
        (folder / "ops" / "oom.md").unlink()
        while found() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert found() == []
