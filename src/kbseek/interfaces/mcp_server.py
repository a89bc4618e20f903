"""The MCP server (official SDK v2, ``MCPServer``): the agent tools and the stored documents over the Model
Context Protocol, on stdio (``kbseek mcp``) or Streamable HTTP (mounted by the REST server).

Tools, defined once in ``lookup.schema``: ``lookup_knowledge``, ``get_document_section``, ``list_categories``.
Resources: every document's stored Markdown at ``kbseek://documents/{path}``.

Tool arguments are validated by kbseek's own strict models, not by the SDK's argument models generated
from a function signature: those ignore unknown fields and coerce ``"5"`` to ``5``, and would give a
message different from the REST API's and the CLI's. A kbseek error (``KbseekError``, ``InvalidRequest``)
comes back as a tool result with ``isError`` and the message naming the field; the server keeps serving.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, CallToolResult, Resource, TextContent, ToolAnnotations
from pydantic import ConfigDict
from starlette.applications import Starlette

from kbseek import __version__
from kbseek.errors import INTERNAL_FAILURES, KbseekError, Unavailable, edge_hint, public_message
from kbseek.lookup.feedback import FeedbackRequest
from kbseek.lookup.render import render_text, response_view
from kbseek.lookup.schema import (
    CATEGORIES,
    LOOKUP,
    REPORT,
    SECTION,
    TOOLS,
    SectionRequest,
    input_schema,
    parse_request,
    tool_annotations,
)
from kbseek.observability.logs import actor_scope, current_request_id, request_scope
from kbseek.observability.redact import redact

if TYPE_CHECKING:
    from kbseek.service import KnowledgeBase

log = logging.getLogger("kbseek")

SERVER_NAME = "kbseek"
DOCUMENT_URI = "kbseek://documents/{+path}"  # reserved expansion: a path keeps its "/" unescaped
INSTRUCTIONS = (
    "kbseek holds the team's operations knowledge: runbooks, troubleshooting guides, alert handbooks. Call "
    "lookup_knowledge with the symptom, error code or alert name (Chinese or English), with one session_id per "
    "diagnosis; read a whole section with get_document_section. When evidence helped, was wrong or outdated, or "
    "an answer missed something, say so with report_evidence (the answer's request_id). Each document is also a "
    "resource at kbseek://documents/{path}."
)
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class _RawArguments(ArgModelBase):
    """Hands a tool the arguments exactly as sent, for kbseek's models to validate (``LookupRequest`` in the
    service, ``lookup.schema.parse_request`` for the other tools)."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.__pydantic_extra__ or {})}


def _provider(kb: Any) -> Callable[[], KnowledgeBase]:
    """Always a function giving the knowledge base; a failure of the host's provider becomes ``Unavailable``."""
    if not callable(kb):  # a KnowledgeBase (it is not callable)
        return lambda: kb

    def current() -> KnowledgeBase:
        try:
            return kb()
        except KbseekError:
            raise
        except Exception as exc:  # e.g. the REST runtime's "still loading" (HTTP 503) error
            raise Unavailable(
                getattr(exc, "message", None) or str(exc) or type(exc).__name__, hint=getattr(exc, "hint", None)
            ) from exc

    return current


