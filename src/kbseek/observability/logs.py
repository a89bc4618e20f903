"""Request ids, the acting principal, and logging: every line of one operation carries ``[request id]``."""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import uuid
from collections.abc import Iterator

from kbseek.core.modes import LOG_FORMATS

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("kbseek_request_id", default="-")
_actor: contextvars.ContextVar[tuple[str, str | None]] = contextvars.ContextVar("kbseek_actor", default=("local", None))
logger = logging.getLogger("kbseek")
# LogRecord attributes that are not the caller's ``extra=`` fields
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "request_id"}


def new_request_id() -> str:
    """A short random id (``a1b2c3d4``) that every log line of one request carries."""
    return uuid.uuid4().hex[:8]


def current_request_id() -> str:
    return _request_id.get()


@contextlib.contextmanager
def request_scope(request_id: str | None = None) -> Iterator[str]:
    """Run a block under a request id (a new one unless given; nested scopes keep the outer)."""
    if request_id is None and _request_id.get() != "-":
        yield _request_id.get()
        return
    token = _request_id.set(request_id or new_request_id())
    try:
        yield _request_id.get()
    finally:
        _request_id.reset(token)


def current_actor() -> tuple[str, str | None]:
    """Who is writing: ``(actor, key id)``, e.g. ``("cli:alice", None)`` or ``("api", "k-3fa2c1d0")``."""
    return _actor.get()


@contextlib.contextmanager
def actor_scope(actor: str, key_id: str | None = None) -> Iterator[None]:
    """Attribute the writes of a block (the write audit) to ``actor`` and an API key's id (never the key)."""
    token = _actor.set((actor, key_id))
    try:
        yield
    finally:
        _actor.reset(token)


def set_process_actor(actor: str) -> None:
    """The default actor of this process (the CLI's ``cli:<user>``); scopes still override it."""
    _actor.set((actor, None))


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, request id, message, and the ``extra=`` fields.

    >>> record = logging.LogRecord("kbseek", logging.INFO, "", 0, "查询完成: %s", ("ok",), None)
    >>> record.request_id, record.total_ms = "a1b2c3d4", 5.0
    >>> json.loads(JsonFormatter().format(record))["message"], json.loads(JsonFormatter().format(record))["total_ms"]
    ('查询完成: ok', 5.0)
    """

    def format(self, record: logging.LogRecord) -> str:
        extras = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        entry = extras | {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "request_id": getattr(record, "request_id", "-"),
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str = "WARNING", fmt: str = "text") -> None:
    """Log ``kbseek`` records to stderr, readable (``time level [request id] message``) or as JSON lines;
    idempotent (a second call changes level and format)."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(LOG_FORMATS)}")
    handler = next((h for h in logger.handlers if getattr(h, "_kbseek", False)), None)
    if handler is None:
        handler = logging.StreamHandler()
        handler._kbseek = True  # type: ignore[attr-defined]
        handler.addFilter(_RequestIdFilter())
        logger.addHandler(handler)
        logger.propagate = False
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s [%(request_id)s] %(message)s")
    )
    logger.setLevel(level)
