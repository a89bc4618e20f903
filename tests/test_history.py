"""Document history and rollback on both databases: versions written in the change's own transaction, retention,
the migration of a home made before history, and the CLI and REST edges with their schemas and errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select
from support import ROOT, doc, write
from typer.testing import CliRunner

from kbseek.adapters.sql import migrate, repository
from kbseek.adapters.sql.engine import make_engine
from kbseek.adapters.sql.history import Change
from kbseek.adapters.sql.tables import DocumentVersionRow
from kbseek.core.document import ChunkingConfig, parse_document
from kbseek.errors import InvalidRequest, NotFoundError, StorageError
from kbseek.interfaces.cli import app as cli_app
from kbseek.interfaces.http.app import create_app
from kbseek.observability.logs import actor_scope
from kbseek.service import KnowledgeBase

PATH = "ops/disk-full.md"
V1 = doc("磁盘满", "DISK_FULL", "磁盘写满的处理", "# 磁盘满\n\n清理 /var/log 下的旧日志 (logrotate)。\n")
V2 = doc("磁盘满", "DISK_FULL", "磁盘写满的处理", "# 磁盘满\n\n扩容数据盘 (resize2fs)，再检查 inode。\n")


def schema(name: str) -> dict:
    return json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text("utf-8"))


def hits(kb: KnowledgeBase, query: str) -> list[str]:
    return [h.chunk.source_path for h in kb.search(query).hits]


def version_rows(kb: KnowledgeBase) -> int:
    with kb.repository.engine.connect() as connection:
        return connection.scalar(select(func.count()).select_from(DocumentVersionRow)) or 0


def test_every_change_is_a_version_and_a_rollback_is_a_new_one(kb):
    with actor_scope("api", "k-1234"):
        assert kb.upload(V1.encode(), "disk-full.md", category="ops").status == "added"
    with actor_scope("cli:ops"):  # the process's own actor differs by who ran the tests before
        assert kb.replace(PATH, V2.encode()).status == "updated"
    assert hits(kb, "resize2fs") == [PATH] and hits(kb, "logrotate") == []

    history = kb.document_history(PATH)
    jsonschema.validate(history, schema("document-history"))
    assert (history["current"], history["deleted"]) == (2, False)
    first, second = history["versions"]
    assert (first["action"], first["via"], first["actor"], first["key_id"]) == ("added", "upload", "api", "k-1234")
    assert (second["action"], second["via"], second["actor"]) == ("updated", "replace", "cli:ops")
    assert second["key_id"] is None
    assert first["request_id"] != second["request_id"] and first["request_id"] != "-"
    audit = kb.list_audit(path=PATH)
    assert [a["request_id"] for a in audit] == [first["request_id"], second["request_id"]]  # same change, same id
    assert first["frontmatter"]["keywords"] == ["DISK_FULL"]

    old = kb.document_history(PATH, 1)
    jsonschema.validate(old, schema("document-version"))
    assert old["content"] == V1 and "content" not in first

    diff = kb.document_diff(PATH, 1, 2)
    jsonschema.validate(diff, schema("document-diff"))
    assert diff["changed"] and diff["diff"].startswith(f"--- {PATH}@1\n+++ {PATH}@2\n")
    assert "\n-清理 /var/log 下的旧日志 (logrotate)。\n" in diff["diff"] and "\n+扩容数据盘" in diff["diff"]
    assert kb.document_diff(PATH, 2, 2) == {"path": PATH, "a": 2, "b": 2, "changed": False, "diff": ""}

    rolled = kb.rollback(PATH, 1)
    jsonschema.validate(rolled, schema("document-rollback"))
    assert (rolled["status"], rolled["restored_from"], rolled["version"]) == ("updated", 1, 3)
    assert kb.document_markdown(PATH) == V1
    assert (kb.settings.knowledge_base_dir / PATH).read_text("utf-8") == V1  # the original follows
    assert hits(kb, "logrotate") == [PATH] and hits(kb, "resize2fs") == []  # and so do the indexes
    third = kb.document_history(PATH)["versions"][-1]
    assert (third["version"], third["action"], third["via"], third["restored_from"]) == (3, "restored", "rollback", 1)
    assert third["content_hash"] == first["content_hash"]

    again = kb.rollback(PATH, 1)  # already that text: nothing new
    assert (again["status"], again["version"]) == ("unchanged", 3) and len(kb.document_history(PATH)["versions"]) == 3


def test_a_deleted_documents_history_stays_readable_and_bad_requests_change_nothing(kb):
    kb.upload(V1.encode(), "disk-full.md", category="ops")
    kb.replace(PATH, V2.encode())
    for bad, error in (
        (lambda: kb.document_history(PATH, 9), NotFoundError),
        (lambda: kb.document_diff(PATH, 1, 9), NotFoundError),
        (lambda: kb.rollback(PATH, 9), NotFoundError),
        (lambda: kb.rollback(PATH, 0), InvalidRequest),
        (lambda: kb.document_diff(PATH, 1, 2**40), InvalidRequest),  # more than the column holds: said, not a 500
        (lambda: kb.document_history("ops/never.md"), NotFoundError),
    ):
        before = (kb.repository.version(), version_rows(kb), len(kb.list_audit()))
        with pytest.raises(error) as raised:
            bad()
        assert "version" in str(raised.value) or "never.md" in str(raised.value)
        assert (kb.repository.version(), version_rows(kb), len(kb.list_audit())) == before

    kb.delete(PATH)
    history = kb.document_history(PATH)
    assert (history["current"], history["deleted"]) == (None, True)
    assert [(v["version"], v["action"]) for v in history["versions"]] == [(1, "added"), (2, "updated"), (3, "deleted")]
    assert kb.document_history(PATH, 3)["content"] is None and kb.document_history(PATH, 1)["content"] == V1
    assert "-扩容数据盘" in kb.document_diff(PATH, 2, 3)["diff"]  # the deletion reads as no text
    before = (kb.repository.version(), version_rows(kb))
    with pytest.raises(NotFoundError, match="deleted") as raised:
        kb.rollback(PATH, 1)
    assert "docs history" in (raised.value.hint or "")
    assert (kb.repository.version(), version_rows(kb)) == before and kb.repository.get(PATH) is None

    kb.upload(V2.encode(), "disk-full.md", category="ops")  # the path comes back: its numbering goes on
    assert kb.document_history(PATH)["current"] == 4
    with pytest.raises(InvalidRequest, match="deletion"):
        kb.rollback(PATH, 3)
    assert len(kb.document_history(PATH)["versions"]) == 4


def test_a_failed_change_leaves_no_version(kb, monkeypatch):
    kb.upload(V1.encode(), "disk-full.md", category="ops")
    kb.replace(PATH, b"---\ntitle: [unclosed\n---\n# x\n")  # refused: bad frontmatter
    assert len(kb.document_history(PATH)["versions"]) == 1

    def broken(session):  # the change's last statement fails: the whole transaction, version included, goes
        raise repository.SQLAlchemyError("the database went away")

    monkeypatch.setattr(repository, "_bump_version", broken)
    assert kb.replace(PATH, V2.encode()).status == "failed"
    with pytest.raises(StorageError):
        kb.delete(PATH)
    assert len(kb.document_history(PATH)["versions"]) == 1 and kb.document_markdown(PATH) == V1


def test_retention_keeps_the_newest_versions_per_document(settings):
    with KnowledgeBase.open(settings.model_copy(update={"history_keep_versions": 3})) as kb:
        for n in range(5):
            kb.upload(V1.replace("旧日志", f"旧日志 {n}").encode(), "disk-full.md", category="ops")
        kb.upload(V2.encode(), "other.md", category="ops")
        kept = kb.document_history(PATH)["versions"]
        assert [v["version"] for v in kept] == [3, 4, 5] and "旧日志 4" in kb.document_history(PATH, 5)["content"]
        with pytest.raises(NotFoundError, match="no version 2"):
            kb.rollback(PATH, 2)
        assert kb.rollback(PATH, 3)["version"] == 6
        assert [v["version"] for v in kb.document_history("ops/other.md")["versions"]] == [1]
    with KnowledgeBase.open(settings.model_copy(update={"history_keep_versions": 0})) as kb:  # 0 keeps all
        for n in range(4):
            kb.replace(PATH, V1.replace("旧日志", f"新日志 {n}").encode())
        assert [v["version"] for v in kb.document_history(PATH)["versions"]] == [4, 5, 6, 7, 8, 9, 10]


def test_a_home_made_before_history_gets_its_documents_as_version_1(settings):
    with KnowledgeBase.open(settings) as kb:
        kb.upload(V1.encode(), "disk-full.md", category="ops")
        kb.upload(V2.encode(), "other.md", category="ops")
        engine = kb.repository.engine
        with engine.begin() as connection:  # back to the schema before history, documents in place
            command.downgrade(migrate._config(engine, connection), "0006")
        assert migrate.current(engine) == "0006"
    with KnowledgeBase.open(settings) as kb:  # opening migrates
        assert migrate.current(kb.repository.engine) == migrate.head() == "0008"
        history = kb.document_history(PATH)
        assert [(v["version"], v["via"], v["actor"]) for v in history["versions"]] == [(1, "migration", "migration")]
        assert kb.document_history(PATH, 1)["content"] == V1 and history["current"] == 1
        assert kb.document_history("ops/other.md", 1)["content"] == V2
        kb.replace(PATH, V2.encode())
        assert kb.rollback(PATH, 1)["version"] == 3 and kb.document_markdown(PATH) == V1


def test_a_document_without_history_keeps_what_its_first_change_replaces(kb):
    kb.upload(V1.encode(), "disk-full.md", category="ops")
    with kb.repository.engine.begin() as connection:  # e.g. restored from a backup older than history
        connection.execute(delete(DocumentVersionRow))
    kb.replace(PATH, V2.encode())
    versions = kb.document_history(PATH)["versions"]
    assert [(v["version"], v["via"], v["action"]) for v in versions] == [
        (1, "baseline", "added"),
        (2, "replace", "updated"),
    ]
    assert kb.document_history(PATH, 1)["content"] == V1


def test_writers_of_one_path_in_separate_connections_number_its_versions_without_gaps(kb):
    """Below the process's own path locks: two engines (as two processes would have) race on one path; the
    database's lock for the path makes their versions one unbroken sequence, each change with its own text."""
    engines = [make_engine(kb.settings.database_url) for _ in range(2)]
    repositories = [repository.SqlRepository(engine) for engine in engines]
    texts = [V1.replace("旧日志", f"旧日志 {n}") for n in range(12)]

    def save(n: int) -> str:
        parsed = parse_document(texts[n].encode(), path=PATH, config=ChunkingConfig(), source=PATH)
        audit = {"actor": "sync", "key_id": None, "request_id": f"r{n}", "size_bytes": None, "duration_ms": None}
        return repositories[n % 2].save(parsed, origin=None, audit=audit, change=Change("sync", detail=f"commit c{n}"))

    try:
        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(save, range(12)))
    finally:
        for engine in engines:
            engine.dispose()
    assert statuses.count("added") == 1 and statuses.count("updated") == 11
    versions = kb.document_history(PATH)["versions"]
    assert [v["version"] for v in versions] == list(range(1, 13))
    expected = sorted((f"r{n}", f"commit c{n}") for n in range(12))
    assert sorted((v["request_id"], v["detail"]) for v in versions) == expected
    assert kb.document_history(PATH, 12)["content"] == kb.document_markdown(PATH)