class _KnowledgeBaseServer(MCPServer):
    """``MCPServer`` whose resource list is the knowledge base's documents at the time of asking (documents
    come and go after start-up; reads go through the ``kbseek://documents/{+path}`` template)."""

    def __init__(self, kb: Callable[[], KnowledgeBase], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._kb = kb

    async def list_resources(self) -> list[Resource]:
        listed = await super().list_resources()
        try:
            docs = await anyio.to_thread.run_sync(lambda: self._kb().list_documents())
        except KbseekError as exc:
            raise MCPError(code=INTERNAL_ERROR, message=_public_text(exc)) from exc
        return listed + [
            Resource(
                uri=document_uri(d.path),
                name=d.path,
                title=d.title,
                description=d.summary or None,
                mime_type="text/markdown",
                size=d.size_bytes,
            )
            for d in docs
        ]


def document_uri(path: str) -> str:
    """A document's resource URI: its path percent-encoded but for "/", so that every path (with "#", "?" or a
    literal "%20" in it) reads back as itself through the template.

    >>> document_uri("支付/超时 处理.md")
    'kbseek://documents/%E6%94%AF%E4%BB%98/%E8%B6%85%E6%97%B6%20%E5%A4%84%E7%90%86.md'
    """
    return DOCUMENT_URI.removesuffix("{+path}") + quote(path, safe="/")


def build_mcp_server(kb: KnowledgeBase | Callable[[], KnowledgeBase]) -> MCPServer:
    """The MCP server over one knowledge base: four tools and one resource per document.

    ``kb`` is the knowledge base, or a function returning it when it is needed, for a host that opens it in
    the background (until then its error comes back as an ``unavailable`` tool error).

    >>> import tempfile, anyio
    >>> from kbseek.service import KnowledgeBase
    >>> from kbseek.settings import Settings
    >>> server = build_mcp_server(KnowledgeBase.open(Settings(home=tempfile.mkdtemp(), embedder="none")))
    >>> sorted(t.name for t in anyio.run(server.list_tools))
    ['get_document_section', 'list_categories', 'lookup_knowledge', 'report_evidence']
    """
    current = _provider(kb)
    level = getattr(getattr(kb, "settings", None), "log_level", "WARNING")
    tools = [
        _tool(LOOKUP, lambda arguments: _lookup(current(), arguments)),
        _tool(SECTION, lambda arguments: _section(current(), arguments)),
        _tool(CATEGORIES, lambda arguments: _categories(current(), arguments)),
        _tool(REPORT, lambda arguments: _report(current(), arguments)),
    ]
    # log_level: MCPServer calls logging.basicConfig (stderr) with it; kbseek's setting keeps that quiet too.
    server = _KnowledgeBaseServer(
        current,
        name=SERVER_NAME,
        title="kbseek knowledge base",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=tools,
        log_level=level if level in _LOG_LEVELS else "WARNING",
    )

    @server.resource(
        DOCUMENT_URI,
        name="document",
        title="Knowledge-base document",
        mime_type="text/markdown",
        description="A document's stored Markdown, frontmatter included; {path} as answers give it.",
    )
    def document(path: str) -> str:
        try:
            content = current().document_markdown(path)
        except KbseekError as exc:
            raise ResourceError(_public_text(exc)) from exc
        if content is None:
            raise ResourceNotFoundError(f"no document with path {path!r} (resources/list names them all)")
        return content

    return server


def _tool(name: str, handler: Callable[[dict[str, Any]], CallToolResult]) -> Tool:
    """A tool listed with its ``lookup.schema`` definition; kbseek errors become ``isError`` results."""
    spec = TOOLS[name]

    def run(arguments: dict[str, Any]) -> CallToolResult:
        with request_scope():
            try:
                return handler(arguments)
            except KbseekError as exc:
                log.info("mcp tool %s refused: %s", name, redact(str(exc)))
                return _error_result(exc)

    hints = tool_annotations(name)
    return Tool(
        fn=run,
        name=name,
        title=spec.title,
        description=spec.description,
        parameters=input_schema(name),
        fn_metadata=FuncMetadata(arg_model=_RawArguments),
        is_async=False,  # sync: run on a worker thread
        context_kwarg=None,
        annotations=ToolAnnotations(
            read_only_hint=hints["readOnlyHint"],
            destructive_hint=hints["destructiveHint"],
            idempotent_hint=hints["idempotentHint"],
            open_world_hint=hints["openWorldHint"],
        ),
    )


def _public(exc: KbseekError) -> tuple[str, str | None]:
    """An error's message and hint as an MCP client is told them: a failure inside the server without its
    internals (they go to the log), hints naming MCP's ways rather than command lines."""
    if exc.code in INTERNAL_FAILURES:
        log.warning("%s: %s", exc.code, redact(exc.message))
    return public_message(exc.code, exc.message, current_request_id()), edge_hint(exc.hint, "mcp")


def _public_text(exc: KbseekError) -> str:
    message, hint = _public(exc)
    return f"{message} (hint: {hint})" if hint else message


def _error_result(exc: KbseekError) -> CallToolResult:
    """The message for the model to read and correct; the same ``{"error": ...}`` body as the CLI's ``--json``."""
    message, hint = _public(exc)
    text = f"{exc.code}: {message}" + (f"\nhint: {hint}" if hint else "")
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        is_error=True,
        structured_content={"error": {"code": exc.code, "message": message, "hint": hint}},
    )


def _answer(response: Any) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=render_text(response))], structured_content=response_view(response)
    )


def _lookup(kb: KnowledgeBase, arguments: dict[str, Any]) -> CallToolResult:
    # Null and absent are the same to LookupRequest; the service validates (and records a refused call too).
    return _answer(kb.lookup_knowledge({k: v for k, v in arguments.items() if v is not None}))


