"""The MCP server end to end with the SDK's own client: in memory, over stdio (``kbseek mcp`` as a real
subprocess) and over Streamable HTTP (a real uvicorn server on a loopback port)."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from pathlib import Path

import anyio
import httpx
import jsonschema
import pytest
import uvicorn
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import UriTemplate
from starlette.applications import Starlette
from starlette.routing import Mount
from support import ROOT, doc

from kbseek.errors import NotFoundError
from kbseek.interfaces.mcp_server import DOCUMENT_URI, build_mcp_server, document_uri, streamable_http_app
from kbseek.lookup.render import render_text
from kbseek.lookup.schema import TOOLS, input_schema, mcp_tool_definition, openai_tool_schema
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

ANSWER_SCHEMA = json.loads((ROOT / "schemas" / "lookup-answer.schema.json").read_text("utf-8"))
PAYMENT = doc(
    "支付超时处理",
    "ERR_TIMEOUT, 支付超时",
    "支付网关 ERR_TIMEOUT 超时的排查",
    """
# 支付超时处理

## ERR_TIMEOUT

支付网关返回 ERR_TIMEOUT 时，先检查下游银行通道的延迟。Check the upstream bank channel latency first.

## 重试策略

最多重试三次，间隔指数退避。Retry at most three times with exponential backoff.
""",
    category="payment",
)
DOCUMENTS = {
    "payment-timeout.md": PAYMENT,
    "high-cpu.md": doc(
        "High CPU usage",
        "HighCPUUsage",
        "What to do when HighCPUUsage fires",
        """
# High CPU usage

## Diagnosis

Find the hottest threads with top -H and a thread dump.
""",
        category="ops",
    ),
    "disk-full.md": doc(
        "Disk full",
        "DiskFull",
        "Free space on a full disk",
        """
# Disk full

## Cleanup

Remove rotated logs older than seven days.
""",
        category="ops",
    ),
}
LOOKUP = {"query": "ERR_TIMEOUT 支付超时 what should I check?"}


def fill(home: Path) -> KnowledgeBase:
    kb = KnowledgeBase.open(Settings(home=home))
    for name, text in DOCUMENTS.items():
        assert kb.upload(text.encode("utf-8"), name).status == "added"
    kb.upload(
        doc(
            "Database CPU",
            "db-cpu",
            "CPU on the primary",
            "# Database CPU\n\n## Plan\n\nCheck slow queries.",
            category="db",
        ).encode("utf-8"),
        "high-cpu.md",
    )  # a second high-cpu.md: the name is ambiguous
    return kb


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    knowledge_base = fill(tmp_path_factory.mktemp("mcp") / "home")
    yield knowledge_base
    knowledge_base.close()


def session(kb_or_target, check):
    """Run ``check(client)`` against a server, a URL or a transport, with the SDK's client."""

    async def main():
        target = build_mcp_server(kb_or_target) if isinstance(kb_or_target, KnowledgeBase) else kb_or_target
        async with Client(target) as client:
            await check(client)

    anyio.run(main)


def text(result) -> str:
    return "\n".join(block.text for block in result.content)


def test_tools_are_listed_with_their_one_definition(kb):
    async def check(client):
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert list(listed) == list(TOOLS)
        for name, tool in listed.items():
            definition = mcp_tool_definition(name)
            assert tool.input_schema == input_schema(name) == definition["inputSchema"]
            assert tool.description == definition["description"] and tool.title == definition["title"]
            assert tool.annotations.read_only_hint is (name != "report_evidence")  # reporting records a report
        assert listed["lookup_knowledge"].input_schema == openai_tool_schema()["function"]["parameters"]
        assert listed["lookup_knowledge"].annotations.idempotent_hint is False

    session(kb, check)


def test_lookup_round_trip_with_session_dedup(kb):
    async def check(client):
        first = await client.call_tool("lookup_knowledge", {**LOOKUP, "session_id": "mcp-dedup", "policy": None})
        assert not first.is_error
        assert "payment/payment-timeout.md" in text(first) and "先检查下游银行通道的延迟" in text(first)
        view = first.structured_content
        jsonschema.validate(view, ANSWER_SCHEMA)
        assert view["status"] == "answer" and view["documents"][0]["source_path"] == "payment/payment-timeout.md"
        assert view["documents"][0]["relevance"] in ("PRECISE", "HIGHLY_RELEVANT")
        again = await client.call_tool("lookup_knowledge", {**LOOKUP, "session_id": "mcp-dedup"})
        assert again.structured_content["call"] == 2 and again.structured_content["deduplicated"]
        pointers = again.structured_content["deduplicated"]
        assert all(d["judged"] in ("PRECISE", "HIGHLY_RELEVANT", "REFERENCE") for d in pointers)
        assert "[DEDUPED, " in text(again)

    session(kb, check)


