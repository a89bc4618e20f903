"""Shared fixtures: real SQLite and real PostgreSQL (127.0.0.1:5432, database ``test``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

# Most tests exercise storage and the lexical lanes; embedding costs ~0.1 s a chunk, so the dense
# lane is switched on only by the tests about it (tests/test_dense.py).
os.environ.setdefault("KBSEEK_EMBEDDER", "none")
# FastAPI's TestClient sends "Host: testserver"; the server answers only to names it knows (DNS rebinding)
os.environ.setdefault("KBSEEK_ALLOWED_HOSTS", '["testserver"]')

pytest_plugins = ["milvus_server"]  # the session's Milvus server fixture, ``milvus_server``

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
EXAMPLES = ROOT / "examples"
PG_ADMIN_URL = os.environ.get("KBSEEK_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


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
                conn.execute(
                    text("TRUNCATE documents, kb_state, lookup_sessions, tool_invocations, write_audit CASCADE")
                )
    finally:
        engine.dispose()
    return Settings(home=home, database_url=url)


@pytest.fixture
def kb(settings: Settings) -> Iterator[KnowledgeBase]:
    knowledge_base = KnowledgeBase.open(settings)
    yield knowledge_base
    knowledge_base.close()


def answerable_cases(case_file: Path, split: str | None = None) -> int:
    """How many cases of a golden-case file (of one split) have an answer: what an evaluation run scores."""
    import json

    cases = json.loads(case_file.read_text("utf-8"))["cases"]
    return sum(1 for c in cases if c.get("answerable", True) and split in (None, c["split"]))


def case_count(case_file: Path) -> int:
    import json

    return len(json.loads(case_file.read_text("utf-8"))["cases"])


def write(folder: Path, relative: str, content: str | bytes) -> Path:
    """Write a test document (text as UTF-8) and return its path."""
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def doc(title: str, keywords: str, summary: str, body: str, **extra: str) -> str:
    """A well-formed document with frontmatter."""
    lines = ["---", f"title: {title}", f"keywords: [{keywords}]", f"summary: {summary}"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "\n".join(lines + ["---", body])
