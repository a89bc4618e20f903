"""The Git sources a server syncs by itself (``git_sources``): at start-up, on schedule (driven here by a clock the
test moves and ``wake()``, not by waiting), and on ``POST /api/sync/git`` for a configured source only, one sync of
a source at a time (409 for a second), credentials in a URL never in a response or a log line. Real repositories
made here, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from support import ROOT
from test_git_sync import DISK, DISK2, OOM, commit, git

from kbseek.errors import NotFoundError, WriteConflictError
from kbseek.home.gitsources import GitSources
from kbseek.interfaces.http.app import create_app
from kbseek.maintenance.live import git_sources
from kbseek.settings import GitSource, Settings

TIMEOUT = 30.0  # a safety net only


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "runbooks"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def configured(settings: Settings, *sources: dict[str, Any]) -> Settings:
    return settings.model_copy(update={"git_sources": [GitSource(**s) for s in sources]})


def wait_for_result(client: TestClient, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        response = client.get("/api/sync/git")
        if response.status_code == 200:
            source = next(s for s in response.json()["sources"] if s["name"] == name)
            if source["last"] is not None:
                return source
        time.sleep(0.05)
    raise AssertionError(f"no sync result for {name} within {TIMEOUT}s")


def hits(client: TestClient, query: str) -> list[str]:
    return [h["path"] for h in client.get("/api/search/similar", params={"query": query}).json()["hits"]]


@pytest.fixture
def served(settings: Settings, repo: Path) -> Iterator[tuple[TestClient, str]]:
    first = commit(repo, {"ops/disk.md": DISK})
    source = {"repo": str(repo), "name": "runbooks", "path": "ops", "prune": True}
    with TestClient(create_app(configured(settings, source), mcp=False)) as client:
        yield client, first


def test_a_source_is_synced_at_start_up_and_on_request(served, repo):
    client, first = served
    shown = wait_for_result(client, "runbooks")
    assert (shown["index"], shown["repo"], shown["path"], shown["prune"]) == (0, str(repo), "ops", True)
    last = shown["last"]
    assert (last["trigger"], last["commit"], last["ok"], last["counts"]["added"], last["error"]) == (
        "start-up",
        first,
        True,
        1,
        None,
    )
    assert hits(client, "logrotate") == ["disk.md"]
    second = commit(repo, {"ops/disk.md": DISK2, "ops/oom.md": OOM})
    answer = client.post("/api/sync/git", json={"source": "runbooks"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["name"], body["trigger"], body["commit"], body["previous"], body["mode"]) == (
        "runbooks",
        "request",
        second,
        first,
        "incremental",
    )
    assert (body["counts"]["added"], body["counts"]["updated"]) == (1, 1)
    assert hits(client, "resize2fs") == ["disk.md"] and hits(client, "dmesg") == ["oom.md"]
    assert client.post("/api/sync/git", json={"source": 0}).json()["mode"] == "unchanged"  # by index
    newest = client.get("/api/documents/disk.md/history").json()["versions"][-1]
    assert newest["via"] == "sync" and newest["actor"] == "api"


def test_only_a_configured_source_is_synced(served, tmp_path):
    client, _ = served
    wait_for_result(client, "runbooks")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    commit(other, {"x.md": OOM})
    for source in (str(other), f"file://{other}", "nope", 5):
        answer = client.post("/api/sync/git", json={"source": source})
        assert answer.status_code == 404 and "'runbooks'" in answer.json()["error"]["message"]
    assert client.post("/api/sync/git", json={"source": "runbooks", "repo": str(other)}).status_code == 422
    assert client.post("/api/sync/git", json={"source": "x" * 101}).status_code == 422
    assert hits(client, "dmesg") == []  # nothing of the other repository was read


def test_a_second_sync_of_a_running_source_gets_409(served):
    client, _ = served
    wait_for_result(client, "runbooks")
    sources = client.app.state.runtime.live.sources
    entered, release = threading.Event(), threading.Event()
    real = sources._sync

    def held(source: GitSource) -> Any:
        entered.set()
        assert release.wait(TIMEOUT)
        return real(source)

    sources._sync = held
    results: list[dict[str, Any]] = []
    first = threading.Thread(target=lambda: results.append(sources.sync("runbooks")))
    first.start()
    try:
        assert entered.wait(TIMEOUT)
        answer = client.post("/api/sync/git", json={"source": "runbooks"})
        assert answer.status_code == 409 and answer.json()["error"]["code"] == "conflict"
        running = client.get("/api/sync/git").json()["sources"][0]["running_since"]
        assert running is not None
    finally:
        release.set()
        first.join(TIMEOUT)
    assert results and results[0]["ok"] is True
    assert client.post("/api/sync/git", json={"source": "runbooks"}).status_code == 200  # free again


def test_the_write_key_guards_the_sync(settings, repo):
    commit(repo, {"ops/disk.md": DISK})
    keyed = configured(settings.model_copy(update={"api_key": "w-key"}), {"repo": str(repo), "name": "rb"})
    with TestClient(create_app(keyed, mcp=False)) as client:
        wait_for_result(client, "rb")
        assert client.post("/api/sync/git", json={"source": "rb"}).status_code == 401
        ok = client.post("/api/sync/git", json={"source": "rb"}, headers={"Authorization": "Bearer w-key"})
        assert ok.status_code == 200 and ok.json()["mode"] == "unchanged"


def test_credentials_in_a_source_url_are_never_shown_or_logged(settings, caplog):
    secret = "s3cret-pw"
    remote = {"repo": f"http://deploy:{secret}@127.0.0.1:9/kb.git", "name": "remote"}
    with caplog.at_level(logging.INFO, logger="kbseek"):
        with TestClient(create_app(configured(settings, remote), mcp=False)) as client:
            shown = wait_for_result(client, "remote")
            assert shown["repo"] == "http://deploy:***@127.0.0.1:9/kb.git"
            assert shown["last"]["ok"] is False and shown["last"]["error"]["code"] == "source_error"
            answer = client.post("/api/sync/git", json={"source": "remote"})
            assert answer.status_code == 502 and "deploy:***@" in answer.text
            texts = [answer.text, client.get("/api/sync/git").text, str(client.app.state.runtime.settings.describe())]
    assert all(secret not in text for text in texts)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "remote: sync failed" in logged and secret not in logged


def test_the_schedule_picks_up_a_new_commit(kb, repo):
    first = commit(repo, {"ops/disk.md": DISK})
    clock = Clock()
    results: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
    source = GitSource(repo=str(repo), name="rb", every="15min")
    sync = git_sources(kb)._sync
    sources = GitSources([source], sync, clock=clock, on_result=lambda name, result: results.put((name, result)))
    sources.start()
    try:
        name, result = results.get(timeout=TIMEOUT)
        assert (name, result["trigger"], result["commit"]) == ("rb", "start-up", first)
        second = commit(repo, {"ops/oom.md": OOM})
        clock.now += 899  # not yet due
        sources.wake()
        assert sources.run_due() == []  # what the woken thread decided too: nothing
        clock.now += 1
        sources.wake()
        name, result = results.get(timeout=TIMEOUT)
        assert (result["trigger"], result["commit"], result["counts"]["added"]) == ("schedule", second, 1)
        report = kb.sync_git(str(repo), prune=True).to_dict()  # what 'kbseek sync git --json' prints
        jsonschema.validate(report, json.loads((ROOT / "schemas" / "sync-git-report.schema.json").read_text("utf-8")))
        assert report["mode"] == "unchanged"
        assert results.empty() and [d.path for d in kb.list_documents()] == ["ops/disk.md", "ops/oom.md"]
    finally:
        sources.stop()


def test_a_failing_scheduled_sync_is_recorded_and_the_schedule_goes_on(kb, repo, tmp_path):
    clock = Clock()
    gone = GitSource(repo=str(tmp_path / "gone"), name="gone", every=60)
    sources = GitSources([gone], git_sources(kb)._sync, clock=clock)
    sources.states[0].next_due = clock.now
    assert sources.run_due() == []  # failed: not counted as synced, but recorded
    last = sources.describe()[0]["last"]
    assert last["ok"] is False and last["error"]["code"] == "not_found"
    assert sources.states[0].next_due == clock.now + 60
    with pytest.raises(NotFoundError, match="no such folder"):
        sources.sync("gone")


def test_settings_name_sources_and_refuse_bad_ones(tmp_path):
    settings = Settings(
        home=tmp_path,
        git_sources=[{"repo": "https://deploy:pw@git.example.com/team/kb.git", "path": "ops/", "every": "1h"}],
    )
    assert (settings.git_sources[0].name, settings.git_sources[0].every) == ("kb/ops", 3600.0)
    assert settings.describe()["git_sources"][0]["repo"] == "https://deploy:***@git.example.com/team/kb.git"
    for secret_url in ("https://deploy:pw@git.example.com", "https://x/kb.git?token=pw", "ssh://pw@host:22"):
        assert "pw" not in Settings(home=tmp_path, git_sources=[{"repo": secret_url}]).git_sources[0].name
    with pytest.raises(ValidationError, match="given twice"):
        Settings(home=tmp_path, git_sources=[{"repo": "/a/kb"}, {"repo": "/b/kb"}])
    with pytest.raises(ValidationError, match="15min"):
        Settings(home=tmp_path, git_sources=[{"repo": "/a/kb", "every": "15m"}])
    with pytest.raises(ValidationError, match="between 10s"):
        Settings(home=tmp_path, git_sources=[{"repo": "/a/kb", "every": 1}])
    with pytest.raises(ValidationError, match="url"):
        Settings(home=tmp_path, git_sources=[{"repo": "/a/kb", "url": "/b"}])


def test_the_cli_sync_refusal_names_the_servers_route(tmp_path):
    from kbseek.home.ownership import THROUGH_SERVER

    assert "/api/sync/git" in THROUGH_SERVER["sync git"] and "serve --watch" in THROUGH_SERVER["watch"]


def test_no_configured_source_means_an_empty_list(kb):
    with TestClient(create_app(kb=kb, mcp=False)) as client:
        assert client.get("/api/sync/git").json() == {"sources": []}
        answer = client.post("/api/sync/git", json={"source": "x"})
        assert answer.status_code == 404 and "set git_sources" in answer.json()["error"]["message"]


def test_a_busy_source_is_skipped_by_the_schedule(kb, repo):
    commit(repo, {"ops/disk.md": DISK})
    clock = Clock()
    sources = GitSources([GitSource(repo=str(repo), name="rb", every=60)], git_sources(kb)._sync, clock=clock)
    state = sources.states[0]
    state.next_due = clock.now
    with state.lock:  # as if a request were syncing it
        assert sources.run_due() == []
        with pytest.raises(WriteConflictError):
            sources.sync("rb")
    assert state.last is None and state.next_due == clock.now + 60
    clock.now += 60
    assert sources.run_due() == ["rb"] and kb.list_documents()[0].path == "ops/disk.md"


def test_knowledge_base_without_sources_starts_no_thread(kb):
    sources = git_sources(kb).start()
    assert sources._thread is None
    sources.stop()


def test_an_unexpected_failure_is_recorded_without_its_details_and_the_schedule_survives(caplog):
    def broken(source: GitSource) -> Any:
        raise RuntimeError("database at postgresql://kb:pw@db/kb went away")

    clock = Clock()
    sources = GitSources([GitSource(repo="/srv/kb", name="kb", every=60)], broken, clock=clock)
    with pytest.raises(RuntimeError):
        sources.sync("kb")
    assert sources.describe()[0]["last"]["error"] == {"code": "internal_error", "message": "RuntimeError: see the log"}
    sources.states[0].next_due = clock.now
    with caplog.at_level(logging.ERROR, logger="kbseek"):
        assert sources.run_due() == []  # logged, not raised: the schedule goes on
    assert "kb: sync failed" in caplog.text and sources.states[0].next_due == clock.now + 60
