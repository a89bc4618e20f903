"""Ingest, update, delete, prune and repair on SQLite and PostgreSQL, with real files."""

from __future__ import annotations

import os

import pytest
from support import doc, write

from kbseek.errors import NotFoundError
from kbseek.service import KnowledgeBase

GOOD = doc(
    "支付网关错误码定义",
    "ERR_TIMEOUT, 支付网关",
    "错误码含义",
    "# 支付网关错误码定义\n\n## 超时类错误\n\n### ERR_TIMEOUT\n\n**含义**：请求超时。\n",
    category="api",
)


def test_folder_ingest_uses_relative_paths_and_categories(kb, tmp_path):
    source = tmp_path / "src"
    write(source, "api/payment-errors.md", GOOD)
    write(source, "alertmanager/AlertmanagerFailedReload.md", "# Alertmanager reload failed\n\nCheck the config.\n")
    write(source, "top.md", "# Top\n\ntext\n")
    write(source, ".hidden/skip.md", "# no\n")
    write(source, "notes.txt", "not markdown")
    report = kb.ingest([source])
    assert report.counts["added"] == 3 and report.ok
    docs = {d.path: d for d in kb.list_documents()}
    assert set(docs) == {"api/payment-errors.md", "alertmanager/AlertmanagerFailedReload.md", "top.md"}
    assert docs["api/payment-errors.md"].category == "api"  # frontmatter
    assert docs["alertmanager/AlertmanagerFailedReload.md"].category == "alertmanager"  # folder
    assert docs["top.md"].category == "general"
    stored = kb.get_document("api/payment-errors.md")
    assert stored.chunks[0].breadcrumb == "支付网关错误码定义 > 超时类错误 > ERR_TIMEOUT"
    assert stored.chunks[0].heading(3) == "ERR_TIMEOUT"
    assert (kb.settings.knowledge_base_dir / "api/payment-errors.md").read_text("utf-8") == GOOD
    assert stored.warnings == ()
    missing = kb.get_document("top.md")
    assert "keywords" in missing.warnings[0] and "top.md" in missing.warnings[0]


def test_reingest_unchanged_does_nothing_and_a_change_replaces_chunks(kb, tmp_path):
    source = tmp_path / "src"
    file = write(source, "api/payment-errors.md", GOOD)
    kb.ingest([source])
    version = kb.stats()["version"]
    again = kb.ingest([source])
    assert again.counts["unchanged"] == 1 and kb.stats()["version"] == version
    old_ids = {c.id for c in kb.get_document("api/payment-errors.md").chunks}
    file.write_text(GOOD.replace("请求超时", "网关等待上游超过 30 秒") + "\n## 新章节\n\n内容\n", "utf-8")
    updated = kb.ingest([source])
    assert updated.counts["updated"] == 1
    chunks = kb.get_document("api/payment-errors.md").chunks
    assert [c.breadcrumb.split(" > ")[-1] for c in chunks] == ["ERR_TIMEOUT", "新章节"]
    assert not old_ids & {c.id for c in chunks}
    assert kb.stats() == {"documents": 1, "chunks": 2, "version": version + 1}


def test_single_file_and_upload_use_category_and_file_name(kb, tmp_path):
    file = write(tmp_path, "deep/folder/payment-errors.md", GOOD)
    report = kb.ingest([file])
    assert report.files[0].path == "api/payment-errors.md"
    plain = kb.upload(b"# Note\n\ntext\n", "note.md")
    assert plain.path == "general/note.md" and plain.status == "added"
    forced = kb.upload(b"# Note\n\ntext\n", "note.md", category="ops")
    assert forced.path == "ops/note.md"
    assert kb.get_document("ops/note.md").category == "ops"


