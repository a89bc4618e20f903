"""What every HTTP request passes before a route reads a byte of its body.

``RequestGuard`` (outermost ASGI middleware), in this order:

1. one ``Authorization`` header at most (400 ``duplicate_header``): two could be read differently by two layers;
2. a ``Host`` this server answers to (421 ``host_not_allowed``), the guard against DNS rebinding: loopback names,
   IP addresses (an address cannot be rebound), the bind host, and ``allowed_hosts``;
3. for a request that changes state (any method but GET, HEAD and OPTIONS):

   - a browser ``Origin`` that is this server's own, loopback or in ``allowed_origins`` (403 ``forbidden_origin``;
     without ``Origin``, ``Sec-Fetch-Site: cross-site`` or ``same-site`` is refused the same way);
   - from another browser origin (loopback, ``allowed_origins``), a request a page could send without a CORS
     preflight (a form's or ``text/plain`` body, no ``Authorization`` nor ``X-Kbseek-Client`` header) is
     refused (403 ``simple_request``): such "simple" requests are how a page on another site writes blind;
   - a body that is JSON or ``multipart/form-data`` (415 ``unsupported_media_type``): a JSON route must not read
     JSON sent as ``text/plain``, which a page on any site may send;
   - the key the route needs, checked here so that an anonymous caller's body is never parsed (401/403);

   ``/mcp`` gets 1 and 2 here; ``McpGuard`` checks its origins and keys and answers in JSON-RPC.

Clients that are not browsers (curl, agents, the SDKs) send no ``Origin`` and pass 3 with a key when one is needed.
``BodyLimit`` then bounds the body (413), also when it comes chunked. Every response carries ``X-Request-Id``,
the id on the request's log lines.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import traceback
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from kbseek.interfaces.http.guard import ApiError, Keys, error_body, jsonrpc_error
from kbseek.observability.logs import request_scope
from kbseek.observability.redact import redact
from kbseek.settings import Settings

log = logging.getLogger("kbseek")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
CLIENT_HEADER = "x-kbseek-client"  # what kbseek's own pages send with every write
_BODY_TYPES = ("application/json", "multipart/form-data")


def host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port, lower-case.

    >>> host_name("KB.example.com:8000"), host_name("[::1]:8000"), host_name("127.0.0.1")
    ('kb.example.com', '::1', '127.0.0.1')
    """
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostNames:
    """The host names a server answers to.

    >>> names = HostNames(["kb.example.com", "*.corp.example"], bind_host="0.0.0.0")
    >>> [names.allows(h) for h in ("localhost:8000", "10.1.2.3", "kb.example.com", "a.corp.example", "evil.example")]
    [True, True, True, True, False]
    """

    def __init__(self, allowed: Sequence[str], *, bind_host: str | None = None) -> None:
        names = {n.strip().lower() for n in allowed if n.strip()}
        if bind_host and bind_host not in WILDCARD_BINDS:
            names.add(host_name(bind_host))
        self.any = "*" in names
        self.suffixes = tuple(n[1:] for n in names if n.startswith("*."))
        self.names = frozenset(n for n in names if not n.startswith("*")) | LOOPBACK_NAMES

    def allows(self, host: str) -> bool:
        name = host_name(host)
        return self.any or name in self.names or _is_address(name) or name.endswith(self.suffixes) if name else False


def origin_allowed(origin: str, *, host: str | None, allowed_origins: Sequence[str]) -> bool:
    """A browser ``Origin`` this server accepts writes from: its own, a loopback page, or a configured one.

    >>> origin_allowed("http://127.0.0.1:8000", host="127.0.0.1:8000", allowed_origins=[])
    True
    >>> [origin_allowed(o, host="kb:8000", allowed_origins=[]) for o in ("https://evil.example", "null")]
    [False, False]
    """
    if origin in allowed_origins:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    return parts.netloc == host or parts.hostname in LOOPBACK_NAMES


def _content_type(headers: dict[str, str]) -> str:
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length")
    return bool(headers.get("transfer-encoding")) or (length is not None and length.strip() not in ("", "0"))


AccessOf = Callable[[dict[str, Any]], str]  # "read" | "write": what a state-changing request's route needs


