"""Alembic driven from code: ``kbseek db upgrade`` / ``kbseek db current`` and start-up upgrades."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).with_name("migrations")


def _config(engine: Engine, connection: object | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Bring the schema to ``revision``; returns the revision now current."""
    with engine.begin() as connection:
        command.upgrade(_config(engine, connection), revision)
    return current(engine)


def current(engine: Engine) -> str | None:
    """The schema revision in the database, or ``None`` for an empty database."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head() -> str | None:
    """The newest revision this version of kbseek knows."""
    return ScriptDirectory.from_config(_config(None)).get_current_head()  # type: ignore[arg-type]