def _section(kb: KnowledgeBase, arguments: dict[str, Any]) -> CallToolResult:
    """One section through ``lookup_knowledge(section=...)``: the same rendering, budget and trace as a lookup;
    the document may be named by file name or title too (``KnowledgeBase.section``)."""
    request = cast(SectionRequest, parse_request(SECTION, arguments))
    return _answer(kb.section(request.document, request.section))


def _categories(kb: KnowledgeBase, arguments: dict[str, Any]) -> CallToolResult:
    parse_request(CATEGORIES, arguments)
    counts = kb.categories()
    rows = [{"category": category, "documents": n} for category, n in counts.items()]
    lines = [f"{r['category']}: {r['documents']} document(s)" for r in rows]
    lines.append(f"{sum(counts.values())} document(s) in {len(rows)} categories")
    return CallToolResult(
        content=[TextContent(type="text", text="\n".join(lines))],
        structured_content={"categories": rows, "documents": sum(counts.values())},
    )


def run_stdio(kb: KnowledgeBase) -> None:
    """Serve MCP over stdin/stdout until the client closes stdin (blocks).

    While serving, the SDK points fd 1 at stderr, so a stray print cannot corrupt the protocol; output
    before this call (opening the knowledge base) is the caller's to keep off stdout (``kbseek mcp`` does).
    """
    build_mcp_server(kb).run("stdio")


def streamable_http_app(
    kb: KnowledgeBase | Callable[[], KnowledgeBase],
    *,
    path: str = "/",
    stateless: bool = True,
    json_response: bool = False,
    allowed_hosts: Sequence[str] | None = None,
    allowed_origins: Sequence[str] = (),
) -> Starlette:
    """The MCP server over Streamable HTTP, as a Starlette ASGI app serving MCP at ``path`` inside itself.

    Mount it with ``app.mount("/mcp", mcp_app)``: MCP is then served at ``/mcp/`` (POST, GET, DELETE); a
    request to ``/mcp`` gets the host router's 307 redirect to ``/mcp/``, which MCP clients follow (the
    SDK's client does, within one origin). To serve it at the root of its own server, pass ``path="/mcp"``
    and run the app itself.

    **The host must run this app's lifespan.** It starts the SDK's ``StreamableHTTPSessionManager`` (its
    task group); without it every request fails with "Task group is not initialized". Starlette and FastAPI
    do not run a mounted app's lifespan, so enter it from the host's own::

        mcp_app = streamable_http_app(kb)

        @contextlib.asynccontextmanager
        async def lifespan(app):
            async with mcp_app.router.lifespan_context(mcp_app):
                yield

        app = FastAPI(lifespan=lifespan)
        app.mount("/mcp", mcp_app)

    (Equivalent: ``async with server.session_manager.run()`` on the ``MCPServer`` whose
    ``streamable_http_app()`` built the app.) The session manager runs once: build a new app for every start
    of a host (e.g. per test client). Run as the top-level app (uvicorn), its lifespan runs by itself.
    ``kb`` may be a function returning the knowledge base, as for ``build_mcp_server``.

    ``stateless`` (default): every request stands alone, so several API processes behind a load balancer
    need no sticky sessions; the tool's dedup sessions live in the database, keyed by its ``session_id``
    argument, not by the MCP connection. ``json_response``: plain JSON instead of an SSE stream per POST.
    ``allowed_hosts``: the Host headers accepted (``"name:*"`` for any port), a guard against DNS
    rebinding; ``None`` accepts loopback only (127.0.0.1, localhost, [::1]: the SDK's default, which answers
    421 to any other Host, so a server reached by name needs this set); ``["*"]`` turns the SDK's Host and
    Origin checks off (for a host app that checks Origin itself). ``allowed_origins``: Origin headers of
    browser clients accepted when hosts are given (requests without Origin always pass).
    """
    if allowed_hosts is None:
        security = None  # the SDK's default for host 127.0.0.1: loopback Host and Origin only
    elif list(allowed_hosts) == ["*"]:
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    else:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(allowed_hosts),
            allowed_origins=list(allowed_origins),
        )
    return build_mcp_server(kb).streamable_http_app(
        streamable_http_path=path, stateless_http=stateless, json_response=json_response, transport_security=security
    )


def _report(kb: KnowledgeBase, arguments: dict[str, Any]) -> CallToolResult:
    """``report_evidence``: one reader's report on a recorded call's evidence, attributed to MCP."""
    with actor_scope("mcp"):
        stored = kb.reviews.report(cast(FeedbackRequest, parse_request(REPORT, arguments)))
    where = f" on {len(stored['evidence'])} document(s)/section(s)" if stored["evidence"] else ""
    text = f"recorded: {stored['verdict']}{where} of request {stored['request_id']} (report {stored['id']})"
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=stored)
