"""The Git repositories a server syncs by itself (the ``git_sources`` setting): each once at start-up, then every
``every`` seconds, and when asked (``POST /api/sync/git``, the console's "sync now").

Only configured sources are synced, named by their ``name`` (or their place in the list): a request never hands
a URL to git. One source syncs once at a time: a request while it runs gets ``WriteConflictError`` (HTTP 409) at
once rather than queueing behind it, and a periodic run that finds it busy skips that turn. Each source keeps its
last result (commit, time, counts, error) for ``GET /api/sync/git``; what is shown of a repository or an error
is masked (``observability.redact``), so a credentialed URL is never in a response or a log line.

The schedule runs in one background thread, its clock injectable: a test moves the clock and calls :meth:`wake`
instead of waiting for wall-clock time.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbseek.errors import KbseekError, NotFoundError, WriteConflictError
from kbseek.home.gitsync import GitSyncReport
from kbseek.observability.logs import actor_scope
from kbseek.observability.redact import redact
from kbseek.settings import GitSource

log = logging.getLogger("kbseek")
SyncFunction = Callable[[GitSource], GitSyncReport]
MAX_FAILED_SHOWN = 20  # failed files a result lists (its counts have them all)
IDLE_WAIT_S = 3600.0  # the scheduler's longest sleep when no source is periodic (a wake() ends it sooner)


@dataclass(slots=True)
class SourceState:
    source: GitSource
    lock: threading.Lock = field(default_factory=threading.Lock)
    last: dict[str, Any] | None = None
    running_since: str | None = None
    next_due: float | None = None  # on the scheduler's clock; None: not periodic (or not started)


class GitSources:
    """The configured sources, their last results, and the thread that syncs them on schedule."""

    def __init__(
        self,
        sources: list[GitSource],
        sync: SyncFunction,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_result: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.states = [SourceState(source) for source in sources]
        self._sync = sync
        self.clock = clock
        self.on_result = on_result
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def describe(self) -> list[dict[str, Any]]:
        """Every configured source with its last result, repository credentials masked."""
        return [self._view(i, state) for i, state in enumerate(self.states)]

    def find(self, which: str | int) -> SourceState:
        """The source named ``which`` (or at index ``which``); ``NotFoundError`` listing the names there are."""
        for i, state in enumerate(self.states):
            if state.source.name == which or (isinstance(which, int) and i == which):
                return state
        names = ", ".join(repr(s.source.name) for s in self.states) or "none (set git_sources)"
        raise NotFoundError(f"no configured Git source {which!r}: the sources are {names}", hint="GET /api/sync/git")

    def sync(self, which: str | int, *, trigger: str = "request") -> dict[str, Any]:
        """Sync one configured source now and return its result; ``WriteConflictError`` while it is syncing.

        A sync that fails (git, a missing ref) is recorded as the source's last result and raised."""
        state = self.find(which)
        if not state.lock.acquire(blocking=False):
            raise WriteConflictError(
                f"Git source {state.source.name!r} is being synced (since {state.running_since})",
                hint="wait for it: GET /api/sync/git shows its result when it is done",
            )
        try:
            return self._run(state, trigger)
        finally:
            state.lock.release()

    def _run(self, state: SourceState, trigger: str) -> dict[str, Any]:
        source = state.source
        started, begun = _now(), time.perf_counter()
        state.running_since = started
        result: dict[str, Any] = {"trigger": trigger, "started_at": started}
        try:
            report = self._sync(source)
            failed = [{"path": f.path, "reason": f.reason} for f in report.files if f.status == "failed"]
            result |= {
                "ok": report.ok,
                "commit": report.commit,
                "previous": report.previous,
                "mode": report.mode,
                "counts": report.counts,
                "recorded": report.recorded,
                "failed": failed[:MAX_FAILED_SHOWN],
                "prune_skipped": report.prune_skipped,
                "error": None,
            }
        except KbseekError as exc:
            result |= {"ok": False, "error": {"code": exc.code, "message": redact(exc.message)}}
            log.warning("git source %s: sync failed: %s", source.name, redact(exc.message))
            raise
        except Exception as exc:  # not a sync's own failure (a database gone away): its details stay in the log
            result |= {
                "ok": False,
                "error": {"code": "internal_error", "message": f"{type(exc).__name__}: see the log"},
            }
            raise
        finally:
            result |= {"finished_at": _now(), "duration_ms": round((time.perf_counter() - begun) * 1000, 3)}
            state.last, state.running_since = result, None
            if self.on_result is not None:
                self.on_result(source.name, result)
        return result

    # -- the schedule -----------------------------------------------------------------------------

    def run_due(self) -> list[str]:
        """Sync every periodic source whose time has come (a busy one skips this turn); the names synced."""
        now = self.clock()
        done: list[str] = []
        for state in self.states:
            if state.next_due is None or state.next_due > now:
                continue
            state.next_due = now + state.source.every
            if self._quietly(state, "schedule"):
                done.append(state.source.name)
        return done

    def start(self) -> GitSources:
        """Sync every source once (in the background), then keep the periodic ones on schedule until :meth:`stop`."""
        if self.states:
            self._thread = threading.Thread(target=self._loop, name="kbseek-git-sources", daemon=True)
            self._thread.start()
        return self

    def wake(self) -> None:
        """Look at the clock again now (a test that moved it)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        for state in self.states:
            if self._stopping.is_set():
                return
            self._quietly(state, "start-up")
            if state.source.every:
                state.next_due = self.clock() + state.source.every
        while not self._stopping.is_set():
            dues = [s.next_due for s in self.states if s.next_due is not None]
            self._wake.wait(min([IDLE_WAIT_S, *(max(0.0, due - self.clock()) for due in dues)]))
            self._wake.clear()
            if not self._stopping.is_set():
                self.run_due()

    def _quietly(self, state: SourceState, trigger: str) -> bool:
        """Sync for the schedule: a failure is in the result and the log, not raised; a busy source is skipped."""
        try:
            with actor_scope(f"{trigger}:git:{state.source.name}"):  # the audit says who wrote: the schedule
                self.sync(state.source.name, trigger=trigger)
            return True
        except WriteConflictError:
            log.info("git source %s: still syncing, this %s turn is skipped", state.source.name, trigger)
        except KbseekError:
            pass  # recorded and logged by _run
        except Exception:  # the schedule outlives one broken sync (a database gone away)
            log.exception("git source %s: sync failed", state.source.name)
        return False

    def _view(self, index: int, state: SourceState) -> dict[str, Any]:
        source = state.source
        return {
            "index": index,
            "name": source.name,
            "repo": redact(source.repo),
            "ref": source.ref,
            "path": source.path,
            "prune": source.prune,
            "every_s": source.every,
            "running_since": state.running_since,
            "last": state.last,
        }


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