# -- the edges ------------------------------------------------------------------------------------------------


def test_cli_history_show_diff_rollback(tmp_path: Path):
    home, source = tmp_path / "home", tmp_path / "docs"
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(cli_app, ["--home", str(home), *args])
        assert result.exit_code == code, result.output
        return result.stdout

    write(source, PATH, V1)
    run("ingest", str(source))
    write(source, PATH, V2)
    run("ingest", str(source))

    history = json.loads(run("docs", "history", PATH, "--json"))
    jsonschema.validate(history, schema("document-history"))
    assert [(v["via"], v["actor"][:4], v["origin"]) for v in history["versions"]] == [
        ("ingest", "cli:", str(source / PATH))
    ] * 2
    table = run("docs", "history", PATH)
    assert "2 version(s) of ops/disk-full.md; current: version 2" in table and "磁盘满" in table
    shown = json.loads(run("docs", "show", PATH, "--version", "1", "--json"))
    jsonschema.validate(shown, schema("document-version"))
    assert run("docs", "show", PATH, "--version", "1").endswith(V1)
    diff = json.loads(run("docs", "diff", PATH, "1", "2", "--json"))
    jsonschema.validate(diff, schema("document-diff"))
    assert run("docs", "diff", PATH, "1", "2") == diff["diff"]

    rolled = json.loads(run("docs", "rollback", PATH, "--to", "1", "--json"))
    jsonschema.validate(rolled, schema("document-rollback"))
    assert rolled["version"] == 3
    assert "already has the text of version 1: nothing changed" in run("docs", "rollback", PATH, "--to", "1")
    assert json.loads(run("docs", "show", PATH, "--json"))["content_hash"] == history["versions"][0]["content_hash"]
    assert "logrotate" in run("search", "logrotate")

    for args in (
        ("docs", "rollback", PATH, "--to", "7"),
        ("docs", "diff", PATH, "1", "9"),
        ("docs", "history", "x.md"),
    ):
        error = json.loads(run(*args, "--json", code=2))
        jsonschema.validate(error, schema("error"))
        assert error["error"]["code"] == "not_found"
    run("docs", "delete", PATH)
    error = json.loads(run("docs", "rollback", PATH, "--to", "1", "--json", code=2))
    assert error["error"]["code"] == "not_found" and "deleted" in error["error"]["message"]
    assert json.loads(run("docs", "history", PATH, "--json"))["deleted"] is True


