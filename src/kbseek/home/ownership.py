"""One owner per data home.

The process that writes a data home (``kbseek serve``, or a writing command such as ``kbseek ingest``) holds an
exclusive OS lock (``flock``) on ``<home>/owner.lock`` for as long as it runs, and writes who it is into that file
(pid, command, URL, start time). Everyone else reads beside it (``KnowledgeBase.open(read_only=True)``) or refuses
to write, naming the owner. The lock, not the JSON, is the truth: the OS releases the lock of a process that dies,
so a crashed server leaves no stale ownership behind, whatever the file still says.

Without ``fcntl`` (Windows) ownership is not enforced: :func:`owner_of` finds nobody and :class:`HomeLock` always
succeeds; Milvus Lite's own data-dir lock still refuses a second process there.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from kbseek.errors import HomeInUse, KbseekError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = "owner.lock"
# A reader probing the lock holds it (shared) for microseconds; an owner starting then waits this long before
# deciding the home is taken
PROBE_GRACE_S = 0.25


@dataclass(frozen=True, slots=True)
class Owner:
    """The process that owns a data home, as it described itself."""

    pid: int
    command: str
    url: str | None = None
    started_at: str | None = None

    def describe(self) -> str:
        """``kbseek serve (pid 4242, http://127.0.0.1:8000)``.

        >>> Owner(4242, "kbseek serve", "http://127.0.0.1:8000").describe()
        'kbseek serve (pid 4242, http://127.0.0.1:8000)'
        >>> Owner(77, "kbseek ingest").describe()
        'kbseek ingest (pid 77)'
        """
        where = f", {self.url}" if self.url else ""
        return f"{self.command} (pid {self.pid or '?'}{where})"


# How a writing command is done through the server that owns the data home instead
THROUGH_SERVER = {
    "ingest": "upload through it (POST {url}/api/documents, or the console at {url}/)",
    "docs delete": "delete through it (DELETE {url}/api/documents/PATH)",
    "reindex": "reindex through it (POST {url}/api/reindex)",
    "watch": "restart it with 'kbseek serve --watch DIR' (or watch_dirs in kbseek.toml) to watch while serving",
    "sync git": "sync a source of its git_sources setting through it (POST {url}/api/sync/git)",
    "doctor --fix": "repair through it (POST {url}/api/reindex rewrites originals, indexes and vectors)",
}


def busy_message(owner: Owner, home: Path, command: str) -> str:
    """One line: who owns the home and what to do instead.

    >>> message = busy_message(Owner(7, "kbseek serve", "http://127.0.0.1:8000"), Path("kb"), "reindex")
    >>> for part in message.split(": ", 1):
    ...     print(part)
    'kbseek reindex' writes kb, which kbseek serve (pid 7, http://127.0.0.1:8000) owns
    reindex through it (POST http://127.0.0.1:8000/api/reindex), or stop the server first
    """
    if owner.url:
        via = THROUGH_SERVER.get(command)
        todo = f"{via.format(url=owner.url)}, or stop the server first" if via else "stop the server first"
        return f"'kbseek {command}' writes {home}, which {owner.describe()} owns: {todo}"
    return f"'kbseek {command}' writes {home}, which {owner.describe()} is writing: wait for it to finish"


WORKER_OF = "KBSEEK_SERVE_WORKER_OF"  # set by ``kbseek serve --workers N`` for its workers: the owner's pid


def serving_parent() -> int | None:
    """The pid of the ``kbseek serve --workers`` process this process is a worker of (it writes the home on the
    owner's behalf), or ``None``."""
    parent = os.getppid()
    return parent if os.environ.get(WORKER_OF) == str(parent) else None


def refuse_if_owned(home: Path) -> None:
    """Opening to write (migrate, repair, index) a home another process owns would race it; the owner's own
    serving workers write it on its behalf."""
    owner = owner_of(home)
    if owner is not None and owner.pid not in (os.getpid(), serving_parent()):
        raise HomeInUse(
            f"{home} is owned by {owner.describe()}",
            owner=owner,
            hint="open it read-only beside the owner: KnowledgeBase.open(settings, read_only=True)",
        )


def lock_path(home: Path) -> Path:
    return Path(home) / LOCK_FILE


def owner_of(home: Path) -> Owner | None:
    """The process owning ``home`` now, or ``None``; creates nothing.

    >>> import tempfile
    >>> owner_of(Path(tempfile.mkdtemp())) is None
    True
    """
    path = lock_path(home)
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KbseekError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_owner(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_owner(fd: int) -> Owner:
    """The owner's JSON; it is written right after the lock is taken, so an empty file is retried briefly."""
    for _ in range(50):
        try:
            data = json.loads(os.pread(fd, 4096, 0) or b"null")
            if isinstance(data, dict) and isinstance(data.get("pid"), int):
                return Owner(
                    data["pid"], str(data.get("command") or "kbseek"), data.get("url") or None, data.get("started_at")
                )
        except (ValueError, OSError):
            pass
        time.sleep(0.01)
    return Owner(0, "another kbseek process")


class HomeLock:
    """The exclusive ownership of a data home, held from :meth:`acquire` until :meth:`release` (or exit).

    >>> import tempfile
    >>> home = Path(tempfile.mkdtemp())
    >>> with HomeLock(home).held("kbseek ingest"):
    ...     owner_of(home).command
    'kbseek ingest'
    >>> owner_of(home) is None
    True
    """

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.path = lock_path(self.home)
        self._fd: int | None = None
        self._owner: Owner | None = None

    def acquire(self, command: str, url: str | None = None) -> None:
        """Take the home for ``command`` or raise :class:`HomeInUse` naming its owner."""
        if fcntl is None:
            return
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + PROBE_GRACE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:  # perhaps a reader probing; an owner holds on
                    time.sleep(0.02)
                    continue
                owner = _read_owner(fd)
                os.close(fd)
                raise HomeInUse(f"{self.home} is owned by {owner.describe()}", owner=owner) from None
        self._fd = fd
        self._owner = Owner(os.getpid(), command, url, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
        self._write()

    def set_url(self, url: str) -> None:
        """Record where the owner serves (known once the port is bound)."""
        if self._owner is not None:
            self._owner = Owner(self._owner.pid, self._owner.command, url, self._owner.started_at)
            self._write()

    def _write(self) -> None:
        assert self._fd is not None and self._owner is not None
        data = json.dumps(asdict(self._owner)).encode("utf-8")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)  # cosmetic: the lock is the truth
        except OSError:
            pass
        os.close(self._fd)  # closing the descriptor releases the lock
        self._fd, self._owner = None, None

    @contextlib.contextmanager
    def held(self, command: str, url: str | None = None) -> Iterator[HomeLock]:
        self.acquire(command, url)
        try:
            yield self
        finally:
            self.release()
