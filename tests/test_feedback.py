"""Feedback on evidence on both databases: reports tied to the recorded call (unknown ids and misfits refused with
nothing stored), shown in the session trace, counted in the metrics, "outdated" on the review list, over the
service, REST (a guarded write) and MCP; "wrong" and "missed" reports turned into golden cases by the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import jsonschema
import pytest
from fastapi.testclient import TestClient
from mcp.client import Client
from support import ROOT, doc, write
from typer.testing import CliRunner

from kbseek.errors import InvalidRequest, NotFoundError
from kbseek.evaluation.cases import read_cases
from kbseek.interfaces.cli import app as cli_app
from kbseek.interfaces.http.app import create_app
from kbseek.interfaces.mcp_server import build_mcp_server
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DISK = doc(
    "磁盘满处理",
    "DISK_FULL",
    "磁盘写满的处理",
    "# 磁盘满处理\n\n## 清理\n\n清理 /var/log 下的旧日志 (logrotate)，再检查 inode 用量。\n",
    owner="storage-oncall",
)
PAY = doc(
    "支付超时处理",
    "ERR_PAY_TIMEOUT",
    "支付网关超时的处理",
    "# 支付超时处理\n\n## 步骤\n\n检查支付网关连接池 (pool_size) 与下游银行接口的延迟。\n",
)


def schema(name: str) -> dict:
    return json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text("utf-8"))


def asked(kb: KnowledgeBase, query: str, session: str | None = "s-1") -> tuple[str, list[str]]:
    """A lookup's request id and the chunk ids of its first document's pieces."""
    response = kb.lookup_knowledge({"query": query, **({"session_id": session} if session else {})})
    assert response.answer.documents, "the fixture question must get evidence"
    return response.request_id, list(response.answer.documents[0].pieces[0].chunk_ids)


def stored(kb: KnowledgeBase) -> int:
    return len(kb.reviews.feedback())


def test_reports_are_tied_to_the_call_traced_counted_and_feed_the_review_list(kb):
    for name, text in (("disk.md", DISK), ("pay.md", PAY)):
        kb.upload(text.encode(), name, category="ops")
    request_id, chunks = asked(kb, "DISK_FULL 磁盘满 logrotate")

    helped = kb.reviews.report({"request_id": request_id, "verdict": "helped"})  # the whole answer
    jsonschema.validate(helped, schema("feedback-report"))
    assert helped["session_id"] == "s-1" and helped["query"] == "DISK_FULL 磁盘满 logrotate"
    assert "ops/disk.md" in [e["path"] for e in helped["evidence"]] and helped["chunk_ids"] == []
    outdated = kb.reviews.report(
        {"request_id": request_id, "verdict": "outdated", "chunk_id": chunks[0], "session_id": "s-1", "note": "v2"}
    )
    assert outdated["evidence"] == [
        {"chunk_id": chunks[0], "path": "ops/disk.md", "heading_path": ["磁盘满处理", "清理"]}
    ]
    pay_chunk = kb.indexes.documents[kb.get_document("ops/pay.md").id].chunk_ids[0]
    missed = kb.reviews.report({"request_id": request_id, "verdict": "missed", "chunk_ids": [pay_chunk]})
    assert missed["evidence"][0]["path"] == "ops/pay.md"  # a missed chunk need not be in the answer

    for arguments, error, words in (
        ({"request_id": "no-such-call", "verdict": "wrong"}, NotFoundError, "no recorded lookup_knowledge call"),
        ({"request_id": request_id, "verdict": "wrong", "session_id": "s-2"}, InvalidRequest, "belongs to session"),
        ({"request_id": request_id, "verdict": "wrong", "chunk_ids": [pay_chunk]}, InvalidRequest, "was not in"),
        ({"request_id": request_id, "verdict": "wrong", "chunk_id": "zz"}, InvalidRequest, "no chunk 'zz'"),
        ({"request_id": request_id, "verdict": "great"}, InvalidRequest, "verdict"),
        ({"request_id": request_id, "verdict": "wrong", "extra": 1}, InvalidRequest, "extra"),
        ({"verdict": "wrong"}, InvalidRequest, "request_id"),
    ):
        with pytest.raises(error, match=words):
            kb.reviews.report(arguments)
    assert stored(kb) == 3  # the refused reports stored nothing

    trace = kb.trace("s-1")
    jsonschema.validate(trace, schema("trace"))
    assert [f["verdict"] for f in trace["feedback"]] == ["helped", "outdated", "missed"]
    assert [f["verdict"] for f in trace["calls"][0]["feedback"]] == ["helped", "outdated", "missed"]
    exposition = kb.metrics_exposition()
    assert b'kbseek_evidence_feedback_total{verdict="outdated"} 1.0' in exposition
    assert b'kbseek_evidence_feedback_total{verdict="wrong"}' not in exposition

    review = kb.reviews.stale()  # fresh by date, but reported outdated
    assert [(r["path"], r["stale"], r["reasons"]) for r in review] == [("ops/disk.md", False, ["1 outdated report(s)"])]
    assert kb.reviews.stale("storage-oncall")[0]["outdated_reports"] == 1


def test_rest_feedback_is_a_guarded_write(settings):
    keyed = settings.model_copy(update={"api_key": "w-secret", "read_api_key": "r-secret"})
    with KnowledgeBase.open(keyed) as kb:
        kb.upload(DISK.encode(), "disk.md", category="ops")
        request_id, chunks = asked(kb, "DISK_FULL 磁盘满 logrotate", session=None)
        with TestClient(create_app(kb=kb, mcp=False)) as client:
            read, write_key = {"Authorization": "Bearer r-secret"}, {"Authorization": "Bearer w-secret"}
            body = {"request_id": request_id, "verdict": "wrong", "chunk_ids": chunks, "note": "清理步骤不对"}
            assert client.post("/api/feedback", json=body).status_code == 401
            assert client.post("/api/feedback", json=body, headers=read).status_code == 403
            for bad, status in (
                ({**body, "request_id": "nope"}, 404),
                ({**body, "verdict": "meh"}, 422),
                ({**body, "chunk_ids": ["zz"]}, 422),
            ):
                response = client.post("/api/feedback", json=bad, headers=write_key)
                assert response.status_code == status, response.text
            assert client.get("/api/feedback", headers=read).json()["feedback"] == []  # refused: nothing stored
            created = client.post("/api/feedback", json=body, headers=write_key)
            assert created.status_code == 201, created.text
            jsonschema.validate(created.json(), schema("feedback-report"))
            assert (created.json()["actor"], created.json()["key_id"][:2]) == ("api", "k-")
            listed = client.get("/api/feedback", params={"verdict": "wrong"}, headers=read).json()["feedback"]
            assert [r["note"] for r in listed] == ["清理步骤不对"]
            assert client.get("/api/feedback", params={"verdict": "helped"}, headers=read).json()["feedback"] == []


def test_the_mcp_tool_reports_evidence(kb):
    kb.upload(DISK.encode(), "disk.md", category="ops")
    request_id, chunks = asked(kb, "DISK_FULL 磁盘满 logrotate", session="mcp-s")

    async def main():
        async with Client(build_mcp_server(kb)) as client:
            ok = await client.call_tool(
                "report_evidence", {"request_id": request_id, "verdict": "outdated", "chunk_ids": chunks}
            )
            assert not ok.is_error and "recorded: outdated" in ok.content[0].text
            assert ok.structured_content["actor"] == "mcp"
            unknown = await client.call_tool("report_evidence", {"request_id": "gone", "verdict": "wrong"})
            assert unknown.is_error and unknown.structured_content["error"]["code"] == "not_found"
            bad = await client.call_tool("report_evidence", {"request_id": request_id, "verdict": 3})
            assert bad.is_error and "verdict" in bad.content[0].text

    anyio.run(main)
    assert [r["verdict"] for r in kb.reviews.feedback(session_id="mcp-s")] == ["outdated"]


def test_wrong_and_missed_reports_become_golden_cases(tmp_path: Path):
    home = tmp_path / "home"
    with KnowledgeBase.open(Settings(home=home)) as kb:
        for name, text in (("disk.md", DISK), ("pay.md", PAY)):
            kb.upload(text.encode(), name, category="ops")
        request_id, chunks = asked(kb, "DISK_FULL 磁盘满 logrotate")
        pay_chunk = kb.indexes.documents[kb.get_document("ops/pay.md").id].chunk_ids[0]
        wrong = kb.reviews.report({"request_id": request_id, "verdict": "wrong", "chunk_ids": chunks})["id"]
        missed = kb.reviews.report({"request_id": request_id, "verdict": "missed", "chunk_id": pay_chunk})["id"]
        vague = kb.reviews.report({"request_id": request_id, "verdict": "missed"})["id"]  # names nothing missed
        kb.reviews.report({"request_id": request_id, "verdict": "helped"})
    cases_file = tmp_path / "eval" / "cases.json"
    write(tmp_path / "eval", "kb/ops/disk.md", DISK)
    first = {"id": "kb-001", "query": "磁盘满", "expected": [{"document": "ops/disk.md", "grade": 3}]}
    cases_file.write_text(json.dumps({"knowledge_base": "kb", "cases": [first]}), "utf-8")

    def run(*args: str, code: int = 0) -> str:
        result = CliRunner().invoke(cli_app, ["--home", str(home), "eval", "add-case", str(cases_file), *args])
        assert result.exit_code == code, result.output
        return result.stdout

    result = json.loads(run("--from-feedback", "--json"))
    assert [c["id"] for c in result["added"]] == [f"fb-{wrong}", f"fb-{missed}"]
    assert [s["feedback"] for s in result["skipped"]] == [vague]
    cases = {c.id: c for c in read_cases(cases_file).cases}  # the file still reads as a valid case file
    assert cases[f"fb-{wrong}"].answerable is False and "reported wrong: ops/disk.md#" in cases[f"fb-{wrong}"].notes
    assert [(e.document, e.heading_path) for e in cases[f"fb-{missed}"].expected] == [
        ("ops/pay.md", ["支付超时处理", "步骤"])
    ]
    again = json.loads(run("--from-feedback", "--json"))  # already added: nothing twice
    assert again["added"] == [] and len(read_cases(cases_file).cases) == 3
    error = json.loads(run("--from-feedback", "--id", "x", "--json", code=2))
    assert "takes no recorded lookup" in error["error"]["message"]