@pytest.mark.parametrize(
    "name, category",
    [
        ("../escape.md", None),
        ("/etc/passwd.md", None),
        ("a\x00b.md", None),
        ("ok.md", ".."),
        ("ok.md", "a/b"),
        ("bad\x1bname.md", None),
        ("ok.md", "cat\n"),
    ],
)
def test_unsafe_upload_names_are_refused(kb, name, category):
    report = kb.upload(GOOD.encode(), name, category=category)
    assert report.status == "failed" and report.error_code == "unsafe_path"
    assert kb.stats()["documents"] == 0
    assert not any(kb.settings.home.rglob("*escape*"))


def test_bad_files_fail_alone_and_damage_nothing(kb, tmp_path):
    source = tmp_path / "src"
    write(source, "a/good.md", GOOD)
    kb.ingest([source])
    before = kb.get_document("a/good.md")
    write(source, "a/good.md", "---\ntitle: [broken\n---\n")  # a bad new version
    write(source, "b/binary.md", b"# T\x00\x01\x02")
    write(source, "b/latin1.md", "# café\n".encode("latin-1"))
    write(source, "b/huge.md", "# H\n" + "x" * (kb.settings.max_file_bytes + 1))
    write(source, "b/empty.md", "")
    write(source, "c/fine.md", "# Fine\n\nok\n")
    report = kb.ingest([source])
    by_path = {f.path: f for f in report.files}
    assert by_path["c/fine.md"].status == "added"
    reasons = {p: f.reason for p, f in by_path.items() if f.status == "failed"}
    assert set(reasons) == {"a/good.md", "b/binary.md", "b/latin1.md", "b/huge.md", "b/empty.md"}
    assert "good.md:2: malformed YAML" in reasons["a/good.md"]
    assert "binary" in reasons["b/binary.md"]
    assert "not valid UTF-8" in reasons["b/latin1.md"] and "latin1.md:1" in reasons["b/latin1.md"]
    assert "over the limit" in reasons["b/huge.md"]
    assert "empty" in reasons["b/empty.md"]
    after = kb.get_document("a/good.md")
    assert (after.content_hash, after.chunks) == (before.content_hash, before.chunks)
    assert (kb.settings.knowledge_base_dir / "a/good.md").read_text("utf-8") == GOOD


def test_unsafe_file_name_in_folder_fails_that_file_only(kb, tmp_path):
    source = tmp_path / "src"
    write(source, "ok.md", "# ok\n")
    write(source, "tab\there.md", "# bad name\n")
    report = kb.ingest([source])
    statuses = {f.source.rsplit("/", 1)[-1]: f.status for f in report.files}
    assert statuses == {"ok.md": "added", "tab\there.md": "failed"}


def test_delete_removes_rows_and_file(kb, tmp_path):
    kb.upload(GOOD.encode(), "payment-errors.md")
    kb.delete("api/payment-errors.md")
    assert kb.stats()["documents"] == 0 and kb.stats()["chunks"] == 0
    assert not (kb.settings.knowledge_base_dir / "api").exists()
    with pytest.raises(NotFoundError):
        kb.delete("api/payment-errors.md")


