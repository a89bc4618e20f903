"""Git as a source (``kbseek sync git``) against real repositories made here: the first sync, an edit, a rename, a
delete with and without ``--prune``, a bad ref, a force-push, a vanished repository, a binary and an oversized file,
credentials in a URL, ``{commit}`` in evidence links, and the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support import doc
from typer.testing import CliRunner

from kbseek.core.origins import git_origin
from kbseek.errors import InvalidRequest, NotFoundError, SourceError
from kbseek.home import gitsync
from kbseek.interfaces.cli import app as cli_app
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DISK = doc("磁盘满", "DISK_FULL", "磁盘写满", "# 磁盘满\n\n清理 /var/log 下的旧日志 (logrotate)。\n")
DISK2 = doc("磁盘满", "DISK_FULL", "磁盘写满", "# 磁盘满\n\n扩容数据盘 (resize2fs)，再检查 inode。\n")
OOM = doc("内存溢出", "OOM_KILLED", "OOM", "# OOM\n\n调大 memory limit，查看 dmesg。\n")


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=Test", "-c", "user.email=t@example.com", "-C", str(repo), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, files: dict[str, str | bytes | None], message: str = "change") -> str:
    """Write (str/bytes) or remove (None) files, commit them all, return the commit's hash."""
    for name, content in files.items():
        file = repo / name
        if content is None:
            file.unlink()
            continue
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(content.encode() if isinstance(content, str) else content)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "runbooks"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def paths(kb: KnowledgeBase) -> list[str]:
    return [d.path for d in kb.list_documents()]


def hits(kb: KnowledgeBase, query: str) -> list[str]:
    return [h.chunk.source_path for h in kb.search(query).hits]


def test_first_sync_then_only_the_changed_file_and_history_names_the_commit(kb, repo):
    first = commit(repo, {"ops/disk.md": DISK, "ops/oom.md": OOM, "README.txt": "not markdown", ".github/x.md": OOM})
    report = kb.sync_git(str(repo))
    assert (report.mode, report.reason, report.commit, report.recorded) == ("full", "first sync", first, True)
    assert paths(kb) == ["ops/disk.md", "ops/oom.md"] and report.counts["added"] == 2
    origin = git_origin(kb.get_document("ops/disk.md").origin)
    assert origin is not None and (origin.repo, origin.commit, origin.path) == (
        str(repo.resolve()),
        first,
        "ops/disk.md",
    )

    second = commit(repo, {"ops/disk.md": DISK2})
    report = kb.sync_git(str(repo))
    assert (report.mode, report.previous, report.commit) == ("incremental", first, second)
    assert [(f.path, f.status) for f in report.files] == [("ops/disk.md", "updated")]  # oom.md not read again
    assert hits(kb, "resize2fs") == ["ops/disk.md"] and hits(kb, "logrotate") == []
    newest = kb.document_history("ops/disk.md")["versions"][-1]
    blob = git(repo, "rev-parse", f"{second}:ops/disk.md")
    assert (newest["via"], newest["detail"]) == ("sync", f"commit {second} blob {blob}")
    assert git_origin(kb.get_document("ops/oom.md").origin).commit == first  # the commit its text came from

    assert kb.sync_git(str(repo)).mode == "unchanged"


def test_a_rename_is_a_move_and_a_delete_needs_prune(kb, repo):
    commit(repo, {"ops/disk.md": DISK, "ops/oom.md": OOM})
    kb.sync_git(str(repo))
    (repo / "storage").mkdir()
    git(repo, "mv", "ops/disk.md", "storage/disk.md")
    commit(repo, {"ops/oom.md": None})
    report = kb.sync_git(str(repo))
    assert report.moved == [{"from": "ops/disk.md", "to": "storage/disk.md"}]
    assert (report.kept, report.deleted, report.recorded) == (["ops/oom.md"], [], True)
    assert paths(kb) == ["ops/oom.md", "storage/disk.md"]
    assert kb.document_history("ops/disk.md")["versions"][-1]["detail"].endswith("moved to storage/disk.md")

    report = kb.sync_git(str(repo), prune=True)  # the deletion git showed last time is found by comparison
    assert (report.deleted, paths(kb)) == (["ops/oom.md"], ["storage/disk.md"])
    assert hits(kb, "dmesg") == []


def test_a_binary_or_oversized_file_is_reported_and_blocks_prune_and_the_commit(settings, repo):
    kb = KnowledgeBase.open(settings.model_copy(update={"max_file_bytes": 2000}))
    try:
        first = commit(repo, {"ops/disk.md": DISK, "ops/oom.md": OOM})
        kb.sync_git(str(repo))
        commit(repo, {"ops/oom.md": None, "ops/bin.md": b"\x00\x01binary", "ops/big.md": "x" * 5000, "a.md": DISK2})
        report = kb.sync_git(str(repo), prune=True)
        failed = {f.source.rsplit(":", 1)[-1]: f.error_code for f in report.files if f.status == "failed"}
        assert failed == {"ops/bin.md": "document_error", "ops/big.md": "too_large"}
        assert "a.md" in paths(kb) and "ops/oom.md" in paths(kb)  # the rest went on; nothing deleted
        assert report.kept == ["ops/oom.md"] and report.prune_skipped and not report.recorded
        assert kb.repository.meta(gitsync.sync_key(str(repo.resolve()), "")) == first
    finally:
        kb.close()