BAD = [
    ({"query": "x", "top_k": 0}, "top_k: Input should be greater than or equal to 1"),
    ({"query": "x", "top_k": "5"}, "top_k: Input should be a valid integer"),
    ({"query": "x", "bogus": True}, "bogus: Extra inputs are not permitted"),
    ({"top_k": 3}, "query: Field required"),
    ({"query": "x", "policy": "fast"}, "policy: Input should be"),
    ({"query": "   "}, "query: is blank"),
]


def test_bad_arguments_are_tool_errors_naming_the_field(kb):
    async def check(client):
        for arguments, message in BAD:
            result = await client.call_tool("lookup_knowledge", arguments)
            assert result.is_error and message in text(result), (arguments, text(result))
            assert result.structured_content["error"]["code"] == "invalid_request"
        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error and "no_such_tool" in text(unknown)
        assert not (await client.call_tool("lookup_knowledge", LOOKUP)).is_error  # still serving

    session(kb, check)


def test_get_document_section(kb):
    async def check(client):
        for document, section in (
            ("payment/payment-timeout.md", "重试策略"),
            ("payment-timeout.md", "支付超时处理 / 重试策略"),
            ("支付超时处理", "#重试策略"),
        ):
            result = await client.call_tool("get_document_section", {"document": document, "section": section})
            assert not result.is_error, text(result)
            assert "最多重试三次" in text(result) and "先检查下游银行通道" not in text(result)
            assert result.structured_content["documents"][0]["relevance"] == "PRECISE"

        missing = await client.call_tool(
            "get_document_section", {"document": "payment/payment-timeout.md", "section": "rollback"}
        )
        assert missing.is_error and "no section 'rollback'" in text(missing)
        assert "err_timeout (ERR_TIMEOUT)" in text(missing) and "重试策略" in text(missing)
        unknown = await client.call_tool("get_document_section", {"document": "nope.md", "section": "x"})
        assert unknown.is_error and "no document 'nope.md'" in text(unknown)
        assert "ops/disk-full.md" in text(unknown) and "payment/payment-timeout.md" in text(unknown)
        ambiguous = await client.call_tool("get_document_section", {"document": "high-cpu.md", "section": "x"})
        assert ambiguous.is_error and "ambiguous" in text(ambiguous)
        assert "db/high-cpu.md" in text(ambiguous) and "ops/high-cpu.md" in text(ambiguous)
        bad = await client.call_tool("get_document_section", {"document": "ops/disk-full.md"})
        assert bad.is_error and "section: Field required" in text(bad)

    session(kb, check)


def test_a_document_by_name_for_the_section_tool_by_path_or_id_for_lookups(kb):
    """One resolver, two rules: ``get_document_section`` (``KnowledgeBase.section``) takes what an agent read
    (file name, stem, title); ``lookup_knowledge(section=...)`` takes the path or id an answer gave, and no more."""
    assert "最多重试三次" in render_text(kb.section("payment-timeout", "重试策略"))
    with pytest.raises(NotFoundError, match="no document with path or id 'payment-timeout.md'"):
        kb.lookup_knowledge({"query": "重试", "section": "payment-timeout.md#重试策略"})
    with pytest.raises(NotFoundError, match="ambiguous") as ambiguous:
        kb.section("high-cpu.md", "Plan")
    assert ambiguous.value.hint == "name one by its path: db/high-cpu.md, ops/high-cpu.md"


def test_list_categories(kb):
    async def check(client):
        result = await client.call_tool("list_categories", {})
        assert not result.is_error
        assert result.structured_content == {
            "categories": [
                {"category": "db", "documents": 1},
                {"category": "ops", "documents": 2},
                {"category": "payment", "documents": 1},
            ],
            "documents": 4,
        }
        assert "ops: 2 document(s)" in text(result)

    session(kb, check)


def test_documents_are_resources(kb):
    async def check(client):
        listed = {r.uri: r for r in (await client.list_resources()).resources}
        assert set(listed) == {
            document_uri(p)
            for p in ("db/high-cpu.md", "ops/disk-full.md", "ops/high-cpu.md", "payment/payment-timeout.md")
        }
        assert listed["kbseek://documents/payment/payment-timeout.md"].title == "支付超时处理"
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["kbseek://documents/{+path}"]
        read = await client.read_resource("kbseek://documents/payment/payment-timeout.md")
        assert read.contents[0].text == PAYMENT and read.contents[0].mime_type == "text/markdown"
        with pytest.raises(MCPError, match="no document with path 'ops/nope.md'"):
            await client.read_resource("kbseek://documents/ops/nope.md")

    session(kb, check)


@pytest.mark.parametrize("path", ["a#b.md", "q?.md", "a%20b.md", "ops/[x] y.md", "支付/超时 处理.md"])
def test_every_document_path_reads_back_through_the_uri_template(path):
    assert UriTemplate.parse(DOCUMENT_URI).match(document_uri(path)) == {"path": path}


