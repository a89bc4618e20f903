"""Keys: who may read and who may write, and errors as stable JSON.

Keys arrive as ``Authorization: Bearer …`` (one such header; two are refused). ``api_key`` guards every write;
``read_api_key``, when set, guards reads too (a lookup is a read; the write key also reads). Setting a key closes
what it does not open: with ``read_api_key`` alone, writes over the API are closed (403 ``writes_disabled``; the
CLI still writes on the server's machine). Keys are compared in constant time, against every key (no early exit).

A key is known by its id only (logs, the write audit): ``k-`` + 8 hex of an HMAC-SHA-256 of the key under a secret
kept in the data home (``key-id.secret``, created on first use, mode 0600). The id is stable across restarts, so
the audit stays readable, and without the secret an id cannot be matched against guessed keys.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbseek.errors import KbseekError
from kbseek.settings import Settings

KEY_ID_SECRET = "key-id.secret"
JSONRPC_UNAUTHORIZED, JSONRPC_INVALID_REQUEST = -32001, -32600


class ApiError(Exception):
    def __init__(
        self, status: int, code: str, message: str, hint: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.hint, self.headers = status, code, message, hint, headers


def error_body(code: str, message: str, hint: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "hint": hint}}


def jsonrpc_error(error: ApiError) -> dict[str, Any]:
    """A refusal of an MCP request as a JSON-RPC error, which MCP clients show (a bare HTTP error they do not).

    >>> jsonrpc_error(ApiError(401, "unauthorized", "needs a key", "send it"))["error"]["message"]
    'needs a key (hint: send it)'
    """
    code = JSONRPC_UNAUTHORIZED if error.status in (401, 403) else JSONRPC_INVALID_REQUEST
    message = error.message + (f" (hint: {error.hint})" if error.hint else "")
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": code, "message": message, "data": {"code": error.code, "hint": error.hint}},
    }


def status_of(exc: KbseekError) -> int:
    return exc.http_status


def key_id(key: str, secret: bytes) -> str:
    """A key's id under the data home's secret.

    >>> key_id("s3cret", b"one home"), key_id("s3cret", b"another home")
    ('k-0ddb37af', 'k-8fedf642')
    """
    return "k-" + hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()[:8]


def key_id_secret(home: Path) -> bytes:
    """The data home's secret for key ids, created (mode 0600) when there is none yet.

    Two processes creating it at once agree: each writes its own temporary file and links it into place, and the
    one that finds the name taken reads the winner's.
    """
    path = home / KEY_ID_SECRET
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        tmp = home / f".{KEY_ID_SECRET}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as out:
                out.write(secrets.token_hex(32) + "\n")
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_bytes().strip()


@dataclass(frozen=True, slots=True)
class Principal:
    key_id: str | None  # None: no key was needed


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class Keys:
    """The keys of one server: ``check`` answers who the caller is, or raises ``ApiError`` 400/401/403."""

    def __init__(self, settings: Settings) -> None:
        self.write_key, self.read_key, self.home = settings.api_key, settings.read_api_key, settings.home
        self._secret: bytes | None = None
        self._lock = threading.Lock()

    @property
    def writes_closed(self) -> bool:
        """Only a read key is set: nobody writes over the API."""
        return bool(self.read_key) and not self.write_key

    def key_id(self, key: str) -> str:
        with self._lock:
            if self._secret is None:
                self._secret = key_id_secret(self.home)
        return key_id(key, self._secret)

    def check(self, authorizations: list[str], *, write: bool) -> Principal:
        """The caller's principal from its ``Authorization`` header values (one at most)."""
        if len(authorizations) > 1:
            raise ApiError(
                400,
                "duplicate_header",
                f"the request has {len(authorizations)} Authorization headers",
                hint="send one 'Authorization: Bearer <key>'",
            )
        if write and self.writes_closed:
            raise ApiError(
                403,
                "writes_disabled",
                "writes over the API are closed on this server: it has a read "
                "key (KBSEEK_READ_API_KEY) and no write key",
                hint="set KBSEEK_API_KEY to allow writes",
            )
        needed = [self.write_key] if write else [k for k in (self.read_key, self.write_key) if k]
        token = _bearer(authorizations[0] if authorizations else None)
        if not (self.write_key if write else self.read_key):
            # an open endpoint still attributes a valid key to its owner
            return Principal(self.key_id(token) if token and _matches(token, needed) else None)
        if token is None:
            raise ApiError(
                401,
                "unauthorized",
                "this endpoint needs 'Authorization: Bearer <key>'",
                hint="the write key (KBSEEK_API_KEY)" if write else "the read or the write key",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not _matches(token, needed):
            raise ApiError(
                403,
                "forbidden",
                "the key is not valid for this endpoint",
                hint="writes need the write key" if write else None,
            )
        return Principal(self.key_id(token))

    def describe_writes(self) -> str:
        """What ``kbseek serve`` says about writes at start-up."""
        if self.write_key:
            return "writes need the write key"
        if self.writes_closed:
            return "writes over the API are closed (a read key and no write key): set KBSEEK_API_KEY to open them"
        return "writes are open: set KBSEEK_API_KEY to require a key"


def _matches(token: str, keys: list[str]) -> bool:
    results = [hmac.compare_digest(token.encode(), k.encode()) for k in keys]  # every key compared, no early exit
    return any(results)
