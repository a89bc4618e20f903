"""The REST API: ``create_app(settings)`` builds a FastAPI app over one ``KnowledgeBase``.

Endpoints are plain ``def`` functions, so FastAPI runs them on its thread pool; the knowledge base serialises
what must be (index refreshes take a write lock, lookups share a read lock). The knowledge base is opened in a
background thread at start-up, so ``/health`` answers at once and ``/ready`` turns true only once the database
is migrated, drift between files, database and indexes is repaired, and the indexes are loaded.
"""

# no "from __future__ import annotations": FastAPI must see the local Read/Write aliases as objects
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from sqlalchemy.exc import SQLAlchemyError
from starlette.routing import Route

from kbseek.errors import KbseekError
from kbseek.interfaces.answers import legacy_view, render_text, response_view
from kbseek.interfaces.api_guard import (
    STATUS, ApiError, BodyLimit, McpGuard, Principal, error_body, reader, status_of, writer,
)
from kbseek.interfaces.views import document_view, search_view
from kbseek.logs import actor_scope, configure_logging
from kbseek.settings import Settings
from kbseek.telemetry import CONTENT_TYPE

API_VERSION = "1"
log = logging.getLogger("kbseek")


class Runtime:
    """The knowledge base of one app, opened in the background; ``kb`` raises 503 until it is ready."""

    def __init__(self, settings: Settings, kb: Any = None) -> None:
        self.settings = settings
        self._kb = kb
        self.error: str | None = None
        self.started = time.monotonic()
        self.ready_after_s: float | None = 0.0 if kb is not None else None
        self.owns_kb = kb is None

    def open(self) -> None:
        from kbseek.service import KnowledgeBase

        try:
            self._kb = KnowledgeBase.open(self.settings)
            self.ready_after_s = round(time.monotonic() - self.started, 3)
        except Exception as exc:  # reported by /ready, never a silent half-start
            self.error = f"{type(exc).__name__}: {exc}"

    @property
    def kb(self) -> Any:
        if self._kb is None:
            raise ApiError(503, "starting" if self.error is None else "unavailable",
                           self.error or "the knowledge base is still loading; see /ready")
        return self._kb

    def close(self) -> None:
        if self._kb is not None and self.owns_kb:
            self._kb.close()


def create_app(settings: Settings | None = None, *, kb: Any = None, mcp: bool = True) -> FastAPI:
    """The API over ``settings`` (or over an already open ``kb``, e.g. in tests); ``/mcp`` when ``mcp``."""
    settings = settings or (kb.settings if kb is not None else Settings())
    if "vectors_in_background" not in settings.model_fields_set:  # a served upload answers before its vectors
        settings = settings.model_copy(update={"vectors_in_background": True})
    configure_logging(settings.log_level, settings.log_format)
    runtime = Runtime(settings, kb)
    mcp_app = None
    if mcp:
        from kbseek.interfaces.mcp_server import streamable_http_app

        # Host headers are not checked here: McpGuard checks the Origin (the DNS-rebinding defence) and the key
        mcp_app = streamable_http_app(lambda: runtime.kb, path="/mcp", allowed_hosts=["*"])

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        opener = None
        if runtime._kb is None:
            opener = threading.Thread(target=runtime.open, name="kbseek-open", daemon=True)
            opener.start()
        async with contextlib.AsyncExitStack() as stack:
            if mcp_app is not None:  # a mounted app's lifespan is not run by FastAPI: its session manager
                await stack.enter_async_context(mcp_app.router.lifespan_context(mcp_app))
            yield
        if opener is not None:
            opener.join(timeout=60)
        runtime.close()

    app = FastAPI(title="kbseek", version=API_VERSION, lifespan=lifespan,
                  description="Knowledge retrieval for AIOps agents: documents, lookup_knowledge, traces, metrics.")
    app.state.runtime = runtime
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    _errors(app)
    _routes(app, runtime)
    if mcp_app is not None:  # served at /mcp exactly (no redirect to /mcp/, which some clients do not follow)
        endpoint = next(r for r in mcp_app.routes if isinstance(r, Route) and r.path == "/mcp").endpoint
        app.router.routes.append(Route("/mcp", endpoint=McpGuard(endpoint, settings), include_in_schema=False))
    from kbseek.interfaces.console import register_console
    register_console(app, runtime)
    return app


