"""Whether a vector server answers, and when one that went away is tried again.

A server that stops answering mid-run is not asked again at every call: calls fail at once (the lexical lanes
answer lookups meanwhile, vectors written meanwhile stay pending) until the next try is due, after 1 s, 2 s, 4 s …
at most ``cap`` seconds. One caller at a time makes that try (``claim``); the others keep failing fast. Going away
and coming back are logged once each, with how long it lasted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("kbseek")


class ServerAway:
    """
    >>> now = [100.0]
    >>> away = ServerAway("http://h:19530", first=1, cap=4, clock=lambda: now[0])
    >>> away.reason is None, away.retry_in()
    (True, None)
    >>> away.went("refused"); away.retry_in(), away.claim()
    (1.0, False)
    >>> now[0] = 101.0; away.claim(), away.claim()
    (True, False)
    >>> away.went("refused"); away.went("refused"); away.retry_in()
    4.0
    >>> now[0] = 105.0; away.claim()
    True
    >>> away.back(); away.reason is None, away.retry_in()
    (True, None)
    """

    def __init__(
        self, uri: str, *, first: float = 1.0, cap: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.uri, self._first, self._cap, self._clock = uri, first, cap, clock
        self._lock = threading.Lock()
        self.reason: str | None = None  # why the server is taken to be away; None while it answers
        self._since = 0.0
        self._delay = first
        self._next = 0.0
        self._trying = False

    def retry_in(self) -> float | None:
        """Seconds until the server is tried again; ``None`` while it answers."""
        with self._lock:
            if self.reason is None:
                return None
            return max(0.0, self._next - self._clock())

    def went(self, reason: str) -> None:
        """A call or a try failed: the next try is due after the current delay, which then doubles (capped)."""
        with self._lock:
            now = self._clock()
            if self.reason is None:
                self._since = now
                log.warning(
                    "vector store: Milvus at %s went away (%s); lookups use the lexical lanes and new vectors wait "
                    "until it answers again (tried after %.0f s, then at most every %.0f s)",
                    self.uri,
                    reason,
                    self._delay,
                    self._cap,
                )
            self.reason = reason
            self._next = now + self._delay
            self._delay = min(self._delay * 2, self._cap)
            self._trying = False

    def claim(self) -> bool:
        """Whether the caller is to try the server now (due, and nobody else trying); it then reports ``went`` or
        ``back``."""
        with self._lock:
            if self.reason is None or self._trying or self._clock() < self._next:
                return False
            self._trying = True
            return True

    def back(self) -> None:
        with self._lock:
            if self.reason is not None:
                log.warning(
                    "vector store: Milvus at %s answers again after %.1f s; the vectors left pending are caught up",
                    self.uri,
                    self._clock() - self._since,
                )
            self.reason, self._delay, self._trying = None, self._first, False

    def message(self) -> str:
        with self._lock:
            gone = self._clock() - self._since
            due = max(0.0, self._next - self._clock())
            return f"Milvus at {self.uri} unreachable for {gone:.0f} s ({self.reason}); next try in {due:.0f} s"
