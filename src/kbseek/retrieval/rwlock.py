"""Two copies of the in-memory indexes: readers never wait for a refresh, and a refresh never waits for
new readers.

Readers pin the active copy for the length of their read and see one consistent version. The one writer at a
time (the caller serialises writers) changes the other copy, the standby, which no reader uses, then
publishes it with a pointer swap; readers that started before keep the old copy until they finish. Before the
writer changes the old copy in its turn it waits for those readers to leave: the writer waits, never a reader.
A thread that already reads may read again (it gets the copy it pinned), and :meth:`reading_here` tells code
whether it runs inside a read, so a refresh asked for from within a lookup is skipped instead of waiting for
itself.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class TwoCopies(Generic[T]):
    """
    >>> copies = TwoCopies("a", "b")
    >>> with copies.read() as seen:
    ...     copies.publish()           # a writer swaps while a reader holds "a"
    ...     seen, copies.current(), copies.active
    ('a', 'a', 'b')
    >>> copies.standby()               # the old copy, free again: the reader left
    'a'
    """

    def __init__(self, first: T, second: T) -> None:
        self._copies = (first, second)
        self._active = 0
        self._readers = [0, 0]
        self._cond = threading.Condition(threading.Lock())
        self._local = threading.local()

    @property
    def both(self) -> tuple[T, T]:
        return self._copies

    @property
    def active(self) -> T:
        """The copy new readers get."""
        return self._copies[self._active]

    def current(self) -> T:
        """The copy this thread reads: the one it pinned, else the active one."""
        pinned = getattr(self._local, "pinned", None)
        return self._copies[pinned] if pinned is not None else self.active

    def reading_here(self) -> bool:
        return getattr(self._local, "pinned", None) is not None

    @contextlib.contextmanager
    def read(self) -> Iterator[T]:
        """Pin the active copy until the block ends (a nested read keeps the outer one's copy)."""
        pinned = getattr(self._local, "pinned", None)
        if pinned is not None:
            yield self._copies[pinned]
            return
        with self._cond:
            side = self._active
            self._readers[side] += 1
        self._local.pinned = side
        try:
            yield self._copies[side]
        finally:
            self._local.pinned = None
            with self._cond:
                self._readers[side] -= 1
                if not self._readers[side]:
                    self._cond.notify_all()

    def standby(self) -> T:
        """The copy no reader uses, once the last reader of it has left (writers only, one at a time)."""
        if self.reading_here():
            raise RuntimeError("a reader cannot write (it would wait for itself)")
        with self._cond:
            side = 1 - self._active
            while self._readers[side]:
                self._cond.wait()
            return self._copies[side]

    def publish(self) -> None:
        """Make the standby copy the active one: readers from now on get it."""
        with self._cond:
            self._active = 1 - self._active
