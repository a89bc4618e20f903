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
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from kbseek.errors import KbseekError, http_status
from kbseek.interfaces.http import errors as api_errors
from kbseek.lookup.render import legacy_view, render_text, response_view
from kbseek.interfaces.http.guard import ApiError, Keys, McpGuard, Principal, error_body, reader, writer
from kbseek.interfaces.http.request_guard import BodyLimit, HostNames, RequestGuard
from kbseek.lookup.views import document_view, search_view
from kbseek.observability.logs import actor_scope, configure_logging
from kbseek.observability.redact import redact
from kbseek.settings import Settings
from kbseek.observability.metrics import CONTENT_TYPE
from kbseek.core.modes import RecallPolicy

API_VERSION = "1"
log = logging.getLogger("kbseek")


class Runtime:
    """The knowledge base of one app, opened in the background; ``kb`` raises 503 until it is ready."""

    def __init__(self, settings: Settings, kb: Any = None) -> None:
        self.settings = settings
        self.keys = Keys(settings)
        self._kb = kb
        self.error: str | None = None  # why it could not be opened, for a 503 body
        self.reason: str | None = None  # the same for /ready, with the failure's (masked) details
        self.started = time.monotonic()
        self.ready_after_s: float | None = 0.0 if kb is not None else None
        self.owns_kb = kb is None

    def open(self) -> None:
        from kbseek.service import KnowledgeBase

        try:
            self._kb = KnowledgeBase.open(self.settings)
            self.ready_after_s = round(time.monotonic() - self.started, 3)
        except Exception as exc:  # reported by /ready, never a silent half-start
            detail = f"{type(exc).__name__}: {redact(str(exc))}"
            log.error("the knowledge base could not be opened: %s", detail)
            # /ready (no key needed) says what failed, credentials masked and the data home's path left out;
            # every other route answers a clean 503
            for home in {str(self.settings.home.resolve()), str(self.settings.home)}:
                detail = detail.replace(home, "<home>")
            self.reason = detail
            code = exc.code if isinstance(exc, KbseekError) else "startup_error"
            self.error = f"the knowledge base could not be opened ({code})"

    @property
    def kb(self) -> Any:
        if self._kb is None:
            raise ApiError(503, "starting" if self.error is None else "unavailable",
                           self.error or "the knowledge base is still loading",
                           hint="see GET /ready" + ("" if self.error is None else " and the server log"))
        return self._kb

    def close(self) -> None:
        if self._kb is not None and self.owns_kb:
            self._kb.close()


