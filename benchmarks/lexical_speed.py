"""L0 analyze_query latency at 1k/10k documents; our BM25 against bm25s on SciFact.

Usage: python benchmarks/lexical_speed.py   (needs ../shared/data; prints Markdown for docs/benchmarks.md)
"""

from __future__ import annotations

import json
import statistics
import time
import tracemalloc
from pathlib import Path

import bm25s
import numpy as np

from kbseek.core.analysis import Analyzer
from kbseek.core.keywords import KeywordIndex
from kbseek.core.lexical import BM25Index
from kbseek.core.models import DocumentCard

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def l0_latency() -> list[str]:
    corpus = rows(DATA / "tidb-faq-zh-dev" / "corpus.jsonl")
    queries = [r["text"] for r in rows(DATA / "tidb-faq-zh-dev" / "queries.jsonl")]
    lines = ["| documents | build s | p50 ms | p95 ms | mean matches |", "|---:|---:|---:|---:|---:|"]
    for size in (1_000, 10_000):
        analyzer = Analyzer()
        entries = []
        for i, row in enumerate(corpus[:size]):
            words = [w for w in analyzer.tokens(row["text"][:300]) if len(w) >= 2][:3]
            entries.append(
                DocumentCard(
                    f"d{i}",
                    row["_id"],
                    row["title"],
                    row["text"][:80].replace("\n", " "),
                    (f"ERR_CODE_{i}", *words),
                    row["_id"].split("/")[0],
                )
            )
        analyzer.set_words([k for e in entries for k in e.keywords])
        index = KeywordIndex(analyzer)
        started = time.perf_counter()
        index.load(entries)
        build = time.perf_counter() - started
        asked = queries + [f"ERR_CODE_{i} 报错" for i in range(0, size, size // 100)]
        for q in asked[:20]:
            index.analyze_query(q)  # warm caches
        timings, matches = [], []
        for q in asked:
            started = time.perf_counter()
            hint = index.analyze_query(q)
            timings.append((time.perf_counter() - started) * 1000)
            matches.append(len(hint.matches))
        lines.append(
            f"| {size:,} | {build:.2f} | {percentile(timings, 50):.3f} | {percentile(timings, 95):.3f} "
            f"| {statistics.mean(matches):.1f} |"
        )
    return lines


def bm25_comparison() -> list[str]:
    corpus = rows(DATA / "beir-scifact" / "corpus.jsonl")
    queries = [r["text"] for r in rows(DATA / "beir-scifact" / "queries.jsonl")]
    analyzer = Analyzer()
    started = time.perf_counter()
    docs = [analyzer.tokens(f"{r['title']}\n{r['text']}") for r in corpus]
    analysis = time.perf_counter() - started
    query_tokens = [analyzer.tokens(q) for q in queries]

    tracemalloc.start()
    started = time.perf_counter()
    ours = BM25Index(k1=1.2, b=0.75)
    for i, tokens in enumerate(docs):
        ours.add(str(i), tokens)
    ours_build = time.perf_counter() - started
    ours_memory = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()

    tracemalloc.start()
    started = time.perf_counter()
    theirs = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    theirs.index(docs, show_progress=False)
    theirs_build = time.perf_counter() - started
    theirs_memory = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()

    started = time.perf_counter()
    for tokens in query_tokens:
        ours.search(tokens, k=10)
    ours_qps = len(query_tokens) / (time.perf_counter() - started)
    started = time.perf_counter()
    for tokens in query_tokens:
        theirs.retrieve([tokens], k=10, show_progress=False, n_threads=1)
    theirs_qps = len(query_tokens) / (time.perf_counter() - started)

    started = time.perf_counter()
    ours.remove(["0"])
    ours.add("0", docs[0])
    ours_update = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    bm25s.BM25(k1=1.2, b=0.75, method="lucene").index(docs, show_progress=False)
    theirs_update = (time.perf_counter() - started) * 1000

    top_ours = [[h.chunk_id for h in ours.search(t, k=10)] for t in query_tokens[:50]]
    agree = sum(
        len(set(a) & {str(i) for i in theirs.retrieve([t], k=10, show_progress=False)[0][0]})
        for a, t in zip(top_ours, query_tokens[:50])
    ) / (10 * 50)
    return [
        f"SciFact: {len(docs):,} documents, {len(query_tokens)} queries; analysis (both share it) {analysis:.1f} s.",
        "",
        "| | build s | peak build memory MiB | queries/s (top 10, 1 thread) | change one document ms |",
        "|---|---:|---:|---:|---:|",
        f"| kbseek BM25Index | {ours_build:.2f} | {ours_memory:.0f} | {ours_qps:,.0f} | {ours_update:.2f} |",
        f"| bm25s 0.3.16 (lucene) | {theirs_build:.2f} | {theirs_memory:.0f} | {theirs_qps:,.0f} "
        f"| {theirs_update:.0f} (full rebuild) |",
        "",
        f"Top-10 overlap between the two on the first 50 queries: {agree:.1%} (scores agree to 1e-5 in tests).",
    ]


if __name__ == "__main__":
    print(
        "\n".join(
            [
                "### L0 analyze_query (tidb-faq-zh-dev titles, summaries, 4 keywords each)",
                "",
                *l0_latency(),
                "",
                "### BM25",
                "",
                *bm25_comparison(),
            ]
        )
    )
