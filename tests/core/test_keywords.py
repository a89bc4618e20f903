import threading

from kbseek.core.analysis import Analyzer
from kbseek.core.keywords import KeywordIndex
from kbseek.core.models import DocumentCard


def make_index():
    index = KeywordIndex(Analyzer(["支付网关", "磁盘"]))
    index.load(
        [
            DocumentCard(
                "pay",
                "api/pay.md",
                "支付网关错误码定义",
                "支付网关核心错误码的含义",
                ("ERR_TIMEOUT", "支付网关"),
                "api",
            ),
            DocumentCard("gw", "api/gw.md", "网关超时说明", "上游响应慢导致的超时", ("ERR_GATEWAY_TIMEOUT",), "api"),
            DocumentCard(
                "disk", "ops/disk.md", "磁盘空间告警", "磁盘满时清理日志", ("DiskSpaceUsageHigh", "df"), "ops"
            ),
            DocumentCard(
                "kafka", "ops/kafka.md", "Kafka 消费积压", "consumer lag 排查", ("KafkaConsumerLagHigh",), "ops"
            ),
        ]
    )
    return index


def test_exact_keyword_beats_partial_and_partial_finds_identifier_parts():
    hint = make_index().analyze_query("ERR_TIMEOUT")
    assert [m.document_id for m in hint.matches[:2]] == ["pay", "gw"]
    assert hint.matches[0].exact and hint.matches[0].field == "keyword"
    assert not hint.matches[1].exact and hint.matches[1].score < hint.matches[0].score
    assert hint.single_domain == "api"

    partial = make_index().analyze_query("timeout")
    assert {m.document_id for m in partial.matches} >= {"pay", "gw"}
    assert all(not m.exact for m in partial.matches)
    assert "ERR_TIMEOUT" in partial.matched_keywords


def test_keyword_outranks_title_outranks_summary():
    index = KeywordIndex(Analyzer())
    index.load(
        [
            DocumentCard("s", "s.md", "无关标题", "包含 rebalance 的摘要", (), "x"),
            DocumentCard("t", "t.md", "rebalance 处理", "无关摘要", (), "y"),
            DocumentCard("k", "k.md", "其他", "其他", ("rebalance",), "z"),
        ]
    )
    hint = index.analyze_query("rebalance")
    assert [(m.document_id, m.field) for m in hint.matches] == [("k", "keyword"), ("t", "title"), ("s", "summary")]
    assert hint.domains == ("z", "y", "x") and hint.single_domain == "z"


def test_no_single_domain_when_strong_matches_disagree_and_none_for_unrelated():
    index = make_index()
    hint = index.analyze_query("支付网关 磁盘空间告警")
    assert set(hint.domains) >= {"api", "ops"} and hint.single_domain is None
    assert index.analyze_query("完全无关的问题").matches == ()


def test_updates_and_removal_are_visible_and_thread_safe():
    index = make_index()
    # 'high' is only a part of the query identifier: not enough for DiskSpaceUsageHigh
    assert [m.document_id for m in index.analyze_query("KafkaConsumerLagHigh").matches] == ["kafka"]
    index.remove("kafka")
    assert index.analyze_query("KafkaConsumerLagHigh").matches == ()
    errors = []

    def writer():
        for i in range(200):
            index.upsert(DocumentCard(f"n{i}", f"n/{i}.md", f"新文档{i}", "摘要", (f"KEY_{i}",), "new"))

    def reader():
        try:
            for _ in range(200):
                index.analyze_query("ERR_TIMEOUT KEY_5")
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert index.analyze_query("KEY_199").matches[0].document_id == "n199"


def test_a_smaller_limit_keeps_the_first_matches_of_a_larger_one():
    index = make_index()
    for query in ("ERR_TIMEOUT 支付网关", "timeout", "磁盘 df 告警", "KafkaConsumerLagHigh api ops"):
        full = index.analyze_query(query, limit=10).matches
        for limit in (1, 2, 3):
            assert index.analyze_query(query, limit=limit).matches == full[:limit]