def test_stdio_subprocess(tmp_path):
    home = tmp_path / "home"
    fill(home).close()
    errlog = tmp_path / "stderr.log"
    params = StdioServerParameters(
        command=str(Path(sys.executable).parent / "kbseek"),
        args=["mcp"],
        env={"KBSEEK_HOME": str(home), "KBSEEK_EMBEDDER": "none", "KBSEEK_LOG_LEVEL": "INFO"},
    )

    async def check(client):
        assert [t.name for t in (await client.list_tools()).tools] == list(TOOLS)
        result = await client.call_tool("lookup_knowledge", LOOKUP)
        assert (
            not result.is_error
            and result.structured_content["documents"][0]["source_path"] == "payment/payment-timeout.md"
        )
        refused = await client.call_tool("lookup_knowledge", {"query": "x", "top_k": 0})
        assert refused.is_error and "top_k" in text(refused)

    with errlog.open("w") as err:
        session(stdio_client(params, errlog=err), check)
    assert "knowledge base loaded" in errlog.read_text("utf-8")  # logs went to stderr; stdout stayed JSON-RPC


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _serving(app):
    config = uvicorn.Config(app, host="127.0.0.1", port=_free_port(), log_level="warning", ws="none", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(5)


def test_streamable_http_mounted_under_a_host_app(kb):
    mcp_app = streamable_http_app(kb)

    @contextlib.asynccontextmanager
    async def lifespan(app):  # a mounted app's lifespan is the host's to run (see streamable_http_app)
        async with mcp_app.router.lifespan_context(mcp_app):
            yield

    host = Starlette(routes=[Mount("/mcp", mcp_app)], lifespan=lifespan)

    async def check(client):
        assert [t.name for t in (await client.list_tools()).tools] == list(TOOLS)
        result = await client.call_tool("lookup_knowledge", {**LOOKUP, "session_id": "mcp-http"})
        assert not result.is_error and "payment/payment-timeout.md" in text(result)

    with _serving(host) as base:
        session(f"{base}/mcp", check)  # /mcp answers with a redirect to /mcp/, which the client follows
        session(f"{base}/mcp/", check)


def test_a_knowledge_base_still_loading_is_a_tool_error(kb):
    class Loading(Exception):
        message, hint = "the knowledge base is still loading", "see /ready"

    ready = False

    def provider():
        if not ready:
            raise Loading()
        return kb

    server = build_mcp_server(provider)

    async def check(client):
        nonlocal ready
        result = await client.call_tool("lookup_knowledge", LOOKUP)
        assert result.is_error and "unavailable: the knowledge base is still loading" in text(result)
        with pytest.raises(MCPError, match="still loading"):
            await client.list_resources()
        ready = True
        assert not (await client.call_tool("lookup_knowledge", LOOKUP)).is_error

    session(server, check)


def test_a_client_without_the_key_is_told_what_to_send(kb):
    """Over HTTP with a read key set, the SDK's client shows the refusal's words (a JSON-RPC error body), not a
    bare "Server returned an error response"."""
    from kbseek.interfaces.http.app import create_app

    app = create_app(kb.settings.model_copy(update={"read_api_key": "r-mcp"}), kb=kb)

    async def check(client):
        await client.list_tools()

    with _serving(app) as base:
        refused = pytest.RaisesExc(MCPError, match=r"needs 'Authorization: Bearer <key>'")
        with pytest.RaisesGroup(refused, flatten_subgroups=True):  # raised out of the client's task group
            session(f"{base}/mcp", check)
        wrong = httpx.post(
            f"{base}/mcp",
            json={"jsonrpc": "2.0", "id": 7, "method": "tools/list"},
            headers={"Authorization": "Bearer guess", "Accept": "application/json, text/event-stream"},
        )
        assert wrong.status_code == 403 and wrong.headers["content-type"] == "application/json"
        assert wrong.json()["error"]["data"]["code"] == "forbidden" and wrong.json()["jsonrpc"] == "2.0"

        async def keyed(client):
            assert [t.name for t in (await client.list_tools()).tools] == list(TOOLS)

        async def main():
            async with create_mcp_http_client(headers={"Authorization": "Bearer r-mcp"}) as http:
                async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                    await keyed(client)

        anyio.run(main)


def test_no_idle_stream_is_held_open(kb):
    """The server is stateless and never sends a message of its own: a GET for such a stream gets 405 at once
    (it was held open forever: 1,200 idle streams were accepted)."""
    from kbseek.interfaces.http.app import create_app

    with _serving(create_app(kb=kb)) as base:
        for _ in range(3):  # streamed: an accepted stream shows its status without being read (it never ends)
            with httpx.stream("GET", f"{base}/mcp", headers={"Accept": "text/event-stream"}, timeout=30) as response:
                assert response.status_code == 405 and response.headers["allow"] == "POST"
                assert "stateless" in json.loads(response.read())["error"]["message"]
