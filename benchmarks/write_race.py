"""Writes that race on real ``kbseek serve`` processes: many clients writing, replacing, deleting and reading the
same two paths (one folder), with reindexes among them; then a check at rest that the stored originals equal the
database.

Usage (from the project root):
  .venv/bin/python benchmarks/write_race.py                    # 20 clients, 60 s, one server on SQLite (issue 15)
  .venv/bin/python benchmarks/write_race.py --processes 2 --postgres postgresql://postgres@127.0.0.1:5432/postgres
  .venv/bin/python benchmarks/write_race.py --clients 8 --requests 25 --processes 2 --postgres …   # the short form

Clients start together at a barrier; client ``c`` talks to server ``c % processes``. A data home has one owner, so
with ``--processes 2`` each server has its own home on one shared database (``--postgres``: a fresh database made
on that server and dropped after).
Each request is POST /api/documents (35%), PUT (25%), DELETE (20%) or GET (20%) of ``race/one.md`` or
``race/two.md``; one more client asks POST /api/reindex in a loop. Every answer must be 2xx, 404 or 409 and carry
no SQL or server path. After the servers stop, the repository and the file store are read directly (no start-up
repair first): every document must have its chunk rows, and with one server every row must have its original
with the same content, every original its row, and no temp file may be left (with several, each home keeps the
originals of its own writes only; a start repairs them from the database). Exits 1 on any bad answer or drift.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
from sqlalchemy import create_engine, func, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_load import free_port, wait_ready

from kbseek.adapters.filestore import FileStore
from kbseek.adapters.sql.engine import make_engine
from kbseek.adapters.sql.repository import SqlRepository
from kbseek.adapters.sql.tables import ChunkRow, DocumentRow
from kbseek.core.ids import sha256_hex

KBSEEK = str(Path(sys.executable).with_name("kbseek"))
PATHS = ("race/one.md", "race/two.md")
ALLOWED = {
    "POST": {200, 201, 409},
    "PUT": {200, 404, 409},
    "DELETE": {200, 404, 409},
    "GET": {200, 404},
    "REINDEX": {200, 409},
}
LEAKS = ("INSERT ", "SELECT ", "UPDATE ", "DELETE FROM", "sqlite3.", "psycopg.", "[SQL", "Traceback")


def body(client: int, n: int) -> bytes:
    sections = "\n\n".join(
        f"## 步骤 {i}\n\n客户端 {client} 第 {n} 次写入，检查 RACE_{client}_{n}_{i}。"
        for i in range(1 + (client + n) % 3)
    )
    return (
        f"---\ntitle: 竞争写入 {client}-{n}\nkeywords: [RACE_{client}_{n}]\nsummary: race {client} {n}\n---\n"
        f"# 竞争写入\n\n{sections}\n"
    ).encode()


class Tally:
    def __init__(self, home: Path) -> None:
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.bad: list[str] = []
        self.home = str(home)
        self._lock = threading.Lock()

    def flag(self, problem: str) -> None:
        with self._lock:
            self.bad.append(problem)

    def note(self, op: str, status: int, answer: str) -> None:
        with self._lock:
            self.statuses[(op, status)] += 1
            if status not in ALLOWED[op]:
                self.bad.append(f"{op} -> {status}: {answer[:300]}")
            elif any(leak in answer for leak in LEAKS) or self.home in answer:
                self.bad.append(f"{op} -> {status} shows internals: {answer[:300]}")


def client(
    c: int, base: str, tally: Tally, barrier: threading.Barrier, requests: int | None, until: list[float]
) -> None:
    rng = random.Random(c)
    with httpx.Client(base_url=base, timeout=120) as http:
        barrier.wait()
        n = 0
        while (n < requests) if requests is not None else (time.monotonic() < until[0]):
            path, roll = rng.choice(PATHS), rng.random()
            op = "POST" if roll < 0.35 else "PUT" if roll < 0.6 else "DELETE" if roll < 0.8 else "GET"
            try:
                if op == "POST":
                    r = http.post(
                        "/api/documents", files=[("files", (path.split("/")[1], body(c, n)))], data={"category": "race"}
                    )
                elif op == "PUT":
                    r = http.put(f"/api/documents/{path}", files={"file": ("x.md", body(c, n))})
                elif op == "DELETE":
                    r = http.delete(f"/api/documents/{path}")
                else:
                    r = http.get(f"/api/documents/{path}")
                tally.note(op, r.status_code, r.text)
            except httpx.HTTPError as exc:
                tally.note(op, 599, f"no answer: {exc!r}")
            n += 1


def reindexer(base: str, tally: Tally, barrier: threading.Barrier, done: threading.Event, own_writes: bool) -> None:
    """Reindex in a loop. When every write goes through this server (``own_writes``), a reindex that repairs
    anything found a write half done; with other servers on other homes it legitimately repairs their changes."""
    with httpx.Client(base_url=base, timeout=300) as http:
        barrier.wait()
        while not done.is_set():
            r = http.post("/api/reindex")
            tally.note("REINDEX", r.status_code, r.text)
            if own_writes and r.status_code == 200 and any(r.json()["repaired"].values()):
                tally.flag(f"REINDEX repaired {r.json()['repaired']} while writes ran")


def drift(database_url: str, knowledge_base: Path | None) -> list[str]:
    """Where the originals (when ``knowledge_base`` is given) and the database disagree, or a document lacks chunk
    rows, read directly (no start-up repair runs first)."""
    engine = make_engine(database_url)
    try:
        problems: list[str] = []
        if knowledge_base is not None:
            problems += file_drift(SqlRepository(engine), FileStore(knowledge_base))
        with engine.connect() as conn:
            counts = dict(conn.execute(select(ChunkRow.document_id, func.count()).group_by(ChunkRow.document_id)).all())
            for doc_id, path, chunk_count in conn.execute(
                select(DocumentRow.id, DocumentRow.path, DocumentRow.chunk_count)
            ):
                if counts.get(doc_id, 0) != chunk_count:
                    problems.append(f"{path}: {counts.get(doc_id, 0)} chunk rows, {chunk_count} expected")
        return problems
    finally:
        engine.dispose()


def file_drift(repository: SqlRepository, files: FileStore) -> list[str]:
    known = repository.hashes()
    problems = []
    for path, (digest, _) in known.items():
        data = files.read(path)
        if data is None:
            problems.append(f"{path}: a row with no original")
        elif sha256_hex(data) != digest:
            problems.append(f"{path}: the original is not the stored content")
    problems += [f"{path}: an original with no row" for path in files.paths() if path not in known]
    problems += [f"{t.name}: a temp file left behind" for t in files.temp_files()]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0, help="How long clients send (without --requests).")
    parser.add_argument("--requests", type=int, help="Requests per client instead of a duration.")
    parser.add_argument("--processes", type=int, default=1, help="kbseek serve processes, each with its own home.")
    parser.add_argument("--postgres", help="An admin URL of a PostgreSQL server: the run makes its own database.")
    parser.add_argument("--no-reindex", action="store_true", help="No client asking POST /api/reindex.")
    parser.add_argument("--keep", action="store_true", help="Keep the data home and the server logs.")
    args = parser.parse_args()
    if args.processes > 1 and not args.postgres:
        parser.error("several processes share a database server: give --postgres")
    home = Path(tempfile.mkdtemp(prefix="kbseek-race-")) / "home"
    env = {**os.environ, "KBSEEK_EMBEDDER": "none"}
    admin, database_url = None, f"sqlite:///{home / 'kbseek.db'}"
    if args.postgres:
        admin = create_engine(args.postgres, isolation_level="AUTOCOMMIT")
        name = f"kbseek_race_{uuid.uuid4().hex[:10]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        database_url = args.postgres.rsplit("/", 1)[0] + f"/{name}"
        env["KBSEEK_DATABASE_URL"] = database_url
    servers: list[tuple[subprocess.Popen, str]] = []
    tally, started = Tally(home), time.monotonic()
    try:
        home.mkdir(parents=True)
        for i in range(args.processes):
            port, log_path = free_port(), home.parent / f"serve-{i}.log"
            own_home = home if i == 0 else home.with_name(f"home-{i}")
            with log_path.open("w") as log:
                process = subprocess.Popen(
                    [KBSEEK, "serve", "--port", str(port)],
                    env=env | {"KBSEEK_HOME": str(own_home)},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            servers.append((process, f"http://127.0.0.1:{port}"))
            wait_ready(servers[-1][1], process, log_path)
        until = [0.0]  # set by the barrier's last arrival: the duration counts from the common start
        barrier = threading.Barrier(
            args.clients + (not args.no_reindex), action=lambda: until.__setitem__(0, time.monotonic() + args.seconds)
        )
        done = threading.Event()
        threads = [
            threading.Thread(
                target=client, args=(c, servers[c % len(servers)][1], tally, barrier, args.requests, until)
            )
            for c in range(args.clients)
        ]
        if not args.no_reindex:
            threads.append(
                threading.Thread(target=reindexer, args=(servers[-1][1], tally, barrier, done, len(servers) == 1))
            )
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads[: args.clients]:
            t.join()
        done.set()
        for t in threads[args.clients :]:
            t.join()
        window = time.monotonic() - started
    finally:
        for process, _ in servers:
            process.terminate()
            process.wait(timeout=30)
    problems = drift(database_url, home / "knowledge_base" if args.processes == 1 else None)
    if admin is not None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database_url.rsplit("/", 1)[1]}" WITH (FORCE)'))
        admin.dispose()
    total = sum(tally.statuses.values())
    print(
        f"{args.clients} clients on {args.processes} process(es), "
        f"{'PostgreSQL' if args.postgres else 'SQLite'}, {window:.1f} s, {total} requests "
        f"({total / window:.0f}/s); nproc {os.cpu_count()}"
    )
    print("statuses: " + ", ".join(f"{op} {status}: {n}" for (op, status), n in sorted(tally.statuses.items())))
    print(f"bad answers: {len(tally.bad)}" + "".join(f"\n  {b}" for b in tally.bad[:5]))
    print(f"drift at rest: {len(problems)}" + "".join(f"\n  {p}" for p in problems[:5]))
    if not args.keep:
        shutil.rmtree(home.parent, ignore_errors=True)
    else:
        print(f"kept: {home.parent}")
    return 0 if not tally.bad and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
