"""Ingest speed without embeddings: documents/s and chunks/s, fresh and unchanged.

Usage: python benchmarks/ingest_speed.py [--no-fsync] [--database-url URL]
Prints a Markdown table for docs/benchmarks.md. Needs ../shared/data.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def scifact_as_markdown(target: Path) -> Path:
    """Each BEIR passage becomes ``<id>.md``: an H1 title and the abstract."""
    target.mkdir(parents=True)
    with (DATA / "beir-scifact" / "corpus.jsonl").open(encoding="utf-8") as corpus:
        for line in corpus:
            row = json.loads(line)
            (target / f"{row['_id']}.md").write_text(f"# {row['title']}\n\n{row['text']}\n", "utf-8")
    return target


def measure(name: str, folder: Path, settings: Settings) -> list[str]:
    kb = KnowledgeBase.open(settings)
    started = time.perf_counter()
    report = kb.ingest([folder])
    fresh = time.perf_counter() - started
    assert report.ok, [f.reason for f in report.files if f.reason]
    docs, chunks = report.counts["added"], kb.stats()["chunks"]
    started = time.perf_counter()
    again = kb.ingest([folder])
    unchanged = time.perf_counter() - started
    assert again.counts["unchanged"] == docs
    kb.close()
    return [
        f"| {name} | {docs:,} | {chunks:,} | {fresh:.2f} | {docs / fresh:,.0f} | {chunks / fresh:,.0f} "
        f"| {unchanged:.3f} | {docs / unchanged:,.0f} |"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-fsync", action="store_true", help="do not fsync stored originals")
    parser.add_argument("--database-url", default="", help="default: SQLite in a temp home")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        scifact = scifact_as_markdown(Path(tmp) / "scifact")
        sets = [
            ("prometheus-operator-runbooks", DATA / "prometheus-operator-runbooks" / "docs"),
            ("superbizagent-runbooks", DATA / "superbizagent-runbooks" / "docs"),
            ("beir-scifact (as Markdown)", scifact),
        ]
        for name, folder in sets:
            home = Path(tmp) / f"home-{name.split()[0]}"
            if args.database_url:
                engine = create_engine(args.database_url)
                with engine.begin() as conn:
                    conn.execute(text("DROP TABLE IF EXISTS chunks, documents, kb_state, alembic_version"))
                engine.dispose()
            settings = Settings(home=home, fsync=not args.no_fsync, database_url=args.database_url)
            rows += measure(name, folder, settings)
            shutil.rmtree(home, ignore_errors=True)
    backend = "PostgreSQL" if args.database_url else "SQLite"
    print(
        f"{backend}, fsync {'off' if args.no_fsync else 'on'}, Python {platform.python_version()}, {platform.machine()}"
    )
    print("| set | documents | chunks | fresh s | docs/s | chunks/s | unchanged s | unchanged docs/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