class RequestGuard:
    def __init__(
        self,
        app: Any,
        *,
        keys: Keys,
        hosts: HostNames,
        allowed_origins: Sequence[str],
        access_of: AccessOf,
        mcp_path: str = "/mcp",
    ) -> None:
        self.app, self.keys, self.hosts, self.access_of = app, keys, hosts, access_of
        self.allowed_origins, self.mcp_path = list(allowed_origins), mcp_path

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        jsonrpc = scope["path"] == self.mcp_path
        with request_scope() as request_id:
            started = False

            async def send_with_id(message: dict[str, Any]) -> None:
                nonlocal started
                if message["type"] == "http.response.start":
                    started = True
                    message = {
                        **message,
                        "headers": [*message.get("headers", []), (b"x-request-id", request_id.encode())],
                    }
                await send(message)

            try:
                self.check(scope)
            except ApiError as refusal:
                await send_error(send_with_id, refusal, jsonrpc=jsonrpc)
                return
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:  # a bug: logged here (credentials masked), answered as JSON, never re-raised
                log.error("unexpected error: %s", redact("".join(traceback.format_exception(exc))))
                if started:
                    raise  # a response half sent: the server cuts the connection
                await send_error(
                    send_with_id,
                    ApiError(
                        500,
                        "internal_error",
                        f"the server failed unexpectedly (details in the server log, request {request_id})",
                    ),
                    jsonrpc=jsonrpc,
                )

    def check(self, scope: dict[str, Any]) -> None:
        """Raise the ``ApiError`` that refuses this request, if one does."""
        raw = scope["headers"]
        authorizations = [v.decode("latin-1") for k, v in raw if k == b"authorization"]
        if len(authorizations) > 1:
            raise ApiError(
                400,
                "duplicate_header",
                f"the request has {len(authorizations)} Authorization headers",
                hint="send one 'Authorization: Bearer <key>'",
            )
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}
        host = headers.get("host")
        if host is not None and not self.hosts.allows(host):
            raise ApiError(
                421,
                "host_not_allowed",
                f"this server does not answer to the host name {host[:100]!r}",
                hint="use its address or a name in KBSEEK_ALLOWED_HOSTS (a guard against DNS rebinding)",
            )
        if scope["method"] in SAFE_METHODS or scope["path"] == self.mcp_path:
            return
        self._check_origin(headers, host)
        content_type = _content_type(headers)
        if _has_body(headers) and not (_is_json(content_type) or content_type == "multipart/form-data"):
            raise ApiError(
                415,
                "unsupported_media_type",
                f"a body of type {content_type or 'unspecified'!r} is not accepted here",
                hint="send JSON with 'Content-Type: application/json', or files as multipart/form-data",
            )
        self.keys.check(authorizations, write=self.access_of(scope) == "write")

    def _check_origin(self, headers: dict[str, str], host: str | None) -> None:
        origin = headers.get("origin")
        if origin is None:
            if headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site"):
                raise ApiError(
                    403,
                    "forbidden_origin",
                    "a page on another site may not change this server",
                    hint="set KBSEEK_ALLOWED_ORIGINS to accept a browser origin",
                )
            return
        if not origin_allowed(origin, host=host, allowed_origins=self.allowed_origins):
            raise ApiError(
                403,
                "forbidden_origin",
                f"origin {origin[:100]!r} may not change this server",
                hint="set KBSEEK_ALLOWED_ORIGINS to accept a browser origin",
            )
        same_origin = urlsplit(origin).netloc == host
        if (
            not same_origin
            and not _is_json(_content_type(headers))
            and "authorization" not in headers
            and CLIENT_HEADER not in headers
        ):
            raise ApiError(
                403,
                "simple_request",
                f"a write from origin {origin[:100]!r} without a JSON body needs "
                f"the header 'X-Kbseek-Client' or 'Authorization'",
                hint="a page on another origin may write only with a request a browser preflights",
            )


class McpGuard:
    """The MCP endpoint under the read-key rule, refusing browser requests from other origins; refusals are
    JSON-RPC errors. A GET (a stream for server-initiated messages) is refused with 405, as the protocol allows:
    the server is stateless and never sends one, so an open stream would only hold a connection.

    A class, not a function: Starlette routes an object to ASGI, a function to request-response."""

    def __init__(self, app: Any, settings: Settings, keys: Keys) -> None:
        self.app, self.settings, self.keys = app, settings, keys

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            origin = headers.get("origin")
            try:
                if origin and not origin_allowed(
                    origin, host=headers.get("host"), allowed_origins=self.settings.allowed_origins
                ):
                    raise ApiError(403, "forbidden_origin", f"origin {origin[:100]!r} may not use /mcp")
                self.keys.check(
                    [v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"], write=False
                )
                if scope["method"] == "GET":
                    raise ApiError(
                        405,
                        "method_not_allowed",
                        "this MCP server is stateless: it opens no stream for server messages",
                        hint="POST JSON-RPC requests",
                        headers={"Allow": "POST"},
                    )
            except ApiError as refusal:
                await send_error(send, refusal, jsonrpc=True)
                return
        await self.app(scope, receive, send)


async def send_error(send: Any, error: ApiError, *, jsonrpc: bool = False) -> None:
    """``error`` as the API's JSON error body (or a JSON-RPC error, for ``/mcp``), sent straight to ASGI."""
    body = json.dumps(jsonrpc_error(error) if jsonrpc else error_body(error.code, error.message, error.hint)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (error.headers or {}).items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuses bodies over ``max_bytes`` with 413: by Content-Length up front, and by counting while streaming
    (a chunked body has no length): the 413 is sent at the first byte over, and whatever the app then makes of the
    cut body (a parser's 400) is dropped."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await send_error(
                send,
                ApiError(
                    413, "too_large", f"the request body is {int(length):,} bytes, over the limit of {self.max_bytes:,}"
                ),
            )
            return
        seen = 0
        started = refused = False

        async def counted() -> dict[str, Any]:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    if not started:
                        await send_error(
                            send,
                            ApiError(
                                413, "too_large", f"the request body is over the limit of {self.max_bytes:,} bytes"
                            ),
                        )
                    raise _TooLarge()
            return message

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            if refused:  # the 413 is the answer
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracking_send)
        except _TooLarge:
            pass


class _TooLarge(Exception):
    pass
