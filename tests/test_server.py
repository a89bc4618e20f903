"""A real ``kbseek serve`` process on a loopback port: readiness, REST with keys, MCP over streamable HTTP,
and live acceptance (``eval run --base-url``) scoring exactly what the offline evaluation scores."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from serving import KBSEEK, running_server
from support import EXAMPLES
from typer.testing import CliRunner

from kbseek.interfaces.cli import app

GOLDEN = EXAMPLES / "eval" / "golden-cases.json"
READ, WRITE = "r-key-for-tests", "w-key-for-tests"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("serve") / "home"
    env = {
        **os.environ,
        "KBSEEK_HOME": str(home),
        "KBSEEK_EMBEDDER": "none",
        "KBSEEK_API_KEY": WRITE,
        "KBSEEK_READ_API_KEY": READ,
    }
    subprocess.run([KBSEEK, "ingest", str(EXAMPLES / "knowledge_base")], env=env, check=True, capture_output=True)
    with running_server(env, home.parent / "serve.log") as base:
        yield base


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_rest_over_a_real_socket(server):
    assert httpx.get(f"{server}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{server}/ready").json()
    assert ready["ready"] and ready["checks"]["indexes"]["documents"] == 16
    assert httpx.post(f"{server}/api/lookup", json={"query": "jmap"}).status_code == 401
    answer = httpx.post(
        f"{server}/api/lookup", json={"query": "jmap 内存泄漏", "session_id": "srv"}, headers=auth(READ)
    )
    assert answer.status_code == 200 and answer.json()["documents"][0]["source_path"] == "troubleshoot/jvm-oom.md"
    files = [
        (
            "files",
            (
                "srv.md",
                (
                    "---\ntitle: 服务器测试\nkeywords: [SRV_E777]\nsummary: s\n---\n"
                    "# 服务器测试\n\nSRV_E777 出现时重启。"
                ).encode(),
            ),
        )
    ]
    assert httpx.post(f"{server}/api/documents", files=files, headers=auth(READ)).status_code == 403
    made = httpx.post(f"{server}/api/documents", files=files, data={"category": "ops"}, headers=auth(WRITE))
    assert made.status_code == 201, made.text
    hits = httpx.get(f"{server}/api/search/similar", params={"query": "SRV_E777"}, headers=auth(READ)).json()["hits"]
    assert hits[0]["path"] == "ops/srv.md"
    assert httpx.delete(f"{server}/api/documents/ops/srv.md", headers=auth(WRITE)).status_code == 200
    assert "kbseek_lookups_total" in httpx.get(f"{server}/metrics", headers=auth(READ)).text
    assert httpx.get(f"{server}/docs").status_code == 200


def test_mcp_over_streamable_http(server):
    async def main() -> None:
        async with create_mcp_http_client(headers=auth(READ)) as http:
            async with Client(streamable_http_client(f"{server}/mcp", http_client=http)) as client:
                tools = [t.name for t in (await client.list_tools()).tools]
                assert tools[0] == "lookup_knowledge" and "get_document_section" in tools
                result = await client.call_tool("lookup_knowledge", {"query": "ERR_TIMEOUT 支付超时"})
                assert not result.is_error and "api/payment-errors.md" in result.content[0].text
                bad = await client.call_tool("lookup_knowledge", {"query": "x", "top_k": 0})
                assert bad.is_error and "top_k" in bad.content[0].text
        # no key, and a foreign origin: refused before MCP sees them
        async with httpx.AsyncClient() as plain:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            assert (await plain.post(f"{server}/mcp", json=body)).status_code == 401
            foreign = await plain.post(
                f"{server}/mcp", json=body, headers={**auth(READ), "Origin": "https://evil.example"}
            )
            assert foreign.status_code == 403 and foreign.json()["error"]["data"]["code"] == "forbidden_origin"

    anyio.run(main)


def test_live_acceptance_scores_what_offline_scores(server, tmp_path):
    runner = CliRunner()
    args = ["eval", "run", str(GOLDEN), "--policy", "lexical", "--policy", "answer:lexical", "--json"]
    env = {"KBSEEK_EMBEDDER": "none"}
    live = runner.invoke(app, [*args, "--base-url", server, "--api-key", READ], env=env)
    assert live.exit_code == 0, live.output
    offline = runner.invoke(app, [*args, "--cache", str(tmp_path / "cache")], env=env)
    assert offline.exit_code == 0, offline.output
    live_runs, offline_runs = json.loads(live.stdout)["runs"], json.loads(offline.stdout)["runs"]
    for a, b in zip(live_runs, offline_runs):
        assert a["name"] == b["name"] and a["metrics"] == b["metrics"], a["name"]
        assert [q["ranking"] for q in a["per_query"]] == [q["ranking"] for q in b["per_query"]]
    assert json.loads(live.stdout)["base_url"] == server
    refused = runner.invoke(app, [*args, "--base-url", server, "--api-key", "wrong"], env=env)
    assert refused.exit_code == 2 and "403" in refused.stdout
