"""The short form of the mixed-load run (issue 10): 8 clients for 8 s, 10% uploads and deletes, on the default
stack; zero errors, every acknowledged write findable in every lane, every acknowledged delete gone, no drift.
The long form (32 clients, 60 s) is ``benchmarks/mixed_load.py`` by hand; figures in docs/reliability.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mixed_load_loses_nothing():
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "mixed_load.py"), "--clients", "8", "--seconds", "8"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "errors: 0" in run.stdout and "lost: 0" in run.stdout and "no drift" in run.stdout
