"""What a route is handed: the app's ``Runtime`` (its settings, its keys, the knowledge base it opens in the
background) and the dependencies that give a route its caller and its knowledge base.

- ``Read`` / ``Write``: the caller's ``Principal`` under the key the route needs (a read or the write key, when
  the server has one); ``access_of`` in ``app.py`` reads which one a route declares, so that ``RequestGuard``
  checks the key before a body is read;
- ``Kb``: the ``KnowledgeBase``, or 503 (``starting``, or ``unavailable`` when it could not be opened) until
  it is;
- ``CurrentRuntime``: the runtime itself, for a route that answers while the knowledge base loads (``/ready``);
- ``AppSettings``: the app's settings (the console's files: golden cases, reports).
"""

from __future__ import annotations

import logging
import time
from typing import Annotated

from fastapi import Depends, Request

from kbseek.errors import KbseekError
from kbseek.interfaces.http.guard import ApiError, Keys, Principal
from kbseek.maintenance.live import Live
from kbseek.observability.redact import redact
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

log = logging.getLogger("kbseek")


class Runtime:
    """The knowledge base of one app, opened in the background; ``kb`` raises 503 until it is ready."""

    def __init__(self, settings: Settings, kb: KnowledgeBase | None = None) -> None:
        self.settings = settings
        self.keys = Keys(settings)
        self._kb = kb
        self.error: str | None = None  # why it could not be opened, for a 503 body
        self.reason: str | None = None  # the same for /ready, with the failure's (masked) details
        self.started = time.monotonic()
        self.ready_after_s: float | None = 0.0 if kb is not None else None
        self.owns_kb = kb is None
        self._live: Live | None = None  # the watched folders and Git sources, once the knowledge base is open

    def open(self) -> None:
        try:
            self._kb = KnowledgeBase.open(self.settings)
            self.ready_after_s = round(time.monotonic() - self.started, 3)
            self.start_live()
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
    def opened(self) -> KnowledgeBase | None:
        """The knowledge base once it is open, else ``None`` (never raises)."""
        return self._kb

    @property
    def kb(self) -> KnowledgeBase:
        if self._kb is None:
            raise ApiError(
                503,
                "starting" if self.error is None else "unavailable",
                self.error or "the knowledge base is still loading",
                hint="see GET /ready" + ("" if self.error is None else " and the server log"),
            )
        return self._kb

    def start_live(self) -> None:
        """Start watching the folders and syncing the Git sources the settings name (in background threads)."""
        if self._kb is not None and self._live is None:
            self._live = Live(self._kb, self.settings).start()

    @property
    def live(self) -> Live:
        """What runs beside the requests, or 503 until the knowledge base is open."""
        self.kb  # noqa: B018 - raises the 503 while it loads
        if self._live is None:  # the moment between the two
            raise ApiError(503, "starting", "the knowledge base is still loading", hint="see GET /ready")
        return self._live

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._kb is not None and self.owns_kb:
            self._kb.close()


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def read_key(request: Request) -> Principal:
    return runtime_of(request).keys.check(request.headers.getlist("authorization"), write=False)


def write_key(request: Request) -> Principal:
    return runtime_of(request).keys.check(request.headers.getlist("authorization"), write=True)


read_key.kbseek_access = "read"  # type: ignore[attr-defined]  # read by app.access_of for the request guard
write_key.kbseek_access = "write"  # type: ignore[attr-defined]


def settings_of(request: Request) -> Settings:
    return runtime_of(request).settings


async def knowledge_base(request: Request) -> KnowledgeBase:
    """The app's knowledge base, or ``ApiError`` 503 while it loads (async: it never blocks, so no thread)."""
    return runtime_of(request).kb


Read = Annotated[Principal, Depends(read_key)]
Write = Annotated[Principal, Depends(write_key)]
Kb = Annotated[KnowledgeBase, Depends(knowledge_base)]
CurrentRuntime = Annotated[Runtime, Depends(runtime_of)]
AppSettings = Annotated[Settings, Depends(settings_of)]