def create_app(settings: Settings | None = None, *, kb: Any = None, mcp: bool = True,
               bind_host: str | None = None) -> FastAPI:
    """The API over ``settings`` (or over an already open ``kb``, e.g. in tests); ``/mcp`` when ``mcp``.
    ``bind_host``: the address served (``kbseek serve --host``), a host name the server then answers to."""
    settings = settings or (kb.settings if kb is not None else Settings())
    if "vectors_in_background" not in settings.model_fields_set:  # a served upload answers before its vectors
        settings = settings.model_copy(update={"vectors_in_background": True})
    configure_logging(settings.log_level, settings.log_format)
    runtime = Runtime(settings, kb)
    mcp_app = None
    if mcp:
        from kbseek.interfaces.mcp_server import streamable_http_app

        # the SDK's Host and Origin checks are off: RequestGuard checks Host on every route, McpGuard the Origin
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

    app = FastAPI(title="kbseek", version=API_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Knowledge retrieval for AIOps agents: documents, lookup_knowledge, traces, metrics.")
    app.state.runtime = runtime
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(RequestGuard, keys=runtime.keys, hosts=HostNames(settings.allowed_hosts, bind_host=bind_host),
                       allowed_origins=settings.allowed_origins, access_of=lambda scope: access_of(app, scope))
    api_errors.install(app)
    _routes(app, runtime)
    if mcp_app is not None:  # served at /mcp exactly (no redirect to /mcp/, which some clients do not follow)
        endpoint = next(r for r in mcp_app.routes if isinstance(r, Route) and r.path == "/mcp").endpoint
        app.router.routes.append(Route("/mcp", endpoint=McpGuard(endpoint, settings, runtime.keys),
                                       include_in_schema=False))
    from kbseek.interfaces.http.docs import register_docs
    from kbseek.interfaces.http.console import register_console
    register_docs(app)
    register_console(app, runtime)
    return app


def access_of(app: FastAPI, scope: dict[str, Any]) -> str:
    """What the route of a request needs, "read" or "write", from its key dependency; "write" when no route
    matches (an unknown route must not be a way around the key)."""
    from starlette.routing import Match

    for route in app.router.routes:
        dependant = getattr(route, "dependant", None)
        if dependant is None or route.matches(scope)[0] != Match.FULL:
            continue
        needs = {getattr(d.call, "kbseek_access", None) for d in dependant.dependencies}
        return "read" if needs == {"read"} else "write"
    return "write"


def _routes(app: FastAPI, runtime: Runtime) -> None:
    Read = Annotated[Principal, Depends(reader(runtime.keys))]
    Write = Annotated[Principal, Depends(writer(runtime.keys))]

    @app.get("/health", tags=["operations"], summary="Liveness: the process answers")
    def health() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/ready", tags=["operations"], summary="Readiness: database, vector store and indexes loaded")
    def ready() -> JSONResponse:
        checks: dict[str, Any] = {}
        kb = runtime._kb
        if kb is None:
            body = {"ready": False, "reason": runtime.reason or "starting", "checks": checks}
            return JSONResponse(body, status_code=503)
        try:
            checks["database"] = {"ok": True, "documents": kb.repository.count()}
        except Exception as exc:  # /ready needs no key: the class only, the details in the log
            log.warning("readiness: the database check failed: %s", redact(str(exc)))
            checks["database"] = {"ok": False, "error": type(exc).__name__}
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
              summary="Upload one or many Markdown documents (multipart field 'files')",
              description="Each file gets its report. 201: all stored; 200: nothing new (all unchanged); 207: some "
                          "stored, some failed (see each report's status); when every file failed, the error of "
                          "their shared code (e.g. 413) or 422, and for several files their reports under "
                          "'documents'.",
              responses={207: {"description": "Some files stored, some failed"},
                         422: {"description": "No file stored"}})
    def upload(principal: Write, files: Annotated[list[UploadFile], File(description="Markdown files")],
               category: Annotated[str | None, Form(description="Category (folder); default: frontmatter")] = None
               ) -> JSONResponse:
        kb = runtime.kb
        reports = []
        with actor_scope("api", principal.key_id):
            for upload in files:
                report = _report(kb, kb.upload(upload.file.read(), upload.filename or "", category=category))
                reports.append(report)
        failed = [r for r in reports if r["status"] == "failed"]
        if failed and len(failed) == len(reports):
            codes = {r["error_code"] or "document_error" for r in failed}
            code = codes.pop() if len(codes) == 1 else "documents_failed"
            if len(failed) == 1:  # one file: its error, as for any request
                raise ApiError(_upload_status(code), code, failed[0]["reason"])
            body = error_body(code, f"none of the {len(failed)} files was stored",
                              "each file's report is under 'documents'") | {"documents": reports}
            return JSONResponse(body, status_code=_upload_status(code))
        stored = any(r["status"] in ("added", "updated") for r in reports)
        return JSONResponse({"documents": reports}, status_code=207 if failed else 201 if stored else 200)

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

    @app.put("/api/documents/{path:path}", tags=["documents"], summary="Replace a document's content",
             description="The new Markdown in the multipart field 'files' (as for uploads) or 'file'; one file.")
    def replace_document(principal: Write, path: str,
                         files: Annotated[list[UploadFile] | None, File(description="The new Markdown (one file)")]
                         = None,
                         file: Annotated[UploadFile | None, File(description="The same, under its older name")]
                         = None) -> dict[str, Any]:
        given = [*(files or []), *([file] if file is not None else [])]
        if len(given) != 1:
            raise ApiError(422, "invalid_request", f"files: send exactly one file, not {len(given)}",
                           hint="multipart field 'files' (or 'file') with the new Markdown")
        kb = runtime.kb
        with actor_scope("api", principal.key_id):
            report = _report(kb, kb.replace(path, given[0].file.read()))
        if report["status"] == "failed":
            raise ApiError(_upload_status(report["error_code"]), report["error_code"] or "document_error",
                           report["reason"] or "failed")
        return report

    @app.delete("/api/documents/{path:path}", tags=["documents"], summary="Delete a document everywhere")
    def delete_document(principal: Write, path: str) -> dict[str, Any]:
        with actor_scope("api", principal.key_id):
            runtime.kb.delete(path)
        return {"deleted": path}

    @app.post("/api/reindex", tags=["documents"], summary="Re-sync every index with the database")
    def reindex(_: Write) -> dict[str, Any]:
        from kbseek.maintenance.reindex import reindex as rebuild

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
               policy: RecallPolicy | None = None,
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
            from kbseek.interfaces.http.console import explain_view

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
        from kbseek.observability.trace_summary import summarize

        return summarize(runtime.kb.trace(session_id), limit=limit)

    @app.get("/api/invocations", tags=["sessions"], summary="Recorded lookup_knowledge calls, newest last")
    def invocations(_: Read, session: str | None = None,
                    since: Annotated[str | None, Query(description="24h, 7d or an ISO date")] = None,
                    level: str | None = None, failed: bool = False,
                    limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> dict[str, Any]:
        rows = runtime.kb.invocations.list(session_id=session, since=_since(since), level=level,
                                           success=False if failed else None, limit=limit)
        return {"invocations": [_jsonable(r) for r in rows]}

    @app.get("/api/audit", tags=["sessions"], summary="The write audit: who changed which document and when")
    def audit(_: Read, path: str | None = None,
              since: Annotated[str | None, Query(description="24h, 7d or an ISO date")] = None,
              action: str | None = None, limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> dict[str, Any]:
        rows = runtime.kb.audit.list(path=path, since=_since(since), action=action, limit=limit)
        return {"entries": [_jsonable(r) for r in rows]}


def _upload_status(error_code: str | None) -> int:
    return http_status(error_code)


def _report(kb: Any, report: Any) -> dict[str, Any]:
    """A file's report as the API shows it: its vectors' state, and no internals in a failure's reason."""
    shown = report.to_dict()
    if shown["document_id"]:
        shown["vectors"] = kb.indexes.vector_status(shown["document_id"])
    if shown["status"] == "failed" and shown["error_code"]:
        shown["reason"] = api_errors.clean(shown["error_code"], shown["reason"] or "")
    return shown


def _since(text: str | None) -> Any:
    """The ``since`` parameter as a time, or 422 naming it."""
    from datetime import datetime, timezone

    from kbseek.core.spans import parse_since

    if not text:
        return None
    try:
        return parse_since(text, datetime.now(timezone.utc))
    except KbseekError as exc:
        raise ApiError(422, "invalid_request", f"query.since: {text[:100]!r} is not a span like 24h or 7d back from "
                       "now, nor an ISO date", hint=exc.hint) from None


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
