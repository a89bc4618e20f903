"""PostgreSQL full-text as kbseek's lexical lane, against the in-memory BM25 lane: quality and latency.

Usage:
  python benchmarks/scaling_pg.py quality [--database-url URL]
  python benchmarks/scaling_pg.py latency --home DIR [--database-url URL]   (a home built by scaling.py)

PostgreSQL has no Chinese parser here, so each chunk is indexed as kbseek's own analyser tokens (the tokens BM25
indexes, ``core.analysis``): a ``tsvector`` written literally (``'token':positions``, so PostgreSQL's ``simple``
parser never re-splits a token such as ``err_timeout`` or ``数据库``), with a GIN index. A query is the analyser's
tokens OR-ed into a ``tsquery``. Three rankers over the rows it matches:

- ``ts_rank_cd`` (cover density, normalised by document length: flag 1);
- ``ts_rank`` (term frequency, flag 1);
- ``bm25_sql``: Lucene BM25 written in SQL (k1 1.2, b 0.75, as the in-memory index): document frequencies in a side
  table built once with ``ts_stat``, term frequencies from each matched row's positions (PostgreSQL keeps at most 256
  positions per lexeme, so a tf above 256 counts as 256), document lengths in a column.

``quality`` scores each ranker and the in-memory BM25 lane alone (same tokens, same depth) with the evaluation
machinery (``evaluation.runner.run_policy``, the datasets' own judgments) on three shared datasets; ``latency``
loads a synthetic home's cached tokens into PostgreSQL and times the 110 TiDB FAQ questions, top 50.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from kbseek.core.analysis import Analyzer
from kbseek.evaluation.datasets import Query, load_dataset, open_dataset_kb
from kbseek.evaluation.runner import run_policy
from kbseek.retrieval.index_copy import lexical_text
from kbseek.settings import Settings

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DATASETS = ("superbizagent-runbooks", "prometheus-operator-runbooks", "tidb-faq-zh-dev")
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
RANKERS = ("ts_rank_cd", "ts_rank", "bm25_sql")
K1, B = 1.2, 0.75
TIMEOUT_MS = 10_000  # a lexical lane slower than this per query cannot serve a lookup
MAX_POSITION = 16383  # PostgreSQL's largest tsvector position


def quote(token: str) -> str:
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_literal(tokens: Sequence[str]) -> str:
    """The tokens as a tsvector literal with their positions: PostgreSQL stores them as they are."""
    positions: dict[str, list[int]] = {}
    for i, token in enumerate(tokens, 1):
        if token:
            positions.setdefault(token, []).append(min(i, MAX_POSITION))
    return " ".join(f"{quote(t)}:{','.join(map(str, p[:256]))}" for t, p in positions.items())


class PgLexicalLane:
    """A table of (chunk id, tsvector, length) with a GIN index and a document-frequency side table."""

    def __init__(self, conn: psycopg.Connection, table: str) -> None:
        self.conn, self.table = conn, table
        self.rows, self.avgdl = 0, 1.0

    def load(self, rows: Iterable[tuple[str, Sequence[str]]]) -> dict[str, float]:
        t, started = self.table, time.perf_counter()
        with self.conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {t}, {t}_df")
            cur.execute(f"CREATE UNLOGGED TABLE {t} (chunk_id text PRIMARY KEY, tsv tsvector NOT NULL, len int)")
            total = 0
            with cur.copy(f"COPY {t} (chunk_id, tsv, len) FROM STDIN") as copy:
                for chunk_id, tokens in rows:
                    copy.write_row((chunk_id, tsvector_literal(tokens), len(tokens)))
                    total += len(tokens)
                    self.rows += 1
            copied = time.perf_counter()
            cur.execute(f"CREATE INDEX {t}_gin ON {t} USING gin (tsv)")
            cur.execute(
                f"CREATE UNLOGGED TABLE {t}_df AS SELECT word AS term, ndoc AS df FROM ts_stat('SELECT tsv FROM {t}')"
            )
            cur.execute(f"ALTER TABLE {t}_df ADD PRIMARY KEY (term)")
            cur.execute(f"ANALYZE {t}")
            cur.execute(f"SELECT pg_total_relation_size('{t}'), pg_total_relation_size('{t}_df')")
            size, df_size = cur.fetchone()  # type: ignore[misc]
        self.conn.commit()
        self.avgdl = total / max(self.rows, 1)
        return {
            "rows": self.rows,
            "copy_s": round(copied - started, 1),
            "index_s": round(time.perf_counter() - copied, 1),
            "table_and_gin_mib": round(size / 2**20, 1),
            "df_table_mib": round(df_size / 2**20, 1),
        }

    def search(self, tokens: Sequence[str], ranker: str, k: int) -> list[str]:
        counts = Counter(t for t in tokens if t)
        if not counts:
            return []
        query = " | ".join(quote(t) for t in counts)
        t = self.table
        with self.conn.cursor() as cur:
            if ranker == "bm25_sql":
                cur.execute(
                    f"""WITH q AS (
                          SELECT d.term, ln(1 + (%(n)s - d.df + 0.5) / (d.df + 0.5)) * u.times AS idf
                          FROM unnest(%(terms)s::text[], %(times)s::int[]) AS u(term, times)
                          JOIN {t}_df d USING (term)),
                        m AS (SELECT chunk_id, tsv, len FROM {t} WHERE tsv @@ %(query)s::tsquery)
                        SELECT m.chunk_id FROM m, unnest(m.tsv) AS l JOIN q ON q.term = l.lexeme
                        GROUP BY m.chunk_id, m.len
                        ORDER BY sum(q.idf * cardinality(l.positions) * {K1 + 1} / (cardinality(l.positions)
                                 + {K1} * (1 - {B} + {B} * m.len / %(avgdl)s))) DESC, m.chunk_id
                        LIMIT %(k)s""",
                    {
                        "n": self.rows,
                        "terms": list(counts),
                        "times": list(counts.values()),
                        "query": query,
                        "avgdl": self.avgdl,
                        "k": k,
                    },
                )
            else:
                cur.execute(
                    f"SELECT chunk_id FROM {t} WHERE tsv @@ %(q)s::tsquery "
                    f"ORDER BY {ranker}(tsv, %(q)s::tsquery, 1) DESC, chunk_id LIMIT %(k)s",
                    {"q": query, "k": k},
                )
            return [row[0] for row in cur.fetchall()]

    def drop(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {self.table}, {self.table}_df")
        self.conn.commit()


def quality(url: str, work: Path) -> list[dict[str, Any]]:
    results = []
    with psycopg.connect(url) as conn:
        for name in DATASETS:
            dataset = load_dataset(DATA / name)
            settings = Settings(home=work / name, embedder="none", log_level="WARNING")
            kb = open_dataset_kb(dataset, settings)
            indexes = kb.indexes
            lane = PgLexicalLane(conn, "kbseek_bench_fts")
            tokens = {cid: indexes.analyzer.tokens(lexical_text(c)) for cid, c in indexes.chunks.items()}
            loaded = lane.load(tokens.items())

            def pg(query: Query, policy: str, depth: int, lane: PgLexicalLane = lane, idx: Any = indexes) -> list:
                return [idx.chunks[c] for c in lane.search(idx.analyzer.tokens(query.text), policy, depth)]

            def bm25(query: Query, policy: str, depth: int, idx: Any = indexes) -> list:
                return [idx.chunks[h.chunk_id] for h in idx.bm25.search(idx.analyzer.tokens(query.text), k=depth)]

            row: dict[str, Any] = {"dataset": name, "chunks": len(tokens), "queries": len(dataset.queries), **loaded}
            names = ["ndcg@10", "mrr@10", "recall@10"]
            runs = [("bm25 in memory", bm25, "bm25"), *((f"pg {r}", pg, r) for r in RANKERS)]
            runs.append(("kbseek lexical policy (L0 + BM25)", kb, "lexical"))
            for label, source, policy in runs:
                result = run_policy(source, dataset, policy=policy, depth=50, names=names, name=label, overrides={})
                row[label] = {m: result.summary[m]["mean"] for m in names} | {"seconds": round(result.seconds, 2)}
            lane.drop()
            kb.close()
            results.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
    return results


def cached_tokens(home: Path, size: int | None) -> Iterable[tuple[str, list[str]]]:
    """A built home's cached analyser tokens; with ``size``, repeated under new ids until there are that many."""
    import sqlite3

    db = sqlite3.connect(next(home.glob("*.db")))
    rows = [(cid, tokens.split("\x1f")) for cid, tokens in db.execute("SELECT chunk_id, tokens FROM chunk_tokens")]
    db.close()
    for i in range(size or len(rows)):
        chunk_id, tokens = rows[i % len(rows)]
        yield f"{chunk_id}-{i // len(rows)}", tokens


