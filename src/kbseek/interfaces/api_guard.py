"""What stands in front of the API: keys, origins, body size, and errors as stable JSON.

Keys arrive as ``Authorization: Bearer …``. ``api_key`` guards every write; ``read_api_key``, when set, guards
reads too (a lookup is a read; the write key also reads). Keys are compared in constant time and only their id
(``k-`` + 8 hex of their SHA-256) is ever logged or recorded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request

from kbseek.errors import KbseekError
from kbseek.settings import Settings

# stable error code -> HTTP status
STATUS = {"not_found": 404, "unsafe_path": 400, "too_large": 413, "invalid_request": 422, "invalid_query": 422,
          "document_error": 422, "frontmatter_error": 422, "invalid_option": 422, "config_error": 500,
          "storage_error": 503, "storage_full": 507, "conflict": 409, "embedding_error": 503}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, hint: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.hint, self.headers = status, code, message, hint, headers


def error_body(code: str, message: str, hint: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "hint": hint}}


def status_of(exc: KbseekError) -> int:
    return STATUS.get(exc.code, 400)


def key_id(key: str) -> str:
    """
    >>> key_id("s3cret")
    'k-1ec1c26b'
    """
    return "k-" + hashlib.sha256(key.encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True)
class Principal:
    key_id: str | None  # None: no key was needed


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def check(settings: Settings, header: str | None, *, write: bool) -> Principal:
    """The caller's principal, or ApiError 401/403."""
    needed = [settings.api_key] if write else [k for k in (settings.read_api_key, settings.api_key) if k]
    if write and not settings.api_key or not write and not settings.read_api_key:
        token = _bearer(header)
        # an open endpoint still attributes a valid key to its owner
        return Principal(key_id(token) if token and any(hmac.compare_digest(token.encode(), k.encode())
                                                       for k in needed) else None)
    token = _bearer(header)
    if token is None:
        raise ApiError(401, "unauthorized", "this endpoint needs 'Authorization: Bearer <key>'",
                       headers={"WWW-Authenticate": "Bearer"})
    # compare with every key (no early exit), so timing does not tell which one was close
    matches = [hmac.compare_digest(token.encode(), k.encode()) for k in needed]
    if not any(matches):
        raise ApiError(403, "forbidden", "the key is not valid for this endpoint")
    return Principal(key_id(token))


def reader(settings: Settings) -> Callable[[Request], Principal]:
    def dependency(request: Request) -> Principal:
        return check(settings, request.headers.get("authorization"), write=False)
    return dependency


def writer(settings: Settings) -> Callable[[Request], Principal]:
    def dependency(request: Request) -> Principal:
        return check(settings, request.headers.get("authorization"), write=True)
    return dependency


async def _send_error(send: Any, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(error_body(code, message)).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuses bodies over ``max_bytes`` with 413: by Content-Length up front, and by counting while streaming."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await _send_error(send, 413, "too_large", f"the request body is {int(length):,} bytes, over the limit "
                                                      f"of {self.max_bytes:,}")
            return
        seen = 0
        started = False

        async def counted() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracking_send)
        except _TooLarge:
            if not started:
                await _send_error(send, 413, "too_large", f"the request body is over the limit of {self.max_bytes:,} bytes")


class _TooLarge(Exception):
    pass


def _origin_allowed(origin: str, settings: Settings, host: str | None) -> bool:
    parts = urlsplit(origin)
    if origin in settings.allowed_origins:
        return True
    # same origin as the request, or a loopback page (a local agent UI); anything else could be DNS rebinding
    return bool(parts.hostname) and (parts.netloc == host or parts.hostname in ("localhost", "127.0.0.1", "::1"))


class McpGuard:
    """The MCP endpoint under the read-key rule, refusing browser requests from other origins.

    A class, not a function: Starlette routes an object to ASGI, a function to request-response."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            origin = headers.get("origin")
            if origin and not _origin_allowed(origin, self.settings, headers.get("host")):
                await _send_error(send, 403, "forbidden_origin", f"origin {origin!r} may not use /mcp")
                return
            try:
                check(self.settings, headers.get("authorization"), write=False)
            except ApiError as exc:
                await _send_error(send, exc.status, exc.code, exc.message, exc.headers)
                return
        await self.app(scope, receive, send)
