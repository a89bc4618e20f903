"""Shared fixtures: real SQLite and real PostgreSQL (127.0.0.1:5432, database ``test``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from support import PG_ADMIN_URL

from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

# Most tests exercise storage and the lexical lanes; embedding costs ~0.1 s a chunk, so the dense
# lane is switched on only by the tests about it (tests/test_dense.py).
os.environ.setdefault("KBSEEK_EMBEDDER", "none")
# FastAPI's TestClient sends "Host: testserver"; the server answers only to names it knows (DNS rebinding)
os.environ.setdefault("KBSEEK_ALLOWED_HOSTS", '["testserver"]')

pytest_plugins = ["milvus_server"]  # the session's Milvus server fixture, ``milvus_server``

# Tests that start servers, browsers or many processes, run the stress loads or the live regression gate: `make
# test-fast` leaves them out (`-m "not slow"`), `make test-slow` runs them alone.
SLOW_MODULES = frozenset(
    {
        "test_console.py",
        "test_determinism.py",
        "test_home_ownership.py",
        "test_milvus_lite_process.py",
        "test_milvus_reconnect.py",
        "test_milvus_server.py",
        "test_milvus_workers.py",
        "test_quickstart.py",
        "test_real_runbooks.py",
        "test_regression_gate.py",
        "test_server.py",
        "test_suite_portability.py",
        "test_write_races.py",
    }
)
# Tests that read the evaluation data beside the repository (../shared/data).
DATA_MODULES = frozenset({"test_real_runbooks.py", "test_cases.py"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path
        if path.parent.name == "stress" or path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        if path.name in DATA_MODULES:
            item.add_marker(pytest.mark.data)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh database on the local server for this test session, dropped afterwards."""
    name = f"kbseek_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    """Settings for a data home in ``tmp_path`` on the parametrised database backend."""
    home = tmp_path / "home"
    if backend == "sqlite":
        return Settings(home=home)
    url = request.getfixturevalue("postgres_url")
    engine = create_engine(url)
    try:
        with engine.begin() as conn:  # every test starts from empty tables
            if conn.execute(text("SELECT to_regclass('documents')")).scalar():
                tables = "documents, kb_state, lookup_sessions, tool_invocations, write_audit, document_versions"
                if conn.execute(text("SELECT to_regclass('evidence_feedback')")).scalar():
                    tables += ", evidence_feedback"
                conn.execute(text(f"TRUNCATE {tables} CASCADE"))
    finally:
        engine.dispose()
    return Settings(home=home, database_url=url)


@pytest.fixture
def kb(settings: Settings) -> Iterator[KnowledgeBase]:
    knowledge_base = KnowledgeBase.open(settings)
    yield knowledge_base
    knowledge_base.close()
