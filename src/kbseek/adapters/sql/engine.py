"""Engines for SQLite (the embedded default) and PostgreSQL, tuned for many small transactions."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url

from kbseek.errors import ConfigError


def make_engine(url: str) -> Engine:
    """Create the engine for ``url``; ``postgresql://`` is served by psycopg 3.

    >>> make_engine("sqlite://").dialect.name
    'sqlite'
    """
    try:
        parsed = make_url(url)
    except Exception as exc:
        raise ConfigError(f"database_url {url!r} is not a database URL") from exc
    backend = parsed.get_backend_name()
    if backend == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if backend not in ("sqlite", "postgresql"):
        raise ConfigError(
            f"database_url uses {backend!r}; supported: sqlite, postgresql",
            hint="use sqlite:///path/kbseek.db or postgresql://user@host/db",
        )
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(parsed, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    # WAL + NORMAL: a commit is durable against process crashes and costs no fsync of the db file
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
