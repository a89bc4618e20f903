"""Search and lookup through the service, kept in step with ingest, update and delete."""

from __future__ import annotations

import json

import jsonschema
import pytest
from support import EXAMPLES, ROOT, doc

from kbseek.errors import QueryError
from kbseek.service import KnowledgeBase

PAY = doc(
    "支付网关错误码定义",
    "ERR_TIMEOUT, 支付网关",
    "错误码",
    "# 支付网关错误码定义\n\n## ERR_TIMEOUT\n\n请求超时，检查下游响应。\n",
    category="api",
)


def test_changes_are_visible_to_the_next_query(kb, tmp_path):
    kb.upload(PAY.encode(), "pay.md")
    assert kb.search("ERR_TIMEOUT").hits[0].chunk.source_path == "api/pay.md"
    kb.upload(PAY.replace("ERR_TIMEOUT", "ERR_EXPIRED").encode(), "pay.md")  # update
    assert not any("ERR_TIMEOUT" in h.chunk.text for h in kb.search("ERR_TIMEOUT").hits)
    assert kb.search("ERR_EXPIRED").hits[0].chunk.source_path == "api/pay.md"
    assert kb.lookup("ERR_EXPIRED").hint.matches[0].path == "api/pay.md"
    kb.delete("api/pay.md")
    assert kb.search("ERR_EXPIRED").hits == () and kb.lookup("ERR_EXPIRED").hint.matches == ()


def test_another_process_on_the_same_database_stays_fresh(settings):
    first, second = KnowledgeBase.open(settings), KnowledgeBase.open(settings)
    first.upload(PAY.encode(), "pay.md")
    assert second.search("ERR_TIMEOUT").hits[0].chunk.source_path == "api/pay.md"
    first.delete("api/pay.md")
    assert second.search("ERR_TIMEOUT").hits == ()
    first.close(), second.close()


def test_dictionary_change_reanalyses_older_chunks(kb):
    kb.upload(
        b"# Old\n\n\xe7\x86\x94\xe6\x96\xad\xe9\x99\x8d\xe7\xba\xa7\xe7\xad\x96\xe7\x95\xa5\xe8\xaf\xb4\xe6\x98\x8e\n",
        "old.md",
    )
    before = kb.indexes.index_version
    tokens = kb.indexes.analyzer.tokens("熔断降级")
    assert "熔断降级" not in tokens
    kb.upload(doc("新", "熔断降级", "s", "# 新\n\n熔断降级的正文\n").encode(), "new.md")
    assert kb.indexes.index_version != before
    hits = kb.search("熔断降级").hits
    assert {h.chunk.source_path for h in hits} == {"general/old.md", "general/new.md"}
    old_chunk = next(h for h in hits if h.chunk.source_path == "general/old.md")
    assert old_chunk.lanes["bm25"].score > 0


def test_lookup_filters_to_the_single_domain_and_relaxes(kb, tmp_path):
    kb.ingest([EXAMPLES / "knowledge_base"])
    assert kb.lookup("jmap 内存泄漏").filter.source == "none"  # off by default
    kb.settings = kb.settings.model_copy(update={"domain_filter": True})
    result = kb.lookup("jmap 内存泄漏")
    assert result.filter.category == "troubleshoot" and result.filter.source == "l0_single_domain"
    assert all(h.chunk.category == "troubleshoot" for h in result.hits)
    assert result.hits[0].chunk.source_path == "troubleshoot/jvm-oom.md"
    # L0's single domain holds a document without body text: the filtered lane is empty and relaxes
    kb.upload(doc("只有元数据", "ONLY_META_KW", "s", "", category="meta").encode(), "m.md")
    relaxed = kb.lookup("ONLY_META_KW 老年代使用率持续上升", top_k=3, policy="lexical")
    assert relaxed.filter.category == "meta" and relaxed.filter.relaxed
    assert relaxed.hits[0].chunk.source_path == "troubleshoot/jvm-oom.md"
    chosen = kb.lookup("ERR_TIMEOUT", category="domain")
    assert chosen.filter.source == "request" and all(h.chunk.category == "domain" for h in chosen.hits)


def test_query_validation(kb):
    for bad, top_k in (("", 5), ("   ", 5), ("x" * 5000, 5), ("ok", 0), ("ok", 100000)):
        with pytest.raises(QueryError):
            kb.search(bad, top_k=top_k)
    with pytest.raises(QueryError, match="unknown policy"):
        kb.lookup("ok", policy="magic")


def test_search_json_matches_its_schema_and_lookup_explains_the_filter(tmp_path):
    from typer.testing import CliRunner

    from kbseek.interfaces.cli import app

    runner = CliRunner()
    home = str(tmp_path / "home")
    assert runner.invoke(app, ["--home", home, "ingest", str(EXAMPLES / "knowledge_base")]).exit_code == 0
    result = runner.invoke(app, ["--home", home, "search", "ERR_TIMEOUT", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    jsonschema.validate(data, json.loads((ROOT / "schemas" / "search.schema.json").read_text("utf-8")))
    assert data["hits"][0]["path"] == "api/payment-errors.md"
    human = runner.invoke(app, ["--home", home, "lookup", "jmap 内存泄漏", "--explain"])
    assert "troubleshoot/jvm-oom.md" in human.stdout and "single domain: troubleshoot" in human.stdout
    filtered = runner.invoke(
        app, ["--home", home, "lookup", "jmap 内存泄漏", "--explain"], env={"KBSEEK_DOMAIN_FILTER": "true"}
    )
    assert "filter: category=troubleshoot from l0_single_domain" in filtered.stdout


def test_token_cache_makes_a_restart_analyse_nothing(settings):
    first = KnowledgeBase.open(settings)
    first.ingest([EXAMPLES / "knowledge_base"])
    analysed = first.indexes.counters["analysed"]
    assert analysed == first.stats()["chunks"] > 0
    expected = first.search("HighCPUUsage").hits
    first.close()
    second = KnowledgeBase.open(settings)
    assert second.indexes.counters == {"analysed": 0, "from_cache": analysed}
    assert [(h.chunk.id, round(h.score, 5)) for h in second.search("HighCPUUsage").hits] == [
        (h.chunk.id, round(h.score, 5)) for h in expected
    ]
    # a new keyword changes the dictionary: the cache is retagged, not thrown away
    second.upload(doc("新", "限流熔断", "s", "# 新\n\n限流熔断\n").encode(), "new.md")
    second.close()
    third = KnowledgeBase.open(settings)
    assert third.indexes.counters["analysed"] == 0
    third.close()