@pytest.fixture
def keyed(settings) -> Iterator[TestClient]:
    keyed_settings = settings.model_copy(update={"api_key": "w-secret", "read_api_key": "r-secret"})
    with KnowledgeBase.open(keyed_settings) as kb:
        kb.upload(V1.encode(), "disk-full.md", category="ops")
        kb.replace(PATH, V2.encode())
        with TestClient(create_app(kb=kb, mcp=False)) as client:
            yield client


def test_rest_history_versions_diff_and_a_guarded_rollback(keyed):
    read, write_key = {"Authorization": "Bearer r-secret"}, {"Authorization": "Bearer w-secret"}
    base = f"/api/documents/{PATH}"
    history = keyed.get(f"{base}/history", headers=read).json()
    jsonschema.validate(history, schema("document-history"))
    assert history["current"] == 2
    version = keyed.get(f"{base}/versions/1", headers=read).json()
    jsonschema.validate(version, schema("document-version"))
    assert version["content"] == V1
    diff = keyed.get(f"{base}/diff", params={"a": 1, "b": 2}, headers=read).json()
    jsonschema.validate(diff, schema("document-diff"))
    assert "+扩容数据盘" in diff["diff"]
    assert keyed.get(base, headers=read).json()["path"] == PATH  # the document route still answers

    assert keyed.post(f"{base}/rollback", json={"to": 1}).status_code == 401
    assert keyed.post(f"{base}/rollback", json={"to": 1}, headers=read).status_code == 403
    assert keyed.get(f"{base}/history", headers=read).json()["current"] == 2  # refused: nothing changed
    rolled = keyed.post(f"{base}/rollback", json={"to": 1}, headers=write_key)
    assert rolled.status_code == 200, rolled.text
    jsonschema.validate(rolled.json(), schema("document-rollback"))
    assert rolled.json()["version"] == 3 and rolled.json()["vectors"] in ("indexed", "pending", "none")
    newest = keyed.get(f"{base}/history", headers=read).json()["versions"][-1]
    assert (newest["actor"], newest["via"], newest["key_id"][:2]) == ("api", "rollback", "k-")
    assert newest["request_id"] == rolled.headers["x-request-id"]
    found = keyed.get("/api/search/similar", params={"query": "logrotate"}, headers=read).json()
    assert PATH in json.dumps(found, ensure_ascii=False)

    for method, url, body, status, code in (
        ("GET", f"{base}/versions/9", None, 404, "not_found"),
        ("GET", f"{base}/diff?a=1&b=9", None, 404, "not_found"),
        ("GET", f"{base}/versions/0", None, 422, None),
        ("GET", f"{base}/versions/{2**40}", None, 422, None),
        ("GET", "/api/documents/ops/none.md/history", None, 404, "not_found"),
        ("POST", f"{base}/rollback", {"to": 9}, 404, "not_found"),
        ("POST", f"{base}/rollback", {"to": "x"}, 422, None),
        ("POST", f"{base}/rollback", {"to": 1, "extra": 1}, 422, None),
    ):
        response = keyed.request(method, url, json=body, headers=write_key)
        assert response.status_code == status, (url, response.text)
        if code:
            assert response.json()["error"]["code"] == code
    assert keyed.get(f"{base}/history", headers=read).json()["current"] == 3
    assert keyed.delete(base, headers=write_key).status_code == 200
    gone = keyed.post(f"{base}/rollback", json={"to": 1}, headers=write_key)
    assert gone.status_code == 404 and "deleted" in gone.json()["error"]["message"]
    assert keyed.get(f"{base}/history", headers=read).json()["deleted"] is True
