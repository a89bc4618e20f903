"""The database schema of a data home: ``kbseek db upgrade`` and ``kbseek db current``.

A knowledge base opened to write migrates its schema by itself; these are for doing it ahead of a start, or
looking without changing anything.
"""

from __future__ import annotations

from typing import Any

from kbseek.adapters.sql import migrate
from kbseek.adapters.sql.engine import make_engine
from kbseek.home.readonly import require_database
from kbseek.settings import Settings


def upgrade(settings: Settings, revision: str = "head") -> str | None:
    """Apply the migrations up to ``revision`` (default: the newest); returns the revision now current.

    The caller holds the data home (:func:`kbseek.maintenance.home.holding`)."""
    engine = make_engine(settings.database_url)
    try:
        return migrate.upgrade(engine, revision)
    finally:
        engine.dispose()


def status(settings: Settings) -> dict[str, Any]:
    """The schema revision of the database beside the newest one known, writing nothing (not even a new
    SQLite file: a home without a database is refused).

    >>> import tempfile
    >>> settings = Settings(home=tempfile.mkdtemp())
    >>> _ = upgrade(settings)
    >>> info = status(settings)
    >>> info["up_to_date"], info["current"] == info["head"], info["database_url"].startswith("sqlite:///")
    (True, True, True)
    """
    require_database(settings.database_url, settings.home)
    engine = make_engine(settings.database_url)
    try:
        info: dict[str, Any] = {
            "current": migrate.current(engine),
            "head": migrate.head(),
            "database_url": settings.describe()["database_url"],
        }
    finally:
        engine.dispose()
    info["up_to_date"] = info["current"] == info["head"]
    return info