def latency(url: str, home: Path, rounds: int, size: int | None) -> dict[str, Any]:
    analyzer = Analyzer()
    questions = [
        json.loads(line)["text"]
        for line in (DATA / "tidb-faq-zh-dev" / "queries.jsonl").read_text("utf-8").splitlines()
    ]
    out: dict[str, Any] = {
        "home": home.name,
        "size": size,
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    with psycopg.connect(url) as conn:
        lane = PgLexicalLane(conn, "kbseek_bench_fts_scale")
        out.update(lane.load(cached_tokens(home, size)))
        with conn.cursor() as cur:
            cur.execute(f"SET statement_timeout = {TIMEOUT_MS}")
        conn.commit()
        for ranker in RANKERS:
            timings, timeouts = [], 0
            for q in questions[:5] + questions * rounds:  # the first five warm the buffers
                tokens = analyzer.tokens(q)
                started = time.perf_counter()
                try:
                    lane.search(tokens, ranker, 50)
                except psycopg.errors.QueryCanceled:
                    conn.rollback()
                    timeouts += 1
                timings.append((time.perf_counter() - started) * 1000)
                if timeouts >= 5 or sum(timings) > 180_000:  # cannot serve at this size: say so rather than wait
                    break
            timings = timings[5:] or timings
            out[ranker] = {f"p{p}_ms": round(float(np.percentile(timings, p)), 1) for p in (50, 95, 99)}
            out[ranker] |= {"queries": len(timings), "timeouts": timeouts}
            print(ranker, out[ranker], file=sys.stderr, flush=True)
        lane.drop()
    out["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("quality", "latency"))
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--size", type=int, default=None, help="latency: rows (the home's tokens repeated)")
    args = parser.parse_args()
    if args.step == "quality":
        work = args.work or Path(tempfile.mkdtemp(prefix="kbseek-pg-lexical-"))
        print(json.dumps(quality(args.database_url, work), ensure_ascii=False, indent=1))
    else:
        print(json.dumps(latency(args.database_url, args.home, args.rounds, args.size), ensure_ascii=False))


if __name__ == "__main__":
    main()
