"""The REST API: ``create_app(settings)`` builds a FastAPI app over one ``KnowledgeBase``.

The routes live in one module per group (its OpenAPI tag): ``operations`` (health, readiness, metrics),
``documents``, ``retrieval`` (search, lookup), ``sessions`` (the records), ``console`` (the web console's
evaluation routes and files) and ``docs``; ``deps`` hands them their caller's key and the knowledge base. Here
they are wired together with the guards (``request_guard``), the error mapping (``errors``) and ``/mcp``.

Endpoints are plain ``def`` functions, so FastAPI runs them on its thread pool; the knowledge base serialises
what must be (index refreshes take a write lock, lookups share a read lock). The knowledge base is opened in a
background thread at start-up, so ``/health`` answers at once and ``/ready`` turns true only once the database
is migrated, drift between files, database and indexes is repaired, and the indexes are loaded.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Match, Route

from kbseek.interfaces.http import (
    console,
    docs,
    documents,
    feedback,
    history,
    operations,
    retrieval,
    sessions,
    sync,
)
from kbseek.interfaces.http import errors as api_errors
from kbseek.interfaces.http.deps import Runtime
from kbseek.interfaces.http.request_guard import BodyLimit, HostNames, McpGuard, RequestGuard
from kbseek.observability.logs import configure_logging
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

API_VERSION = "1"
# in the OpenAPI's order; a document's history before the documents, whose /api/documents/{path} takes any path
API_ROUTERS = (
    operations.router,
    history.router,
    documents.router,
    retrieval.router,
    sessions.router,
    feedback.router,
    sync.router,
)


def create_app(
    settings: Settings | None = None, *, kb: KnowledgeBase | None = None, mcp: bool = True, bind_host: str | None = None
) -> FastAPI:
    """The API over ``settings`` (or over an already open ``kb``, e.g. in tests); ``/mcp`` when ``mcp``.
    ``bind_host``: the address served (``kbseek serve --host``), a host name the server then answers to."""
    settings = settings or (kb.settings if kb is not None else Settings())
    if "vectors_in_background" not in settings.model_fields_set:  # a served upload answers before its vectors
        settings = settings.model_copy(update={"vectors_in_background": True})
    configure_logging(settings.log_level, settings.log_format)
    runtime = Runtime(settings, kb)
    mcp_app = None
    if mcp:
        # imported here: the MCP SDK takes most of a second to import, which an app without /mcp does not pay
        from kbseek.interfaces.mcp_server import streamable_http_app

        # the SDK's Host and Origin checks are off: RequestGuard checks Host on every route, McpGuard the Origin
        mcp_app = streamable_http_app(lambda: runtime.kb, path="/mcp", allowed_hosts=["*"])

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        opener = None
        if runtime.opened is None:
            opener = threading.Thread(target=runtime.open, name="kbseek-open", daemon=True)
            opener.start()
        else:
            runtime.start_live()
        async with contextlib.AsyncExitStack() as stack:
            if mcp_app is not None:  # a mounted app's lifespan is not run by FastAPI: its session manager
                await stack.enter_async_context(mcp_app.router.lifespan_context(mcp_app))
            yield
        if opener is not None:
            opener.join(timeout=60)
        runtime.close()

    app = FastAPI(
        title="kbseek",
        version=API_VERSION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        description="Knowledge retrieval for AIOps agents: documents, lookup_knowledge, traces, metrics.",
    )
    app.state.runtime = runtime
    routes = [
        r for router in (*API_ROUTERS, docs.router, console.router) for r in router.routes if isinstance(r, APIRoute)
    ]
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(
        RequestGuard,
        keys=runtime.keys,
        hosts=HostNames(settings.allowed_hosts, bind_host=bind_host),
        allowed_origins=settings.allowed_origins,
        access_of=lambda scope: access_of(routes, scope),
    )
    api_errors.install(app)
    for router in API_ROUTERS:
        app.include_router(router)
    if mcp_app is not None:  # served at /mcp exactly (no redirect to /mcp/, which some clients do not follow)
        endpoint = next(r for r in mcp_app.routes if isinstance(r, Route) and r.path == "/mcp").endpoint
        app.router.routes.append(
            Route("/mcp", endpoint=McpGuard(endpoint, settings, runtime.keys), include_in_schema=False)
        )
    app.include_router(docs.router)
    docs.declare_bearer_key(app)
    app.include_router(console.router)
    console.mount_files(app)  # last: it answers every path no route took
    return app


def access_of(routes: Iterable[APIRoute], scope: dict[str, Any]) -> str:
    """What the route of a request needs, "read" or "write", from its key dependency (``deps.Read`` or
    ``deps.Write``); "write" when no route matches (an unknown route must not be a way around the key).

    ``routes``: the routers' own routes (an app holds an included router as one entry, not its routes)."""
    for route in routes:
        if route.matches(scope)[0] != Match.FULL:
            continue
        needs = {getattr(d.call, "kbseek_access", None) for d in route.dependant.dependencies} - {None}
        return "read" if needs == {"read"} else "write"
    return "write"
