"""Who may change a data home when: writes to one path take turns, and a repair runs alone.

A write of a document holds the home *shared* and its path *exclusively* from reading the previous original,
through writing the new one and committing its rows, to putting the old original back if the commit failed. A
repair (start-up repair, ``doctor``, ``reindex``; a dry run too) holds the home *exclusively*: it never sees a
write half done (an original ahead of its row, a temp file still being written), so it neither takes one for
drift nor counts one as drift.

Two layers, so both the threads of one process and several processes on one home are kept apart:

- in the process, a condition: any number of writers or one repair, and one lock per path. It prefers the
  repair: once a repair waits, new writes wait behind it, so a stream of uploads cannot starve it;
- across processes, ``flock`` on files in ``<home>/locks/``: ``writes.lock`` (shared by writers, exclusive for a
  repair) and, per path, one of 64 ``path-NN.lock`` chosen by the path's hash (two paths may share one and then
  take turns, which costs little). The kernel releases them when a process dies, so a crash leaves no lock.
  ``flock`` cannot wait with a timeout and keeps no queue: a waiter polls, and a repair takes the first moment
  when no other process is writing.

Processes with separate homes on one PostgreSQL share no files; the database's own per-path lock (in
``SqlRepository``) keeps their rows whole. Waiting is bounded: after ``timeout`` seconds ``WriteConflictError``
(HTTP 409) asks the caller to retry.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from kbseek.errors import WriteConflictError

try:
    import fcntl
except ImportError:  # no flock (Windows): one process per home, kept apart in-process only
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("kbseek")
WRITE_WAIT_S = 60.0  # a write waits this long for others on its path or for a repair, then answers 409
REPAIR_WAIT_S = 300.0  # a repair waits this long for the writes in flight
PATH_LOCK_FILES = 64


class WriteLocks:
    """
    >>> import tempfile
    >>> locks = WriteLocks(Path(tempfile.mkdtemp()))
    >>> with locks.writing("ops/a.md"):
    ...     locks.writers
    1
    >>> with locks.repairing():
    ...     with locks.repairing():  # re-entrant: reindex runs a repair inside its own
    ...         locks.writers
    0
    """

    def __init__(self, lock_dir: Path | None) -> None:
        self.lock_dir = lock_dir
        self._cond = threading.Condition(threading.Lock())
        self.writers = 0  # writes holding the home in this process
        self.exclusive_waiting = 0  # repairs waiting for them
        self._owner: int | None = None  # the thread running a repair
        self._depth = 0
        self._owner_file: int | None = None
        self._paths: dict[str, list] = {}  # path -> [lock, threads using or waiting for it]
        self._local = threading.local()

    @contextlib.contextmanager
    def writing(self, path: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the home shared and ``path`` exclusively (a repair in this thread may write too); wait at most
        ``timeout`` seconds (default ``WRITE_WAIT_S``)."""
        deadline = time.monotonic() + (WRITE_WAIT_S if timeout is None else timeout)
        what = f"another write to {path} or a repair is still running"
        with self._shared(deadline, what), self._path(path, deadline, what):
            yield

    @contextlib.contextmanager
    def repairing(self, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the home exclusively: no write runs in this process or another one on the same home; wait at
        most ``timeout`` seconds (default ``REPAIR_WAIT_S``)."""
        timeout = REPAIR_WAIT_S if timeout is None else timeout
        me = threading.get_ident()
        if getattr(self._local, "shared", 0):
            raise RuntimeError("a write cannot start a repair (it would wait for itself)")
        with self._cond:
            if self._owner == me:
                self._depth += 1
                nested = True
            else:
                nested = False
                self._wait_exclusive(time.monotonic() + timeout)
        if not nested:
            try:
                self._owner_file = self._flock(
                    "writes.lock",
                    exclusive=True,
                    deadline=time.monotonic() + timeout,
                    what="a write in another process is still running",
                )
            except BaseException:
                self._release_exclusive()
                raise
        try:
            yield
        finally:
            if nested:
                with self._cond:
                    self._depth -= 1
            else:
                _unlock(self._owner_file)
                self._owner_file = None
                self._release_exclusive()

    # -- in this process -------------------------------------------------------------------

    def _wait_exclusive(self, deadline: float) -> None:
        self.exclusive_waiting += 1
        try:
            while self._owner is not None or self.writers:
                if not self._cond.wait(max(0.0, deadline - time.monotonic())) and time.monotonic() >= deadline:
                    raise WriteConflictError(
                        "the repair waited too long for the writes in flight", hint="retry when the uploads are done"
                    )
        finally:
            self.exclusive_waiting -= 1
            self._cond.notify_all()  # writes held back for this repair may go if it gave up
        self._owner, self._depth = threading.get_ident(), 1

    def _release_exclusive(self) -> None:
        with self._cond:
            self._owner, self._depth = None, 0
            self._cond.notify_all()

    @contextlib.contextmanager
    def _shared(self, deadline: float, what: str) -> Iterator[None]:
        if self._owner == threading.get_ident():  # the repair's own thread: it holds the home already
            yield
            return
        with self._cond:
            while self._owner is not None or self.exclusive_waiting:
                if not self._cond.wait(max(0.0, deadline - time.monotonic())) and time.monotonic() >= deadline:
                    raise WriteConflictError(what, hint="retry in a moment")
            self.writers += 1
        self._local.shared = getattr(self._local, "shared", 0) + 1
        handle = None
        try:
            handle = self._flock("writes.lock", exclusive=False, deadline=deadline, what=what)
            yield
        finally:
            _unlock(handle)
            self._local.shared -= 1
            with self._cond:
                self.writers -= 1
                if not self.writers:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def _path(self, path: str, deadline: float, what: str) -> Iterator[None]:
        with self._cond:
            entry = self._paths.setdefault(path, [threading.Lock(), 0])
            entry[1] += 1
        try:
            if not entry[0].acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise WriteConflictError(what, hint="retry in a moment")
            try:
                handle = self._flock(f"path-{_bucket(path):02d}.lock", exclusive=True, deadline=deadline, what=what)
                try:
                    yield
                finally:
                    _unlock(handle)
            finally:
                entry[0].release()
        finally:
            with self._cond:
                entry[1] -= 1
                if not entry[1]:
                    del self._paths[path]

    # -- across processes ------------------------------------------------------------------

    def _flock(self, name: str, *, exclusive: bool, deadline: float, what: str) -> int | None:
        """A descriptor holding ``flock`` on ``<lock_dir>/name`` (its own open file, so threads exclude each
        other too), or None where locking files is not possible (no lock folder, a read-only home)."""
        if fcntl is None or self.lock_dir is None:
            return None
        try:
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_dir / name, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            log.debug("no cross-process write lock (%s): %s", name, exc.strerror)
            return None
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        pause = 0.001
        try:
            while True:
                try:
                    fcntl.flock(fd, mode)
                    return fd
                except BlockingIOError:
                    pass
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WriteConflictError(what, hint="retry in a moment")
                time.sleep(min(pause, remaining))  # flock cannot wait with a timeout; another process holds it
                pause = min(pause * 2, 0.05)
        except BaseException:
            os.close(fd)
            raise


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the descriptor releases its flock


def _bucket(path: str) -> int:
    return int.from_bytes(hashlib.sha256(path.encode("utf-8")).digest()[:4], "big") % PATH_LOCK_FILES
