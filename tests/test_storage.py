"""Migrations, settings and the core's purity."""

from __future__ import annotations

import subprocess
import sys

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from kbseek.adapters.sql import migrate
from kbseek.adapters.sql.engine import make_engine
from kbseek.adapters.sql.tables import Base
from kbseek.settings import Settings


def test_migrations_build_exactly_the_models(settings):
    engine = make_engine(settings.database_url)
    assert migrate.upgrade(engine) == migrate.head() == "0008"
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []
    engine.dispose()


def test_downgrade_and_upgrade_again(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    migrate.upgrade(engine)
    migrate.upgrade(engine, "head")  # idempotent
    from alembic import command

    with engine.begin() as connection:
        command.downgrade(migrate._config(engine, connection), "base")
    assert migrate.current(engine) is None
    assert migrate.upgrade(engine) == "0008"


def test_settings_from_env_and_toml(tmp_path, monkeypatch):
    config = tmp_path / "kbseek.toml"
    config.write_text('chunk_size = 600\nhome = "/srv/kb"\nscan_dirs = ["/srv/docs"]\n', "utf-8")
    monkeypatch.setenv("KBSEEK_CONFIG", str(config))
    monkeypatch.setenv("KBSEEK_CHUNK_OVERLAP", "50")
    settings = Settings()
    assert (settings.chunk_size, settings.chunk_overlap, str(settings.home)) == (600, 50, "/srv/kb")
    assert settings.database_url == "sqlite:////srv/kb/kbseek.db"
    assert [str(p) for p in settings.scan_dirs] == ["/srv/docs"]
    monkeypatch.setenv("KBSEEK_HOME", str(tmp_path / "h"))  # env beats the file
    assert Settings().home == tmp_path / "h"


def test_settings_mask_passwords_and_reject_bad_values():
    settings = Settings(database_url="postgresql://kb:secret@db:5432/kb")
    assert settings.describe()["database_url"] == "postgresql://kb:***@db:5432/kb"
    for bad in ({"chunk_size": 800, "chunk_overlap": 500}, {"log_level": "LOUD"}, {"unknown": 1}):
        try:
            Settings(**bad)
        except ValueError as exc:
            assert next(iter(bad.keys() - {"chunk_size"})) in str(exc)
        else:
            raise AssertionError(f"{bad} was accepted")


def test_core_imports_no_database_or_framework():
    code = (
        "import sys, kbseek.core.document, kbseek.core.markdown, kbseek.core.frontmatter;"
        "bad = [m for m in ('sqlalchemy', 'alembic', 'psycopg', 'fastapi', 'pymilvus', 'typer', 'rich')"
        " if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_version_counter_is_read_afresh_by_another_repository(kb, settings):
    from kbseek.adapters.sql.repository import SqlRepository

    other_engine = make_engine(settings.database_url)
    other = SqlRepository(other_engine)  # as another server process on the same database
    try:
        seen = [other.version()]
        for n in range(3):
            kb.ingest_documents([(f"notes/n{n}.md", f"# Note {n}\n\nbody {n}\n".encode())], origin="test")
            seen.append(other.version())
        assert len(set(seen)) == 4 and seen == sorted(seen) and seen[-1] == kb.repository.version()
    finally:
        other_engine.dispose()


def test_the_embedding_cache_reads_the_fallback_ids_only_for_what_its_own_lacks_in_their_order(kb):
    own, first, second = b"\x01" * 8, b"\x02" * 8, b"\x03" * 8
    kb.repository.save_vectors("m|spelled", 2, {"h1": own})
    kb.repository.save_vectors("m|breadcrumb", 2, {"h1": first, "h2": first})
    kb.repository.save_vectors("m|full", 2, {"h2": second, "h3": second})
    found = kb.repository.vectors("m|spelled", ["h1", "h2", "h3", "h4"], ("m|breadcrumb", "m|full"))
    assert found == {"h1": own, "h2": first, "h3": second}
    # the other order of preference: whatever order the database returns rows in, the order given decides
    found = kb.repository.vectors("m|spelled", ["h1", "h2", "h3"], ("m|full", "m|breadcrumb", "m|spelled"))
    assert found == {"h1": own, "h2": second, "h3": second}
    assert kb.repository.vectors("m|spelled", ["h1", "h2"]) == {"h1": own}  # no fallback: its own rows only
