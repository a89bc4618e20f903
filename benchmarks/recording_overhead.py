"""What recording a lookup costs, and how fast the records are listed and pruned at 100k rows.

    .venv/bin/python benchmarks/recording_overhead.py [--rows 100000] [--postgres postgresql+psycopg://postgres@127.0.0.1:5432/test]

Per lookup_knowledge call on the bundled example knowledge base (lexical lanes, so the figures are not
drowned by the embedder): building the tool_invocation row, writing it (SQLite in a file, and PostgreSQL
when given), counting it in the Prometheus metrics, and the whole call with and without recording.
Then list queries (by session, since, level) and prune over ``--rows`` recorded calls.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ["KBSEEK_EMBEDDER"] = "none"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sqlalchemy import create_engine, insert, text  # noqa: E402

from kbseek.adapters.sql.tables import ToolInvocationRow  # noqa: E402
from kbseek.lookup import LookupRequest  # noqa: E402
from kbseek.lookup.records import success_row  # noqa: E402
from kbseek.service import KnowledgeBase  # noqa: E402
from kbseek.settings import Settings  # noqa: E402

QUERIES = [
    "ERR_TIMEOUT 支付超时",
    "jmap 内存泄漏",
    "HighCPUUsage 告警怎么处理",
    "HTTP 502 Bad Gateway",
    "磁盘满了",
    "数据库连接池耗尽",
    "订单服务 ERR_ORDER_DUPLICATE",
    "nginx upstream timed out",
]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def line(name: str, values: list[float]) -> str:
    return f"| {name} | {statistics.median(values):.3f} | {pct(values, 95):.3f} |"


def per_call(settings: Settings, label: str, rounds: int) -> list[str]:
    rows = []
    with KnowledgeBase.open(settings) as kb:
        kb.ingest([ROOT / "examples" / "knowledge_base"])
        tool = kb.lookup_tool
        build, write, observe, answer_only, whole, commit = [], [], [], [], [], []
        for n in range(rounds):
            request = LookupRequest.parse({"query": QUERIES[n % len(QUERIES)], "session_id": f"b{n % 20}"})
            t0 = time.perf_counter()
            response = tool.answer(request, started=t0)
            t1 = time.perf_counter()
            row = success_row(response, (t1 - t0) * 1000)
            t2 = time.perf_counter()
            kb.invocations.record(row)  # queued; the writer thread commits it
            t3 = time.perf_counter()
            write.append((t3 - t2) * 1000)
            kb.invocations.flush()
            commit.append((time.perf_counter() - t3) * 1000)
            t3 = time.perf_counter()
            kb.telemetry.observe_lookup(row, slow=False)
            t4 = time.perf_counter()
            tool(request)
            t5 = time.perf_counter()
            kb.invocations.flush()
            answer_only.append((t1 - t0) * 1000)
            build.append((t2 - t1) * 1000)
            observe.append((t4 - t3) * 1000)
            whole.append((t5 - t4) * 1000)
        rows.append(line(f"{label}: answer alone (no record)", answer_only))
        rows.append(line(f"{label}: build the row", build))
        rows.append(line(f"{label}: queue the row (the lookup's cost)", write))
        rows.append(line(f"{label}: commit it (writer thread, one row alone)", commit))
        rows.append(line(f"{label}: count it in the metrics", observe))
        rows.append(
            line(f"{label}: record = build + write + count", [a + b + c for a, b, c in zip(build, write, observe)])
        )
        rows.append(line(f"{label}: whole call with recording", whole))
    return rows


def listing(settings: Settings, label: str, count: int) -> list[str]:
    with KnowledgeBase.open(settings) as kb:
        kb.ingest([ROOT / "examples" / "knowledge_base"])
        row = success_row(kb.lookup_knowledge({"query": "jmap 内存泄漏"}), 5.0)
        now = dt.datetime.now(dt.UTC)
        levels = ["PRECISE", "HIGHLY_RELEVANT", "REFERENCE", "NO_CONFIDENT_MATCH"]
        batch = []
        started = time.perf_counter()
        with kb.repository.engine.begin() as conn:
            for n in range(count):
                batch.append(
                    row
                    | {
                        "session_id": f"s{n // 10}",
                        "call": n % 10 + 1,
                        "request_id": uuid.uuid4().hex[:8],
                        "relevance_level": levels[n % 4],
                        "created_at": now - dt.timedelta(seconds=(count - n) * 30),
                    }
                )
                if len(batch) == 5000:
                    conn.execute(insert(ToolInvocationRow), batch)
                    batch = []
            if batch:
                conn.execute(insert(ToolInvocationRow), batch)
        fill = time.perf_counter() - started
        store, out = kb.invocations, [f"| {label}: insert {count:,} rows | {fill * 1000 / count:.3f} per row | |"]
        for name, kwargs in (
            ("list --session", {"session_id": f"s{count // 20}"}),
            ("list --since 1h", {"since": now - dt.timedelta(hours=1)}),
            ("list --level NO_CONFIDENT_MATCH (newest 50)", {"level": "NO_CONFIDENT_MATCH", "limit": 50}),
            ("list (newest 50)", {"limit": 50}),
        ):
            times = []
            for _ in range(20):
                t0 = time.perf_counter()
                store.list(**kwargs)
                times.append((time.perf_counter() - t0) * 1000)
            out.append(line(f"{label}: {name}", times))
        t0 = time.perf_counter()
        removed = store.prune(before=now - dt.timedelta(days=7))
        out.append(f"| {label}: prune --older-than 7d ({removed:,} rows) | {(time.perf_counter() - t0) * 1000:.1f} | |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--postgres", default="")
    args = parser.parse_args()
    print("| step | p50 ms | p95 ms |\n|---|---:|---:|")
    targets = [("SQLite", lambda home: Settings(home=home))]
    if args.postgres:

        def pg(home: str) -> Settings:
            name = f"kbseek_bench_{uuid.uuid4().hex[:8]}"
            admin = create_engine(args.postgres, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            admin.dispose()
            return Settings(home=home, database_url=args.postgres.rsplit("/", 1)[0] + f"/{name}")

        targets.append(("PostgreSQL", pg))
    for label, make in targets:
        for row in per_call(make(tempfile.mkdtemp()), label, args.rounds):
            print(row, flush=True)
        for row in listing(make(tempfile.mkdtemp()), label, args.rows):
            print(row, flush=True)


if __name__ == "__main__":
    main()
