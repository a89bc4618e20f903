"""Every error of the REST API as ``{"error": {"code", "message", "hint"}}``, with nothing internal in it.

A failure inside the server (storage, database, embedding server, configuration) is answered with a clean
sentence and the request id; its details (SQL text, file paths, URLs with credentials masked) go to the log
line with that id. Hints written for the command line name REST routes here. (An unexpected exception is
answered by ``RequestGuard``: 500 ``internal_error``, its traceback in the log.)
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from kbseek.errors import INTERNAL_FAILURES, KbseekError, edge_hint, public_message
from kbseek.interfaces.http.guard import ApiError, error_body, status_of
from kbseek.observability.logs import current_request_id
from kbseek.observability.redact import redact

log = logging.getLogger("kbseek")


def clean(code: str, message: str) -> str:
    """The message a client gets for ``code``; a failure inside the server is logged here with its details.

    >>> clean("not_found", "no document 'x.md'")
    "no document 'x.md'"
    """
    if code in INTERNAL_FAILURES:
        log.warning("%s: %s", code, redact(message))
    return public_message(code, message, current_request_id())


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(KbseekError)
    async def kbseek_error(_: Request, exc: KbseekError) -> JSONResponse:
        return JSONResponse(
            error_body(exc.code, clean(exc.code, exc.message), edge_hint(exc.hint, "rest")), status_code=status_of(exc)
        )

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:  # raised by the edge itself: already clean
        return JSONResponse(
            error_body(exc.code, exc.message, edge_hint(exc.hint, "rest")), status_code=exc.status, headers=exc.headers
        )

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
        log.warning("database unavailable: %s", redact(str(exc)))
        return JSONResponse(
            error_body(
                "database_unavailable",
                "the database is unavailable; retry shortly (details "
                f"in the server log, request {current_request_id()})",
                "see GET /ready",
            ),
            status_code=503,
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers)
