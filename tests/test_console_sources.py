"""The console's Git sources (headless Chromium against a real ``kbseek serve`` with ``git_sources`` set): each
configured source with its start-up result, "sync now" bringing in a new commit, and a sync without the write key
shown as the API's error. Skipped, saying so, where Chromium is not installed (as tests/test_console.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serving import running_server
from test_console import READ, WRITE, Page, auth, browser  # noqa: F401 - browser: the module's Chromium fixture
from test_git_sync import DISK, OOM, commit, git

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> Iterator[tuple[str, Path, str]]:
    root = tmp_path_factory.mktemp("console-sources")
    repo = root / "runbooks"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    first = commit(repo, {"ops/disk.md": DISK})
    env = {
        **os.environ,
        "KBSEEK_HOME": str(root / "home"),
        "KBSEEK_EMBEDDER": "none",
        "KBSEEK_API_KEY": WRITE,
        "KBSEEK_READ_API_KEY": READ,
        "KBSEEK_GIT_SOURCES": json.dumps([{"repo": str(repo), "name": "runbooks", "path": "ops"}]),
    }
    with running_server(env, root / "serve.log") as base:
        yield base, repo, first


def test_sync_now_brings_in_a_new_commit(synced, browser):  # noqa: F811 - the imported fixture
    base, repo, first = synced
    page = Page(browser, base)
    page.go("#/documents")
    page.type("#api-key", READ, submit=True)  # a read key: the list shows, a sync is refused
    page.go("#/documents")
    page.text_in("#sources-table", "runbooks", first[:12], "start-up")
    page.find("#sync-0").click()
    page.text_in("#sync-result-0", "HTTP 40")
    page.type("#api-key", WRITE, submit=True)
    page.go("#/documents")
    second = commit(repo, {"ops/oom.md": OOM})
    page.find("#sync-0").click()
    page.text_in("#sync-result-0", second[:12], "incremental", "1 added")
    page.text_in("#doc-table", "oom.md")
    page.shot("git-sources")
    shown = httpx.get(f"{base}/api/sync/git", headers=auth(READ)).json()["sources"][0]
    assert (shown["last"]["commit"], shown["last"]["trigger"]) == (second, "request")
    assert page.errors() == []