def _errors(app: FastAPI) -> None:
    @app.exception_handler(KbseekError)
    async def kbseek_error(_: Request, exc: KbseekError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.hint), status_code=status_of(exc))

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.hint), status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e["loc"] if p != "body") or "body"
            problems.append(f"{where}: {e['msg']}")
        code = "invalid_json" if any(e["type"] == "json_invalid" for e in exc.errors()) else "invalid_request"
        return JSONResponse(error_body(code, "; ".join(problems)), status_code=422 if code != "invalid_json" else 400)

    @app.exception_handler(SQLAlchemyError)
    async def database_down(_: Request, exc: SQLAlchemyError) -> JSONResponse:
        log.warning("database unavailable: %s", exc.__class__.__name__)
        return JSONResponse(error_body("database_unavailable", f"the database is unavailable "
                                       f"({exc.__class__.__name__}); retry shortly", "see GET /ready"),
                            status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)


def _routes(app: FastAPI, runtime: Runtime) -> None:
    settings = runtime.settings
    Read = Annotated[Principal, Depends(reader(settings))]
    Write = Annotated[Principal, Depends(writer(settings))]

    @app.get("/health", tags=["operations"], summary="Liveness: the process answers")
    def health() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/ready", tags=["operations"], summary="Readiness: database, vector store and indexes loaded")
    def ready() -> JSONResponse:
        checks: dict[str, Any] = {}
        kb = runtime._kb
        if kb is None:
            body = {"ready": False, "reason": runtime.error or "starting", "checks": checks}
            return JSONResponse(body, status_code=503)
        try:
            checks["database"] = {"ok": True, "documents": kb.repository.count()}
        except Exception as exc:
            checks["database"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        # an embedding server that has not answered yet degrades lookups to the lexical lanes: still ready
        checks["vector_store"] = kb.indexes.dense_status()
        checks["indexes"] = {"ok": kb.indexes.version >= 0, "version": kb.indexes.index_version,
                             "documents": len(kb.indexes.documents), "chunks": len(kb.indexes.chunks)}
        ok = checks["database"]["ok"] and checks["indexes"]["ok"]
        degraded = [name for name, check in checks.items() if not check["ok"]] if ok else []
        return JSONResponse({"ready": ok, "degraded": degraded, "ready_after_s": runtime.ready_after_s,
                             "checks": checks, "repaired_at_start": kb.startup_repair},
                            status_code=200 if ok else 503)

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics")
    def metrics(_: Read) -> Response:
        kb = runtime.kb
        kb.telemetry.documents.set(len(kb.indexes.documents))
        kb.telemetry.chunks.set(len(kb.indexes.chunks))
        return Response(kb.telemetry.exposition(), media_type=CONTENT_TYPE)

    # -- documents ---------------------------------------------------------------------------

    @app.post("/api/documents", tags=["documents"], status_code=201,
              summary="Upload one or many Markdown documents (multipart field 'files')")
    def upload(principal: Write, files: Annotated[list[UploadFile], File(description="Markdown files")],
               category: Annotated[str | None, Form(description="Category (folder); default: frontmatter")] = None
               ) -> JSONResponse:
        kb = runtime.kb
        reports = []
        with actor_scope("api", principal.key_id):
            for upload in files:
                data = upload.file.read()
                report = kb.upload(data, upload.filename or "", category=category).to_dict()
                if report["document_id"]:
                    report["vectors"] = kb.indexes.vector_status(report["document_id"])
                reports.append(report)
        if len(reports) == 1 and reports[0]["status"] == "failed":
            r = reports[0]
            raise ApiError(_upload_status(r["error_code"]), r["error_code"] or "document_error", r["reason"])
        stored = any(r["status"] in ("added", "updated") for r in reports)
        return JSONResponse({"documents": reports}, status_code=201 if stored else 200)

    @app.get("/api/documents", tags=["documents"], summary="List documents, filtered and paginated")
    def list_documents(_: Read, category: str | None = None,
                       q: Annotated[str | None, Query(max_length=200, description="In path or title")] = None,
                       limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                       offset: Annotated[int, Query(ge=0)] = 0) -> dict[str, Any]:
        kb = runtime.kb
        docs = kb.list_documents(category=category)
        if q:
            needle = q.casefold()
            docs = [d for d in docs if needle in d.path.casefold() or needle in (d.title or "").casefold()]
        return {"total": len(docs), "limit": limit, "offset": offset,
                "documents": [document_view(d) for d in docs[offset: offset + limit]]}

    @app.get("/api/documents/{path:path}", tags=["documents"], summary="One document: metadata, warnings, chunks")
    def get_document(_: Read, path: str) -> dict[str, Any]:
        kb = runtime.kb
        doc = kb.get_document(path)
        return document_view(doc, with_chunks=True) | {"vectors": kb.indexes.vector_status(doc.id)}

    @app.put("/api/documents/{path:path}", tags=["documents"], summary="Replace a document's content")
    def replace_document(principal: Write, path: str,
                         file: Annotated[UploadFile, File(description="The new Markdown")]) -> dict[str, Any]:
        kb = runtime.kb
        with actor_scope("api", principal.key_id):
            report = kb.replace(path, file.file.read())
        if report.status == "failed":
            raise ApiError(_upload_status(report.error_code), report.error_code or "document_error",
                           report.reason or "failed")
        return report.to_dict() | {"vectors": kb.indexes.vector_status(report.document_id or "")}

    @app.delete("/api/documents/{path:path}", tags=["documents"], summary="Delete a document everywhere")
    def delete_document(principal: Write, path: str) -> dict[str, Any]:
        with actor_scope("api", principal.key_id):
            runtime.kb.delete(path)
        return {"deleted": path}

    @app.post("/api/reindex", tags=["documents"], summary="Re-sync every index with the database")
    def reindex(_: Write) -> dict[str, Any]:
        from kbseek.operations import reindex as rebuild

        return rebuild(runtime.kb)

    @app.get("/api/categories", tags=["documents"], summary="Categories and their document counts")
    def categories(_: Read) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for d in runtime.kb.list_documents():
            counts[d.category] = counts.get(d.category, 0) + 1
        return {"categories": [{"name": k, "documents": v} for k, v in sorted(counts.items())]}

    # -- retrieval ---------------------------------------------------------------------------

    @app.get("/api/search/similar", tags=["retrieval"], summary="Ranked chunks with their lane scores")
    def search(_: Read, query: Annotated[str, Query(min_length=1, max_length=2000)],
               top_k: Annotated[int, Query(ge=1, le=100)] = 10, category: str | None = None,
               policy: Annotated[str | None, Query(pattern="^(hybrid|dense|lexical)$")] = None,
               threshold: Annotated[float | None, Query(ge=-1, le=1)] = None) -> dict[str, Any]:
        return search_view(runtime.kb.search(query, top_k=top_k, category=category, policy=policy,
                                             threshold=threshold))

    @app.post("/api/lookup", tags=["retrieval"], summary="lookup_knowledge: levelled, deduplicated evidence")
    async def lookup(_: Read, request: Request,
                     format: Annotated[str, Query(pattern="^(json|text|legacy)$")] = "json",
                     explain: Annotated[bool, Query(description="json: add each lane's candidates and the fused "
                                                                "ranking")] = False) -> Response:
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "invalid_json", "the body is not valid JSON") from None
        except RecursionError:
            raise ApiError(400, "invalid_json", "the body nests too deep") from None
        if not isinstance(body, dict):
            raise ApiError(422, "invalid_request", "the body must be a JSON object of lookup_knowledge parameters")
        from starlette.concurrency import run_in_threadpool

        response = await run_in_threadpool(runtime.kb.lookup_knowledge, body)
        if format == "text":
            return PlainTextResponse(render_text(response))
        view = legacy_view(response) if format == "legacy" else response_view(response) | {"text": render_text(response)}
        if explain and format == "json":
            from kbseek.interfaces.console import explain_view

            view["explain"] = explain_view(response)
        return JSONResponse(view)

    # -- sessions and records ----------------------------------------------------------------

    @app.get("/api/sessions/{session_id}/trace", tags=["sessions"], summary="A session's diagnosis trace")
    def trace(_: Read, session_id: str) -> dict[str, Any]:
        return _jsonable(runtime.kb.trace(session_id))

    @app.get("/api/sessions/{session_id}/verify-summary", tags=["sessions"],
             summary="The bounded tool-trace summary for a verifier")
    def verify_summary(_: Read, session_id: str, limit: Annotated[int, Query(ge=200, le=20_000)] = 2000
                       ) -> dict[str, Any]:
        from kbseek.verifier import summarize

        return summarize(runtime.kb.trace(session_id), limit=limit)

    @app.get("/api/invocations", tags=["sessions"], summary="Recorded lookup_knowledge calls, newest last")
    def invocations(_: Read, session: str | None = None,
                    since: Annotated[str | None, Query(description="24h, 7d or an ISO date")] = None,
                    level: str | None = None, failed: bool = False,
                    limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> dict[str, Any]:
        from kbseek.interfaces.ops_cli import parse_since

        rows = runtime.kb.invocations.list(session_id=session, since=parse_since(since) if since else None,
                                           level=level, success=False if failed else None, limit=limit)
        return {"invocations": [_jsonable(r) for r in rows]}

    @app.get("/api/audit", tags=["sessions"], summary="The write audit: who changed which document and when")
    def audit(_: Read, path: str | None = None, since: str | None = None, action: str | None = None,
              limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> dict[str, Any]:
        from kbseek.interfaces.ops_cli import parse_since

        rows = runtime.kb.audit.list(path=path, since=parse_since(since) if since else None, action=action,
                                     limit=limit)
        return {"entries": [_jsonable(r) for r in rows]}


def _upload_status(error_code: str | None) -> int:
    return STATUS.get(error_code or "", 422)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