def test_a_bad_ref_a_missing_folder_or_repository_change_nothing(kb, repo, tmp_path):
    commit(repo, {"ops/disk.md": DISK})
    with pytest.raises(NotFoundError, match="ref 'nope' not found"):
        kb.sync_git(str(repo), ref="nope")
    with pytest.raises(InvalidRequest):
        kb.sync_git(str(repo), ref="--upload-pack=evil")
    with pytest.raises(NotFoundError, match="no folder 'docs'"):
        kb.sync_git(str(repo), path="docs")
    with pytest.raises(NotFoundError, match="not a Git repository"):
        kb.sync_git(str(tmp_path))
    assert paths(kb) == []


def test_a_force_push_falls_back_to_a_full_comparison(kb, repo):
    base = commit(repo, {"ops/disk.md": DISK})
    commit(repo, {"ops/oom.md": OOM})
    kb.sync_git(str(repo))
    git(repo, "reset", "-q", "--hard", base)
    rewritten = commit(repo, {"ops/disk.md": DISK2}, "rewritten")
    report = kb.sync_git(str(repo), prune=True)
    assert report.mode == "full" and "force-push" in report.reason and report.commit == rewritten
    assert (report.deleted, paths(kb)) == (["ops/oom.md"], ["ops/disk.md"])
    assert hits(kb, "resize2fs") == ["ops/disk.md"]


def test_a_repository_that_vanishes_between_or_during_syncs_changes_nothing(kb, repo, monkeypatch):
    commit(repo, {"ops/disk.md": DISK})
    kb.sync_git(str(repo))
    commit(repo, {"ops/disk.md": DISK2, "ops/oom.md": OOM})
    real = gitsync._git

    def vanishing(args, cwd, what, **kwargs):
        if args[0] == "cat-file" and "--batch" in args:
            shutil.rmtree(repo)  # after the diff, before any file was read
        return real(args, cwd, what, **kwargs)

    monkeypatch.setattr(gitsync, "_git", vanishing)
    with pytest.raises(SourceError, match=f"reading {repo.resolve()}"):
        kb.sync_git(str(repo))
    assert paths(kb) == ["ops/disk.md"] and hits(kb, "logrotate") == ["ops/disk.md"]
    with pytest.raises(NotFoundError, match="no such folder"):
        kb.sync_git(str(repo))


def test_a_url_is_mirrored_and_its_credentials_are_never_shown(kb, repo, tmp_path):
    commit(repo, {"ops/disk.md": DISK})
    report = kb.sync_git(f"file://{repo}", path="ops")
    assert paths(kb) == ["disk.md"] and report.repo == f"file://{repo}"
    commit(repo, {"ops/disk.md": DISK2})
    assert [f.status for f in kb.sync_git(f"file://{repo}", path="ops").files] == ["updated"]
    with pytest.raises(SourceError) as caught:
        kb.sync_git("http://user:s3cret@127.0.0.1:9/kb.git")
    assert "s3cret" not in str(caught.value) and "user:***@127.0.0.1" in str(caught.value)
    config = (kb.settings.home / "git").rglob("config")
    assert all("s3cret" not in f.read_text() for f in config)


def test_source_links_name_the_commit(tmp_path, repo):
    template = "https://git.example.com/kb/blob/{commit}/{path}#L{line}"
    with KnowledgeBase.open(Settings(home=tmp_path / "home", source_url_template=template)) as kb:
        sha = commit(repo, {"ops/disk.md": DISK})
        kb.sync_git(str(repo))
        kb.upload(OOM.encode(), "oom.md", category="ops")
        links = {
            e.document.path: e.source_url for e in kb.lookup_knowledge({"query": "logrotate dmesg"}).answer.documents
        }
    assert links["ops/disk.md"].startswith(f"https://git.example.com/kb/blob/{sha}/ops/disk.md#L")
    assert links["ops/oom.md"].startswith("https://git.example.com/kb/blob/HEAD/ops/oom.md#L")


def test_the_cli_syncs_and_reports_json(tmp_path, repo):
    commit(repo, {"ops/disk.md": DISK})
    runner = CliRunner()
    home = ["--home", str(tmp_path / "home")]
    done = runner.invoke(cli_app, [*home, "sync", "git", str(repo), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["counts"]["added"] == 1 and report["recorded"] is True
    done = runner.invoke(cli_app, [*home, "sync", "git", str(repo), "--ref", "nope", "--json"])
    assert done.exit_code == 2 and json.loads(done.stdout)["error"]["code"] == "not_found"