def test_prune_removes_vanished_files_of_that_folder_only(kb, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    write(one, "x/a.md", "# A\n")
    gone = write(one, "x/b.md", "# B\n")
    write(two, "y/c.md", "# C\n")
    kb.upload(b"# U\n", "u.md")
    kb.ingest([one, two])
    gone.unlink()
    kb.ingest([one])  # without --prune nothing is deleted
    assert kb.stats()["documents"] == 4
    report = kb.ingest([one], prune=True)
    assert report.pruned == ["x/b.md"]
    assert sorted(d.path for d in kb.list_documents()) == ["general/u.md", "x/a.md", "y/c.md"]


def test_prune_is_refused_when_the_scan_is_incomplete(kb, tmp_path):
    source = tmp_path / "src"
    gone = write(source, "a.md", "# A\n")
    kb.ingest([source])
    gone.unlink()
    # A real unreadable folder: deeper than PATH_MAX (root ignores permission bits).
    fd = os.open(source, os.O_RDONLY)
    for _ in range(20):
        os.mkdir("d" * 250, dir_fd=fd)
        fd_next = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = fd_next
    os.close(fd)
    report = kb.ingest([source], prune=True)
    assert report.pruned == [] and report.prune_skipped
    assert kb.stats()["documents"] == 1


def test_interrupted_batch_resumes_with_what_is_left(kb, tmp_path):
    source = tmp_path / "src"
    for i in range(6):
        write(source, f"d/{i}.md", f"# Doc {i}\n\nbody {i}\n")
    seen = []

    def stop_after_three(report, done, total):
        seen.append(report.path)
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        kb.ingest([source], on_file=stop_after_three)
    assert kb.stats()["documents"] == 3
    report = kb.ingest([source])
    assert report.counts["unchanged"] == 3 and report.counts["added"] == 3


def test_lint_reports_shared_keywords(kb):
    kb.upload(doc("A", "超时, ERR_A", "s", "# A\n").encode(), "a.md")
    kb.upload(doc("B", "超时, ERR_B", "s", "# B\n").encode(), "b.md")
    lint = kb.lint()
    assert [(item["keyword"], item["paths"]) for item in lint] == [("超时", ["general/a.md", "general/b.md"])]


def test_repair_after_a_crash(settings, tmp_path):
    kb = KnowledgeBase.open(settings)
    kb.upload(GOOD.encode(), "payment-errors.md")
    kb.upload(b"# Other\n\nbody\n", "other.md")
    store = settings.knowledge_base_dir
    (store / "api/payment-errors.md").unlink()  # crash after the commit, before the file write
    (store / "general/other.md").write_text("# stale old version\n", "utf-8")
    write(store, "stray/unknown.md", "# not in the database\n")  # crash after delete commit
    write(store, "api/.x.md.kbseek-tmp", "half-written")
    kb.close()
    kb = KnowledgeBase.open(settings)
    assert (store / "api/payment-errors.md").read_text("utf-8") == GOOD
    assert (store / "general/other.md").read_text("utf-8") == "# Other\n\nbody\n"
    assert not (store / "stray").exists()
    assert (settings.orphan_dir / "stray/unknown.md").read_text("utf-8") == "# not in the database\n"
    assert not list(store.rglob("*.kbseek-tmp"))
    kb.close()


def test_scan_dirs_sync_at_start(settings, tmp_path):
    scan = tmp_path / "scan"
    write(scan, "ops/a.md", "# A\n\nbody\n")
    synced = settings.model_copy(update={"scan_dirs": [scan]})
    kb = KnowledgeBase.open(synced)
    assert [d.path for d in kb.list_documents()] == ["ops/a.md"]
    kb.close()


def test_document_lookup_by_id(kb):
    report = kb.upload(GOOD.encode(), "payment-errors.md")
    assert kb.get_document(report.document_id).path == "api/payment-errors.md"


def test_ids_are_stable_across_knowledge_bases(kb, tmp_path):
    from kbseek.core.ids import document_id

    report = kb.upload(GOOD.encode(), "payment-errors.md")
    assert report.document_id == document_id("api/payment-errors.md")
    chunk_ids = [c.id for c in kb.get_document("api/payment-errors.md").chunks]
    kb.delete("api/payment-errors.md")
    kb.upload(GOOD.encode(), "payment-errors.md")
    assert [c.id for c in kb.get_document("api/payment-errors.md").chunks] == chunk_ids


def test_cached_tokens_come_back_with_one_string_per_word(kb, tmp_path):
    # a start-up holds every chunk's cached tokens at once: a word repeated across chunks is one object
    write(tmp_path / "src", "api/payment-errors.md", GOOD)
    kb.ingest([tmp_path / "src"])
    cached = kb.repository.tokens()
    lists = [tokens for _, tokens in cached.values()]
    assert len(lists) >= 1 and all(lists)
    word = lists[0][0]
    again = kb.repository.tokens()
    assert next(iter(again.values()))[1][0] is word
