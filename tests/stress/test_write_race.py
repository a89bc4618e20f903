"""Writes that race on two real ``kbseek serve`` processes (each with its own home) on one PostgreSQL: the short
form of ``benchmarks/write_race.py`` (8 clients × 25 requests and a reindex loop; by hand: 20 clients, 60 s).
Every answer must be 2xx/404/409 without SQL or server paths, and at rest every document has its chunk rows.
One server on one home, where the originals must equal the database too, is ``tests/test_write_races.py``'s storm."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import PG_ADMIN_URL, ROOT


@pytest.mark.postgres
def test_two_servers_on_one_postgresql_serialise_same_path_writes():
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "write_race.py"),
            "--clients",
            "8",
            "--requests",
            "25",
            "--processes",
            "2",
            "--postgres",
            PG_ADMIN_URL,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(run.stdout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "bad answers: 0" in run.stdout and "drift at rest: 0" in run.stdout
    assert "POST 201" in run.stdout and "DELETE 200" in run.stdout  # the storm really wrote
