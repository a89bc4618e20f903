"""Holding a data home for a command: one owner writes it (``kbseek.home.ownership``), everyone else reads beside it.

A writing command (``ingest``, ``docs delete``, ``reindex``, ``restore``, ``doctor --fix``, ``invocations prune``,
``db upgrade``) holds the home while it runs and refuses, naming the owner and what to do instead, when another
process holds it; ``kbseek serve`` holds it from start to exit. Reading commands only ask who owns it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kbseek.errors import HomeInUse
from kbseek.home.ownership import HomeLock, Owner, busy_message, owner_of
from kbseek.settings import Settings

__all__ = ["holding", "owner_of", "refusal", "serving"]  # owner_of: who holds a home, for the readers beside it


@contextmanager
def holding(settings: Settings, command: str) -> Iterator[Settings]:
    """Hold the data home while ``command`` (``"ingest"``, ``"docs delete"``…) writes it; refuse, naming the owner,
    if another process holds it.

    >>> import tempfile
    >>> settings = Settings(home=tempfile.mkdtemp())
    >>> with holding(settings, "ingest"):
    ...     owner_of(settings.home).command
    'kbseek ingest'
    >>> owner_of(settings.home) is None
    True
    """
    lock = HomeLock(settings.home)
    try:
        lock.acquire(f"kbseek {command}")
    except HomeInUse as exc:
        raise HomeInUse(busy_message(exc.owner, settings.home, command), owner=exc.owner) from None
    try:
        yield settings
    finally:
        lock.release()


def serving(settings: Settings, url: str | None) -> HomeLock:
    """The home held for ``kbseek serve`` at ``url`` (the caller releases it), or :class:`HomeInUse` saying why
    no second server starts there."""
    lock = HomeLock(settings.home)
    try:
        lock.acquire("kbseek serve", url)
    except HomeInUse as exc:
        raise HomeInUse(refusal(exc.owner, settings.home), owner=exc.owner) from None
    return lock


def refusal(owner: Owner, home: Path) -> str:
    """Why a second server does not start on a home.

    >>> refusal(Owner(7, "kbseek serve", "http://127.0.0.1:8000"), Path("kb"))
    'kb is already served by kbseek serve (pid 7, http://127.0.0.1:8000): use that server, or stop it first (one server per data home; --home picks another)'
    >>> refusal(Owner(9, "kbseek ingest"), Path("kb"))
    'kb is being written by kbseek ingest (pid 9): wait for it to finish, then start the server'
    """  # noqa: E501 - the doctest shows the whole message
    if owner.url:
        return (
            f"{home} is already served by {owner.describe()}: use that server, or stop it first "
            "(one server per data home; --home picks another)"
        )
    return f"{home} is being written by {owner.describe()}: wait for it to finish, then start the server"
