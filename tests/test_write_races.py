"""Writes that race (issue 15): many clients writing, replacing, deleting and reading the same paths, and repairs
run while they do, on both databases.

Every response must be 2xx, 404 or 409 (never 5xx, never SQL text or a server path), and at rest the stored
originals must equal the database: no row without its original, no original without its row, no temp file left.
Clients start together at a barrier and do a fixed number of requests each; nothing waits on a clock.
The long form (20 clients, 60 s, and two real ``kbseek serve`` processes) is ``benchmarks/write_race.py``.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from kbseek.adapters.sql.engine import make_engine
from kbseek.adapters.sql.repository import SqlRepository
from kbseek.adapters.sql.tables import ChunkRow, DocumentRow
from kbseek.core.document import ChunkingConfig, parse_document
from kbseek.core.ids import sha256_hex
from kbseek.errors import KbseekError, NotFoundError, StorageError
from kbseek.interfaces.http.app import create_app
from kbseek.service import KnowledgeBase

PATHS = ("race/one.md", "race/two.md")  # one folder: deleting one may empty it while the other is written
ALLOWED = {
    "POST": {200, 201, 409},
    "PUT": {200, 404, 409},
    "DELETE": {200, 404, 409},
    "GET": {200, 404},
    "REINDEX": {200, 409},
}
LEAKS = ("INSERT ", "SELECT ", "UPDATE ", "DELETE FROM", "sqlite3.", "psycopg.", "[SQL", "Traceback")


def body(client: int, n: int) -> bytes:
    """A distinct document per (client, n); its section count varies so chunk rows come and go."""
    sections = "\n\n".join(
        f"## 步骤 {i}\n\n客户端 {client} 第 {n} 次写入，检查 RACE_{client}_{n}_{i}。"
        for i in range(1 + (client + n) % 3)
    )
    return (
        f"---\ntitle: 竞争写入 {client}-{n}\nkeywords: [RACE_{client}_{n}]\nsummary: race {client} {n}\n---\n"
        f"# 竞争写入\n\n{sections}\n"
    ).encode()


def drift(kb: KnowledgeBase) -> list[str]:
    """Where the stored originals and the database disagree (the repository and the file store read directly)."""
    problems = []
    known = kb.repository.hashes()
    for path, (digest, _) in known.items():
        data = kb.files.read(path)
        if data is None:
            problems.append(f"{path}: a row with no original")
        elif sha256_hex(data) != digest:
            problems.append(f"{path}: the original is not the stored content")
    problems += [f"{path}: an original with no row" for path in kb.files.paths() if path not in known]
    problems += [f"{temp.name}: a temp file left behind" for temp in kb.files.temp_files()]
    return problems + rows_inconsistent(kb.repository)


def rows_inconsistent(repository: SqlRepository) -> list[str]:
    """Documents whose chunk rows do not match their chunk count (a write half applied)."""
    with repository.engine.connect() as conn:
        counts = dict(conn.execute(select(ChunkRow.document_id, func.count()).group_by(ChunkRow.document_id)).all())
        docs = conn.execute(select(DocumentRow.id, DocumentRow.path, DocumentRow.chunk_count)).all()
    problems = [
        f"{path}: {counts.get(doc_id, 0)} chunk rows, {chunk_count} expected"
        for doc_id, path, chunk_count in docs
        if counts.get(doc_id, 0) != chunk_count
    ]
    return problems + [f"chunks of a missing document {doc_id}" for doc_id in set(counts) - {d[0] for d in docs}]


class Storm:
    """``clients`` threads released together, each doing ``per_client`` requests; tallies every outcome."""

    def __init__(self, clients: int, per_client: int) -> None:
        self.clients, self.per_client = clients, per_client
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.bad: list[str] = []
        self._lock = threading.Lock()

    def note(self, op: str, status: int, text: str = "") -> None:
        with self._lock:
            self.statuses[(op, status)] += 1
            if status not in ALLOWED[op]:
                self.bad.append(f"{op} -> {status}: {text[:300]}")
            elif any(leak in text for leak in LEAKS):
                self.bad.append(f"{op} -> {status} leaks internals: {text[:300]}")

    def run(self, work: Callable[[int, random.Random, int], None], extra: Callable[[], None] | None = None) -> None:
        """Each client calls ``work(client, rng, n)``; ``extra`` (e.g. repairs) runs beside them, released with them."""
        barrier = threading.Barrier(self.clients + (extra is not None))

        def client(c: int) -> None:
            rng = random.Random(c)
            barrier.wait()
            for n in range(self.per_client):
                work(c, rng, n)

        with ThreadPoolExecutor(self.clients + 1) as pool:
            futures = [pool.submit(client, c) for c in range(self.clients)]
            if extra is not None:
                futures.append(pool.submit(lambda: (barrier.wait(), extra())))
            for future in futures:
                future.result()

    @property
    def summary(self) -> str:
        return ", ".join(f"{op} {status}: {count}" for (op, status), count in sorted(self.statuses.items()))


def api_work(client: TestClient, storm: Storm) -> Callable[[int, random.Random, int], None]:
    def work(c: int, rng: random.Random, n: int) -> None:
        path = rng.choice(PATHS)
        roll = rng.random()
        if roll < 0.35:
            r = client.post(
                "/api/documents",
                files=[("files", (path.split("/")[1], body(c, n), "text/markdown"))],
                data={"category": "race"},
            )
            op = "POST"
        elif roll < 0.6:
            r, op = client.put(f"/api/documents/{path}", files={"file": ("x.md", body(c, n))}), "PUT"
        elif roll < 0.8:
            r, op = client.delete(f"/api/documents/{path}"), "DELETE"
        else:
            r, op = client.get(f"/api/documents/{path}"), "GET"
        storm.note(op, r.status_code, r.text)

    return work


@pytest.fixture
def api(kb: KnowledgeBase) -> Iterator[TestClient]:
    with TestClient(create_app(kb=kb, mcp=False)) as c:
        yield c


def test_same_path_writes_over_the_api_never_fail_and_leave_no_drift(api, kb):
    storm = Storm(clients=12, per_client=20)
    storm.run(api_work(api, storm))
    assert not storm.bad, f"{len(storm.bad)} bad responses ({storm.summary}); first: {storm.bad[:3]}"
    assert sum(storm.statuses.values()) == 12 * 20
    assert not drift(kb), drift(kb)
    assert storm.statuses[("POST", 201)] > 0 and storm.statuses[("DELETE", 200)] > 0  # the storm really wrote


def test_reindex_during_writes_moves_no_in_flight_original(api, kb):
    storm = Storm(clients=8, per_client=15)

    def reindexes() -> None:
        for _ in range(6):
            r = api.post("/api/reindex")
            storm.note("REINDEX", r.status_code, r.text)
            if r.status_code == 200:
                repaired = r.json()["repaired"]  # a repair that found something repaired a write in flight
                assert not any(repaired.values()), repaired

    storm.run(api_work(api, storm), extra=reindexes)
    assert not storm.bad, f"{len(storm.bad)} bad responses ({storm.summary}); first: {storm.bad[:3]}"
    assert storm.statuses[("REINDEX", 200)] == 6
    assert not drift(kb), drift(kb)
    assert not kb.settings.orphan_dir.exists() or not any(kb.settings.orphan_dir.rglob("*.md"))


def test_repair_waits_for_a_write_between_its_original_and_its_commit(kb):
    """A write paused after its original is on disk and before its row commits: a repair started then must not
    take the original for an orphan; it runs after the write."""
    in_save, go, repaired = threading.Event(), threading.Event(), threading.Event()
    save = kb.repository.save

    def paused_save(*args, **kwargs):
        in_save.set()
        assert go.wait(timeout=60)
        return save(*args, **kwargs)

    kb.repository.save = paused_save  # the real save, entered later
    results: dict[str, object] = {}
    writer = threading.Thread(target=lambda: results.update(report=kb.upload(body(1, 1), "held.md", category="race")))
    writer.start()
    assert in_save.wait(timeout=60)
    repairer = threading.Thread(target=lambda: (results.update(repair=kb.repair()), repaired.set()))
    repairer.start()
    while not repaired.wait(timeout=0.01) and not _repair_waiting(kb):
        pass  # until the repair is done (the old behaviour) or waits for the write
    go.set()
    writer.join(timeout=60)
    repairer.join(timeout=60)
    assert results["report"].status == "added", results["report"]
    assert results["repair"] == {"rewritten": 0, "orphaned": 0, "temp_removed": 0}
    assert kb.files.read("race/held.md") == body(1, 1)
    assert not drift(kb), drift(kb)


def _repair_waiting(kb: KnowledgeBase) -> bool:
    writes = getattr(kb, "writes", None)
    return writes is not None and writes.exclusive_waiting > 0


def service_work(kbs: list[KnowledgeBase], storm: Storm) -> Callable[[int, random.Random, int], None]:
    """Writes straight through ``KnowledgeBase`` objects: client ``c`` uses ``kbs[c % len(kbs)]``."""

    def work(c: int, rng: random.Random, n: int) -> None:
        kb, path = kbs[c % len(kbs)], rng.choice(PATHS)
        roll = rng.random()
        op = "POST" if roll < 0.4 else "PUT" if roll < 0.7 else "DELETE"
        try:
            if op == "POST":
                report = kb.upload(body(c, n), path.split("/")[1], category="race")
            elif op == "PUT":
                report = kb.replace(path, body(c, n))
            else:
                kb.delete(path)
                report = None
        except NotFoundError:
            storm.note(op, 404)
            return
        except KbseekError as exc:
            storm.note(op, 409 if exc.code == "conflict" else 503, str(exc))
            return
        if report is not None and report.status == "failed":
            storm.note(op, 409 if report.error_code == "conflict" else 503, report.reason or "")
        else:
            storm.note(op, 200)

    return work


def test_two_knowledge_bases_on_one_home_write_in_turn(settings):
    """Two ``KnowledgeBase`` objects on one home stand for two processes (a server and a CLI, or two servers on
    one PostgreSQL): their writes to one path take turns, and a repair in one waits for writes in the other."""
    with KnowledgeBase.open(settings) as a, KnowledgeBase.open(settings) as b:
        storm = Storm(clients=8, per_client=15)

        def repairs() -> None:
            for _ in range(5):
                found = b.repair()
                assert not any(found.values()), found

        storm.run(service_work([a, b], storm), extra=repairs)
        assert not storm.bad, f"{len(storm.bad)} bad outcomes ({storm.summary}); first: {storm.bad[:3]}"
        assert not drift(a), drift(a)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
def test_processes_with_their_own_homes_on_one_postgresql_write_in_turn(tmp_path, settings):
    """Separate homes share only the database: its per-path lock alone keeps the rows whole."""
    other = settings.model_copy(update={"home": tmp_path / "other"})
    with KnowledgeBase.open(settings) as a, KnowledgeBase.open(other) as b:
        storm = Storm(clients=8, per_client=15)
        storm.run(service_work([a, b], storm))
        assert not storm.bad, f"{len(storm.bad)} bad outcomes ({storm.summary}); first: {storm.bad[:3]}"
        assert not rows_inconsistent(a.repository), rows_inconsistent(a.repository)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_token_cache_write_and_a_document_write_never_overlap(kb):
    """Deleting a document's chunks deletes their cached tokens; a cache write that holds tokens and then checks
    chunks deadlocked with it (PostgreSQL 'deadlock detected', a 503, with two servers). The cache write holds
    the cache alone: a document write started meanwhile waits for it."""
    assert kb.upload(body(1, 1), "one.md", category="race").status == "added"
    inside, go, replaced = threading.Event(), threading.Event(), threading.Event()

    def cache_write() -> None:
        with kb.repository._write():  # the transaction save_tokens writes in, held open
            inside.set()
            assert go.wait(timeout=60)

    writer = threading.Thread(target=cache_write)
    writer.start()
    assert inside.wait(timeout=60)
    results: dict[str, object] = {}
    replacer = threading.Thread(
        target=lambda: (results.update(report=kb.replace("race/one.md", body(2, 2))), replaced.set())
    )
    replacer.start()
    while not replaced.wait(timeout=0.01) and not _waiting_on_advisory_lock(kb):
        pass  # until the replace is done (it did not wait) or waits for the cache write
    overlapped = replaced.is_set()
    go.set()
    writer.join(timeout=60)
    replacer.join(timeout=60)
    assert not overlapped, "a document write ran inside a token-cache write"
    assert results["report"].status == "updated"


def _waiting_on_advisory_lock(kb: KnowledgeBase) -> bool:
    with kb.repository.engine.connect() as conn:
        return bool(conn.scalar(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")))


def test_a_write_that_waits_too_long_answers_409_and_changes_nothing(api, kb, monkeypatch):
    monkeypatch.setattr("kbseek.home.writelocks.WRITE_WAIT_S", 0.0)
    assert kb.upload(body(1, 1), "one.md", category="race").status == "added"
    with kb.writes.writing("race/one.md"):  # held here: the request's own thread cannot have it
        put = api.put("/api/documents/race/one.md", files={"file": ("x.md", body(2, 2))})
        gone = api.delete("/api/documents/race/one.md")
    assert put.status_code == 409 and put.json()["error"]["code"] == "conflict", put.text
    assert "race/one.md" in put.json()["error"]["message"]
    assert gone.status_code == 409, gone.text
    assert kb.files.read("race/one.md") == body(1, 1) and not drift(kb)


def test_write_locks_across_two_holders_of_one_home(tmp_path):
    """Two ``WriteLocks`` on one folder are two processes to each other (``flock`` on separate open files)."""
    from kbseek.errors import WriteConflictError
    from kbseek.home.writelocks import WriteLocks, _bucket

    first, second = WriteLocks(tmp_path / "locks"), WriteLocks(tmp_path / "locks")
    other = next(p for p in (f"race/{n}.md" for n in range(100)) if _bucket(p) != _bucket("race/one.md"))
    with first.writing("race/one.md"):
        with pytest.raises(WriteConflictError, match="race/one.md"):
            with second.writing("race/one.md", timeout=0):
                pass
        with second.writing(other, timeout=0):  # another path writes beside it
            pass
        with pytest.raises(WriteConflictError):
            with second.repairing(timeout=0):  # a repair elsewhere waits for the write
                pass
        refused: list[Exception] = []

        def repair_here() -> None:  # and so does one in the same process (another thread)
            try:
                with first.repairing(timeout=0):
                    pass
            except WriteConflictError as exc:
                refused.append(exc)

        repairer = threading.Thread(target=repair_here)
        repairer.start()
        repairer.join()
        assert len(refused) == 1
        assert first.exclusive_waiting == 0  # a repair that gave up holds nothing back
        with pytest.raises(RuntimeError):  # a write cannot start a repair: it would wait for itself
            with first.repairing(timeout=0):
                pass
    with second.repairing(timeout=0):
        with pytest.raises(WriteConflictError):
            with first.writing("race/one.md", timeout=0):
                pass
    with first.writing("race/one.md", timeout=0):
        pass


def test_storage_errors_name_the_document_not_sql_or_server_paths(tmp_path):
    """What a caller sees of a failed write says what failed; the SQL and the server's folders go to the log."""
    doc = parse_document(body(1, 1), path="race/one.md", config=ChunkingConfig(), source="one.md")
    down = SqlRepository(make_engine("postgresql://kbseek@127.0.0.1:9/none"))  # the discard port: nothing answers
    with pytest.raises(StorageError) as failed:
        down.save(doc, origin=None)
    assert "race/one.md" in str(failed.value)
    assert not any(leak in str(failed.value) for leak in (*LEAKS, "127.0.0.1", "port 1"))
    from kbseek.adapters.filestore import FileStore

    store = FileStore(tmp_path / "kb")
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "race").write_text("a file where the folder should be")
    with pytest.raises(StorageError) as refused:
        store.write("race/one.md", b"x")
    assert "race/one.md" in str(refused.value) and str(tmp_path) not in str(refused.value)
