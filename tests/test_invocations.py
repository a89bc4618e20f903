"""tool_invocation records: one row per lookup_knowledge call, failures too, never failing the call."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import text
from support import EXAMPLES

from kbseek.errors import InvalidRequest, NotFoundError


def test_every_call_is_recorded_with_what_each_layer_found(kb):
    kb.ingest([EXAMPLES / "knowledge_base"])
    response = kb.lookup_knowledge({"query": "jmap 内存泄漏", "session_id": "diag-9"})
    kb.lookup_knowledge({"query": "jmap 内存泄漏", "session_id": "diag-9"})
    first, second = kb.invocations.list(session_id="diag-9")
    assert (first["call"], second["call"]) == (1, 2) and first["success"] is True
    assert first["request_id"] == response.request_id and first["policy"] == "hybrid"
    assert first["l0_match_count"] == len(response.hint.matches) > 0 and first["retrieval_layer"].startswith("L0")
    details = first["retrieval_details"]
    assert details["l0_matches"][0]["path"] == "troubleshoot/jvm-oom.md"
    assert details["lanes"]["bm25"][0]["rank"] == 1 and details["evidence_status"] == first_status(response)
    assert first["relevance_level"] == response.answer.level and first["output_preview"].startswith("answer")
    assert second["retrieval_details"]["deduplicated"] and "already given in call 1" in second["dedup_reason"]
    assert first["timings"]["total"] > 0 and first["duration_ms"] >= first["timings"]["total"] * 0.5


def first_status(response):
    return response.answer.evidence_status


def test_failed_calls_are_recorded_and_re_raised(kb):
    kb.ingest([EXAMPLES / "knowledge_base"])
    with pytest.raises(InvalidRequest):
        kb.lookup_knowledge({"query": "x", "top_k": "many", "session_id": "bad"})
    with pytest.raises(NotFoundError):
        kb.lookup_knowledge({"query": "x", "section": "nope.md#a", "session_id": "bad"})
    rows = kb.invocations.list(session_id="bad")
    assert [r["success"] for r in rows] == [False, False]
    assert "top_k" in rows[0]["error"] and "NotFoundError" in rows[1]["error"]


def test_a_broken_record_table_does_not_fail_the_lookup(kb, caplog):
    kb.ingest([EXAMPLES / "knowledge_base"])
    engine = kb.repository.engine
    with engine.begin() as conn:  # the table goes away under the running service, and comes back after
        conn.execute(text("ALTER TABLE tool_invocations RENAME TO tool_invocations_away"))
    try:
        with caplog.at_level(logging.WARNING, logger="kbseek"):
            response = kb.lookup_knowledge({"query": "ERR_TIMEOUT"})
            kb.invocations.flush()  # the writer thread meets the missing table now, not after it is back
    finally:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE tool_invocations_away RENAME TO tool_invocations"))
    assert response.answer.status == "answer"
    assert "tool invocation not recorded" in caplog.text
    assert b"kbseek_invocation_record_failures_total 1.0" in kb.telemetry.exposition()


def test_trace_shows_a_session_in_order(tmp_path):
    import json

    import jsonschema
    from support import ROOT
    from typer.testing import CliRunner

    from kbseek.interfaces.cli import app

    runner = CliRunner()
    home = str(tmp_path / "home")
    assert runner.invoke(app, ["--home", home, "ingest", str(EXAMPLES / "knowledge_base")]).exit_code == 0
    for query in ("jmap 内存泄漏", "jmap 内存泄漏", "x"):
        args = ["--home", home, "lookup", query, "--session", "t1"]
        runner.invoke(app, args + (["--section", "nope.md#a"] if query == "x" else []))
    result = runner.invoke(app, ["--home", home, "trace", "t1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    jsonschema.validate(data, json.loads((ROOT / "schemas" / "trace.schema.json").read_text("utf-8")))
    first, second, failed = data["calls"]
    assert [first["call"], second["call"]] == [1, 2] and failed["success"] is False
    assert first["evidence"][0]["path"] == "troubleshoot/jvm-oom.md"
    assert second["deduplicated"] and all(d["first_call"] == 1 for d in second["deduplicated"])
    seen = {d["path"]: d for d in data["documents_seen"]}
    assert seen["troubleshoot/jvm-oom.md"]["first_call"] == 1 and seen["troubleshoot/jvm-oom.md"]["anchors"]
    human = runner.invoke(app, ["--home", home, "trace", "t1"])
    assert "DEDUPED" in human.stdout and "FAILED" in human.stdout
    assert runner.invoke(app, ["--home", home, "trace", "nobody", "--json"]).exit_code == 2


def test_verifier_summary_is_bounded_and_names_gaps(kb):
    from kbseek.observability.trace_summary import summarize

    kb.ingest([EXAMPLES / "knowledge_base"])
    for query in ("ERR_TIMEOUT 怎么排查", "光合作用的化学方程式是什么", "ERR_TIMEOUT 怎么排查"):
        kb.lookup_knowledge({"query": query, "session_id": "v1"})
    summary = summarize(kb.trace("v1"))
    assert summary["calls"] == 3 and summary["no_confident_match"] == ["光合作用的化学方程式是什么"]
    assert summary["repeated"] == ["ERR_TIMEOUT 怎么排查"] and "api/payment-errors.md" in summary["sources"]
    assert [q["evidence_status"] for q in summary["queries"]][1] == "none"
    assert "1 without a confident match; 1 repeated" in summary["text"]
    assert 0 < summary["evidence_score"] < 1  # the photosynthesis call counts 0
    for n in range(40):
        kb.lookup_knowledge({"query": f"支付网关 超时 第{n}次 排查 ERR_TIMEOUT", "session_id": "v1"})
    long = summarize(kb.trace("v1"), limit=600)
    assert len(long["text"]) <= 600 and "more call(s)" in long["text"] and long["calls"] == 43
