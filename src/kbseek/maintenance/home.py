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
from kbseek.home.ownership import WORKER_OF, HomeLock, Owner, busy_message, owner_of
from kbseek.settings import Settings

# owner_of: who holds a home, for the readers beside it; WORKER_OF: how a serving worker is known as the owner's
__all__ = ["WORKER_OF", "holding", "owner_of", "refusal", "serving", "workers_refusal"]


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


def workers_refusal(settings: Settings, workers: int) -> str | None:
    """Why ``kbseek serve --workers N`` (N > 1) cannot be safe with these settings, or ``None`` when it can: the
    workers must share everything they keep, so a PostgreSQL database and, with a dense lane, a Milvus server.

    >>> workers_refusal(Settings(home="/tmp/kb"), 2).split(":")[0]
    'kbseek serve --workers 2 needs a PostgreSQL database (database_url)'
    >>> workers_refusal(Settings(home="/tmp/kb"), 1) is None
    True
    """
    if workers <= 1:
        return None
    asked = f"kbseek serve --workers {workers}"
    if not settings.database_url.startswith("postgresql"):
        return (
            f"{asked} needs a PostgreSQL database (database_url): SQLite lets one writer at a time hold the whole "
            "file, so the workers' uploads, invocation records and sessions would queue on its lock and fail with "
            "'database is locked' under load; serve a SQLite home with one process (--workers 1)"
        )
    if settings.watch_dirs or settings.git_sources:
        what = "watch_dirs (--watch)" if settings.watch_dirs else "git_sources"
        return (
            f"{asked} with {what}: every worker would watch or sync the same sources on its own and ingest each "
            "change once per worker; watching and Git sync run in a server of one process (--workers 1)"
        )
    if settings.embedder == "none":
        return None
    if settings.vector_store == "local":
        return (
            f"{asked} with vector_store = local would keep a separate copy of every vector in each worker's memory "
            "(N times the memory and the start-up, nothing shared): use a Milvus server (vector_store = milvus, "
            "milvus_uri = http://HOST:19530), or --workers 1"
        )
    if not settings.milvus_uri:
        return (
            f"{asked} needs a Milvus server (milvus_uri): Milvus Lite keeps its vectors in one file of the data "
            f"home ({settings.milvus_target}) that only one process can open; set milvus_uri = http://HOST:19530, "
            "or --workers 1"
        )
    return None
