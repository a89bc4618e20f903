"""Opening a data home without writing to it: beside the process that owns it, or to check it.

A read-only knowledge base never migrates, repairs, prunes, scans or writes an original; its caches (analysed
tokens, embeddings, the model note) are left to the owner, and its vectors live in the in-process store, filled
from the database's embedding cache, so the owner's Milvus Lite data dir is never touched. Records of the calls it
answers (``lookup_knowledge`` invocations, sessions) are still written: they are the record of what was asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine, make_url

from kbseek.adapters.filestore import FileStore
from kbseek.adapters.sql import migrate
from kbseek.adapters.sql.engine import make_engine
from kbseek.adapters.sql.repository import SqlRepository
from kbseek.errors import ReadOnlyError, SchemaNotCurrent
from kbseek.settings import Settings


def _refuse(what: str) -> ReadOnlyError:
    return ReadOnlyError(
        f"this knowledge base was opened read-only: it does not {what}",
        hint="write through the process that owns the data home",
    )


class ReadOnlyRepository(SqlRepository):
    """Reads like :class:`SqlRepository`; cache writes are skipped and document writes refused."""

    def save_tokens(self, rows: list[tuple[str, str, list[str]]]) -> None:
        pass  # a cache the owner fills; analysing again costs this process only time

    def retag_tokens(self, old_version: str, new_version: str) -> None:
        pass

    def save_vectors(self, model_id: str, dim: int, rows: dict[str, bytes]) -> None:
        pass

    def set_meta(self, key: str, value: str) -> None:
        pass

    def save(self, *args: Any, **kwargs: Any) -> str:
        raise _refuse("store documents")

    def delete(self, *args: Any, **kwargs: Any) -> bool:
        raise _refuse("delete documents")


class ReadOnlyFileStore(FileStore):
    """Reads stored originals; never writes, moves or removes one."""

    def write(self, path: str, data: bytes) -> None:
        raise _refuse("write originals")

    def delete(self, path: str) -> bool:
        raise _refuse("delete originals")

    def move_out(self, path: str, destination: Path) -> Path:
        raise _refuse("move originals")

    def remove_temp_files(self) -> int:
        raise _refuse("remove files")


def sqlite_file(database_url: str) -> Path | None:
    """The database file of a SQLite URL (``None`` for other databases and in-memory SQLite).

    >>> sqlite_file("sqlite:////srv/kb/kbseek.db"), sqlite_file("postgresql://db/kb"), sqlite_file("sqlite://")
    (PosixPath('/srv/kb/kbseek.db'), None, None)
    """
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def require_database(database_url: str, home: Path) -> None:
    """Refuse to open a SQLite database that does not exist (opening would create it)."""
    file = sqlite_file(database_url)
    if file is not None and not file.is_file():
        raise SchemaNotCurrent(
            f"no knowledge base in {home} yet (no database at {file})",
            hint="ingest documents first: kbseek ingest PATH",
        )


def require_current_schema(engine: Engine, home: Path) -> str | None:
    """The schema revision, or :class:`SchemaNotCurrent` when it is not the newest this kbseek knows."""
    current, head = migrate.current(engine), migrate.head()
    if current is None:
        raise SchemaNotCurrent(
            f"no knowledge base in {home} yet (the database has no schema)",
            hint="ingest documents first: kbseek ingest PATH",
        )
    if current != head:
        raise SchemaNotCurrent(
            f"the database of {home} is at schema revision {current}; this kbseek reads {head}",
            hint="migrate it: kbseek db upgrade (a starting kbseek serve migrates too)",
        )
    return current


def read_only_parts(settings: Settings) -> tuple[Settings, SqlRepository, FileStore]:
    """What ``KnowledgeBase`` is built from when it is opened read-only: settings whose vectors stay in-process
    (the owner's Milvus is never opened), a read-only repository and file store over a current schema."""
    require_database(settings.database_url, settings.home)  # opening SQLite would create it
    engine = make_engine(settings.database_url)
    try:
        require_current_schema(engine, settings.home)
    except BaseException:
        engine.dispose()
        raise
    return (
        settings.model_copy(update={"vector_store": "local"}),
        ReadOnlyRepository(engine),
        ReadOnlyFileStore(settings.knowledge_base_dir),
    )
