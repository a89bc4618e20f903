"""Terms of the same meaning widen the BM25 query at a lower weight (``kbseek.core.lexicon``)."""

from __future__ import annotations

import pytest

from kbseek.core.analysis import Analyzer
from kbseek.core.lexical import BM25Index
from kbseek.core.lexicon import BUNDLED, Lexicon
from kbseek.core.rewrite import load_synonyms

ANALYZER = Analyzer()


@pytest.fixture(scope="module")
def lexicon() -> Lexicon:
    return Lexicon(load_synonyms(BUNDLED), ANALYZER.tokens)


def test_the_bundled_groups_parse_and_bridge_chinese_and_english(lexicon):
    assert len(lexicon) >= 60
    query = "数据库连不上了"
    added = lexicon.expansions(query, ANALYZER.tokens(query), 1.0)
    assert {"连接", "失败", "connect", "refus"} <= set(added)
    english = "why do slow queries happen"
    assert "慢" in lexicon.expansions(english, ANALYZER.tokens(english), 1.0)  # a phrase named by its stems


def test_chinese_container_words_reach_english_runbooks(lexicon):
    # alert runbooks of Kubernetes and Prometheus are mostly English; the question is often Chinese
    index = BM25Index()
    index.add("pv", ANALYZER.tokens("KubePersistentVolumeFillingUp: the persistent volume is filling up"))
    index.add("cert", ANALYZER.tokens("KubeClientCertificateExpiration: a client certificate expires soon"))
    index.add("cpu", ANALYZER.tokens("CPUThrottlingHigh: containers are being throttled"))
    for query, expected in (("持久卷快被写满了怎么办", "pv"), ("客户端证书快过期了", "cert")):
        tokens = ANALYZER.tokens(query)
        hits = index.search(tokens, k=3, extra=lexicon.expansions(query, tokens, 1.0))
        assert hits and hits[0].chunk_id == expected, (query, hits)
    # words common in other senses add nothing of the container groups
    for query, unwanted in (
        ("升级后 PD 调度失败", {"pod", "pend"}),
        ("roll back after a failed update", {"滚动", "更新"}),
        ("set up monitoring and fill in the alert form", {"fill", "填满"}),
        ("数据保留多久", {"retent"}),
    ):
        assert not unwanted & set(lexicon.expansions(query, ANALYZER.tokens(query), 1.0)), query


def test_added_words_weigh_less_than_the_question_s_own_and_never_repeat_them(lexicon):
    query = "服务 OOM 了一直重启"
    tokens = ANALYZER.tokens(query)
    added = lexicon.expansions(query, tokens, 1.0)
    assert added and all(0 < w < 1 for w in added.values())
    assert not set(added) & set(tokens)
    assert lexicon.expansions(query, tokens, 0.0) == {}


def test_identifiers_are_named_on_their_boundaries_only(lexicon):
    query = "ROOM 101 booking"  # OOM inside another word names nothing
    assert "内存" not in lexicon.expansions(query, ANALYZER.tokens(query), 1.0)


def test_an_added_word_lets_a_section_in_the_documentation_s_words_match_but_not_outrank_the_question_s():
    index = BM25Index()
    index.add("doc-words", ANALYZER.tokens("数据库连接失败：检查端口和防火墙"))
    index.add("question-words", ANALYZER.tokens("数据库连不上：先看网络"))
    index.add("other", ANALYZER.tokens("磁盘空间清理"))
    lex = Lexicon([("连不上", "连接失败")], ANALYZER.tokens)
    query = "数据库连不上"
    tokens = ANALYZER.tokens(query)
    plain = [h.chunk_id for h in index.search(tokens, k=3)]
    widened = index.search(tokens, k=3, extra=lex.expansions(query, tokens, 1.0))
    assert widened[0].chunk_id == "question-words"
    scores = {h.chunk_id: h.score for h in widened}
    before = {h.chunk_id: h.score for h in index.search(tokens, k=3)}
    assert scores["doc-words"] > before.get("doc-words", 0.0)  # the documentation's word now counts
    assert "other" not in scores and plain[0] == "question-words"


def test_extra_terms_alone_can_match():
    index = BM25Index()
    index.add("c1", ["慢查询", "日志"])
    assert [h.chunk_id for h in index.search(["slow"], k=3, extra={"慢查询": 0.5})] == ["c1"]
    assert index.search(["slow"], k=3) == []
