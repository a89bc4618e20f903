"""Request ids and logging: every operation's log lines carry ``[request id]``."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import uuid
from collections.abc import Iterator

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("kbseek_request_id", default="-")
logger = logging.getLogger("kbseek")


def new_request_id() -> str:
    """A short random id, like the seeds' ``[a1b2c3d4]``."""
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


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get()
        return True


def configure_logging(level: str = "WARNING") -> None:
    """Log ``kbseek`` records to stderr as ``time level [request id] message``; idempotent."""
    handler = next((h for h in logger.handlers if getattr(h, "_kbseek", False)), None)
    if handler is None:
        handler = logging.StreamHandler()
        handler._kbseek = True  # type: ignore[attr-defined]
        handler.addFilter(_RequestIdFilter())
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s [%(request_id)s] %(message)s")
        )
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level)
