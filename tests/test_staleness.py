"""Staleness and ownership on both databases: review fields validated on write, every piece of evidence carrying
its document's age and a ``stale`` label (never hidden), the agent told in the completeness sentence, and the review
list over the service, the CLI, REST and the Prometheus gauge."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import jsonschema
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from support import ROOT, doc, write
from typer.testing import CliRunner

from kbseek.interfaces.cli import app as cli_app
from kbseek.interfaces.http.app import create_app
from kbseek.lookup.render import render_text, response_view
from kbseek.settings import Settings

OLD = doc(
    "磁盘满处理",
    "DISK_FULL",
    "磁盘写满的处理",
    "# 磁盘满处理\n\n## 清理\n\n清理 /var/log 下的旧日志 (logrotate)，再检查 inode 用量。\n",
    owner="storage-oncall",
    last_reviewed="2020-01-15",
    review_every="90d",
)
FRESH = doc(
    "支付超时处理",
    "ERR_PAY_TIMEOUT",
    "支付网关超时的处理",
    "# 支付超时处理\n\n## 步骤\n\n检查支付网关连接池 (pool_size) 与下游银行接口的延迟。\n",
    owner="payments",
)
UNREVIEWED = doc(  # old review, but reviews switched off for it
    "证书轮换",
    "CERT_ROTATE",
    "证书轮换步骤",
    "# 证书轮换\n\n用 certbot renew 轮换证书。\n",
    last_reviewed="2019-05-01",
    review_every="off",
)


def schema(name: str) -> dict:
    return json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text("utf-8"))


def load(kb) -> None:
    for name, text in (("disk.md", OLD), ("pay.md", FRESH), ("cert.md", UNREVIEWED)):
        assert kb.upload(text.encode(), name, category="ops").status == "added"


def evidence(kb, query: str) -> tuple[dict, dict]:
    response = kb.lookup_knowledge({"query": query})
    view = response_view(response)
    jsonschema.validate(view, schema("lookup-answer"))
    return view, {d["source_path"]: d for d in view["documents"]}


def test_stale_evidence_is_labelled_with_its_age_and_the_agent_is_told(kb):
    load(kb)
    view, documents = evidence(kb, "DISK_FULL 磁盘满了怎么清理 logrotate")
    old = documents["ops/disk.md"]  # given despite being stale: the label informs, the gate does not hide
    age = (dt.datetime.now(dt.UTC).date() - dt.date(2020, 1, 15)).days
    assert old["stale"] is True and old["age_days"] in (age, age + 1)  # the day may turn during the test
    assert (old["owner"], old["review_due"]) == ("storage-oncall", "2020-04-14")
    assert old["items"] and all(item["stale"] is True and item["age_days"] == old["age_days"] for item in old["items"])
    assert "past their review date (stale: true): ops/disk.md (last reviewed 2020-01-15" in view["completeness"]
    assert "owner storage-oncall" in view["completeness"]
    assert "STALE: past its review date" in render_text(kb.lookup_knowledge({"query": "DISK_FULL logrotate"}))

    view, documents = evidence(kb, "ERR_PAY_TIMEOUT 支付超时 pool_size")
    fresh = documents["ops/pay.md"]  # no last_reviewed: its age counts from the stored version, written today
    assert (fresh["stale"], fresh["age_days"], fresh["owner"]) == (False, 0, "payments")
    assert fresh["review_due"] == (dt.date.fromisoformat(_today(kb, "ops/pay.md")) + dt.timedelta(365)).isoformat()
    assert "stale" not in view["completeness"]

    view, documents = evidence(kb, "CERT_ROTATE certbot 证书轮换")
    assert documents["ops/cert.md"]["stale"] is False and documents["ops/cert.md"]["review_due"] is None


def _today(kb, path: str) -> str:
    return kb.get_document(path, with_chunks=False).updated_at[:10]


def test_the_review_list_per_owner_and_the_gauge(kb):
    load(kb)
    rows = kb.reviews.stale()
    assert [(r["path"], r["owner"], r["reasons"]) for r in rows] == [("ops/disk.md", "storage-oncall", ["past review"])]
    assert kb.reviews.stale("payments") == [] and kb.reviews.stale("-") == []
    everything = kb.reviews.stale(everything=True)
    assert [r["path"] for r in everything] == ["ops/pay.md", "ops/disk.md", "ops/cert.md"]  # by owner, none last
    assert b"kbseek_stale_documents 1.0" in kb.metrics_exposition()
    kb.replace("ops/disk.md", OLD.replace("2020-01-15", dt.date.today().isoformat()).encode())
    assert kb.reviews.stale() == [] and b"kbseek_stale_documents 0.0" in kb.metrics_exposition()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("review_every", "often", "'often' is not a review period"),
        ("review_every", "[1, 2]", "is not a review period"),
        ("last_reviewed", "yesterday", "'yesterday' is not a date"),
        ("last_reviewed", '"2026-13-01"', "'2026-13-01' is not a date"),  # quoted: past YAML's own date check
        ("owner", "[a, b]", "must be text"),
    ],
)
def test_bad_review_fields_are_refused_naming_the_file_and_the_field(kb, field, value, words):
    text = doc("T", "K", "S", "# T\n\nbody\n", **{field: value})
    report = kb.upload(text.encode(), "bad.md", category="ops")
    assert report.status == "failed" and report.error_code == "frontmatter_error"
    assert report.reason.startswith(f"bad.md:5: field '{field}': ") and words in report.reason  # file, line, field
    assert kb.list_documents() == []


def test_the_default_review_period_is_a_checked_setting():
    assert Settings(review_every_default="6m").review_every_default == "6m"
    with pytest.raises(ValidationError, match="review_every_default: 'soon' is not a review period"):
        Settings(review_every_default="soon")


def test_cli_docs_stale_and_rest_stale_listing(tmp_path: Path):
    home, source = tmp_path / "home", tmp_path / "docs"
    for name, text in (("ops/disk.md", OLD), ("ops/pay.md", FRESH)):
        write(source, name, text)
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(cli_app, ["--home", str(home), *args])
        assert result.exit_code == 0, result.output
        return result.stdout

    run("ingest", str(source))
    listed = json.loads(run("docs", "stale", "--json"))
    assert listed["owners"] == {"storage-oncall": 1} and [d["path"] for d in listed["documents"]] == ["ops/disk.md"]
    assert json.loads(run("docs", "stale", "--owner", "payments", "--json"))["documents"] == []
    table = run("docs", "stale", "--all")
    assert "storage-oncall" in table and "1 document(s) need review of 2 listed" in table

    from kbseek.service import KnowledgeBase  # opened after the CLI released the home

    with KnowledgeBase.open(Settings(home=home, read_api_key="r-secret")) as kb:
        with TestClient(create_app(kb=kb, mcp=False)) as client:
            read = {"Authorization": "Bearer r-secret"}
            body = client.get("/api/documents", params={"stale": "true"}, headers=read).json()
            assert body["total"] == 1 and body["owners"] == {"storage-oncall": 1}
            assert body["documents"][0]["path"] == "ops/disk.md" and body["documents"][0]["stale"] is True
            assert (
                client.get("/api/documents", params={"stale": "true", "owner": "x"}, headers=read).json()["total"] == 0
            )
            assert client.get("/api/documents", headers=read).json()["total"] == 2  # the plain list is unchanged
