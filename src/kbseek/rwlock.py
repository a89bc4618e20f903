"""A readers-writer lock for the in-memory indexes: many lookups at once, one refresh alone.

Writer-preferring, so a stream of lookups cannot starve a refresh. A thread that already reads may read again
(re-entrant reads), and :meth:`reading_here` tells code whether it runs inside a read, so a refresh asked for
from within a lookup is skipped instead of deadlocking: a lookup answers from one consistent snapshot.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class ReadWriteLock:
    """
    >>> lock = ReadWriteLock()
    >>> with lock.read():
    ...     with lock.read():
    ...         lock.reading_here()
    True
    >>> with lock.write():
    ...     lock.reading_here()
    False
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None
        self._writer_depth = 0
        self._waiting_writers = 0
        self._local = threading.local()

    def reading_here(self) -> bool:
        return getattr(self._local, "reads", 0) > 0

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        me = threading.get_ident()
        nested = self.reading_here() or self._writer == me
        if not nested:
            with self._cond:
                while self._writer is not None or self._waiting_writers:
                    self._cond.wait()
                self._readers += 1
        self._local.reads = getattr(self._local, "reads", 0) + 1
        try:
            yield
        finally:
            self._local.reads -= 1
            if not nested:
                with self._cond:
                    self._readers -= 1
                    if not self._readers:
                        self._cond.notify_all()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        me = threading.get_ident()
        if self.reading_here():
            raise RuntimeError("a reader cannot take the write lock (it would wait for itself)")
        with self._cond:
            if self._writer == me:
                self._writer_depth += 1
            else:
                self._waiting_writers += 1
                while self._writer is not None or self._readers:
                    self._cond.wait()
                self._waiting_writers -= 1
                self._writer, self._writer_depth = me, 1
        try:
            yield
        finally:
            with self._cond:
                self._writer_depth -= 1
                if not self._writer_depth:
                    self._writer = None
                    self._cond.notify_all()
