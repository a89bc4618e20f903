"""Clauses of a multi-part question, its script, and the purposes questions ask for and headings declare."""

from __future__ import annotations

import pytest

from kbseek.core.clauses import cjk_share, clauses
from kbseek.core.models import Chunk
from kbseek.core.section_roles import (
    HEADING_NAME,
    NAMED_BONUS,
    ROLES,
    asked_words,
    context_section,
    heading_roles,
    named_sections,
    query_roles,
    section_purposes,
    section_scores,
)


@pytest.mark.parametrize(
    ("query", "parts"),
    [
        ("怎么定位热点线程，并且修复后怎么验证", ["怎么定位热点线程", "修复后怎么验证"]),
        ("先看哪些指标？然后怎么回滚", ["先看哪些指标", "怎么回滚"]),
        ("find the hot thread and then verify the fix", ["find the hot thread", "verify the fix"]),
        ("ERR_TIMEOUT 怎么排查", ["ERR_TIMEOUT 怎么排查"]),
        ("HighCPUUsage 告警", ["HighCPUUsage 告警"]),
        ("超时是 3,000 毫秒吗", ["超时是 3,000 毫秒吗"]),  # a number's comma splits nothing
    ],
)
def test_clauses(query, parts):
    assert clauses(query) == parts


def test_a_connective_alone_splits_nothing():
    assert clauses("CPU 和内存") == ["CPU 和内存"]
    assert clauses("，怎么回滚") == ["怎么回滚"]


def test_cjk_share():
    assert cjk_share("How do I roll back the release?") == 0.0
    assert cjk_share("怎么回滚发布") == 1.0
    assert cjk_share("") == 0.0


@pytest.mark.parametrize(
    ("query", "role"),
    [
        ("回滚之后要看什么", "rollback"),
        ("How do I roll back the canary?", "rollback"),
        ("修复后怎么确认已经恢复正常", "verify"),
        ("what should I verify before closing the incident", "verify"),
        ("这个问题要盯哪些监控指标", "metrics"),
        ("which dashboards should I watch", "metrics"),
        ("怎么定位是哪个线程", "locate"),
        ("根因一般是什么", "cause"),
        ("先怎么止损", "mitigate"),
        ("多久要通知产品方", "escalate"),
        ("网关这一块归谁管", "escalate"),
        ("Who owns the payment gateway?", "escalate"),
        ("连接池耗尽的问题，今后怎么杜绝", "prevent"),
        ("How do we keep this from happening again?", "prevent"),
        ("大促事故结束后要复盘哪些内容", "postmortem"),
        ("What goes into the postmortem?", "postmortem"),
        ("上线前有没有可以逐项核对的清单", "checklist"),
        ("Is there a checklist for the release?", "checklist"),
        ("清理日志用什么命令", "commands"),
        ("Give me the shell commands to free space", "commands"),
        ("这个告警响的时候，通常还有哪些别的告警一起出现", "related"),
        ("Which other alerts usually fire together with it?", "related"),
        ("延迟升高对用户有什么影响", "impact"),
        ("What is the impact on checkout?", "impact"),
        ("What happens to running pods if etcd loses quorum?", "impact"),
        ("What stops working when the quota is used up?", "impact"),
        ("The pod is stuck. What should I look at first?", "locate"),
        ("How do I find out why the target is down?", "locate"),
        ("When does the alert become critical?", "trigger"),
    ],
)
def test_query_roles(query, role):
    assert role in query_roles(query)


@pytest.mark.parametrize(
    ("heading", "role"),
    [
        ("回滚方案", "rollback"),
        ("Rollback plan", "rollback"),
        ("4. 恢复验证", "verify"),
        ("Verification", "verify"),
        ("关键监控指标", "metrics"),
        ("2. 定位热点线程", "locate"),
        ("问题原理", "cause"),
        ("应急处置", "mitigate"),
        ("通知要求", "escalate"),
        ("联系方式", "escalate"),
        ("长期优化", "prevent"),
        ("预防措施", "prevent"),
        ("故障复盘", "postmortem"),
        ("性能优化检查清单", "checklist"),
        ("常用命令", "commands"),
        ("相关告警", "related"),
        ("Related alerts", "related"),
        ("Impact", "impact"),
        ("立即操作（5分钟内）", "mitigate"),
        ("Mitigation", "mitigate"),
        ("告警名称", "trigger"),
        ("Meaning", "trigger"),  # an alert runbook's Meaning says when the alert fires
    ],
)
def test_heading_roles(heading, role):
    assert role in heading_roles(heading)


def test_plain_words_declare_no_purpose():
    assert query_roles("ERR_TIMEOUT 支付超时") == frozenset()
    assert heading_roles("ERR_DUPLICATE_ORDER") == frozenset()
    assert heading_roles("Kafka consumer lag") == frozenset()


@pytest.mark.parametrize(
    ("text", "role"),
    [
        ("处理完以后要看哪些点才能确认恢复", "prevent"),  # 以后 as "after", not "from now on"
        ("主从复制延迟怎么办", "commands"),  # 复制 is replication here
        ("主从复制延迟怎么办", "mitigate"),  # every question asks what to do
        ("哪个节点先挂的", "locate"),
    ],
)
def test_broad_words_ask_for_no_purpose(text, role):
    assert role not in query_roles(text)


def test_a_heading_that_only_mentions_a_purpose_word_does_not_declare_it():
    assert "metrics" not in heading_roles("步骤2: 查询系统监控日志")  # a log query step, not the metrics list
    assert "locate" not in heading_roles("查看磁盘使用情况")


def test_every_role_can_be_asked_and_declared_in_both_languages():
    for role in ROLES:
        assert role.asked_zh and role.asked_en and role.declared_zh and role.declared_en, role.name
        assert role.name in query_roles(role.asked_zh[0]) and role.name in query_roles(role.asked_en[0])
        assert role.name in heading_roles(role.declared_zh[0]) and role.name in heading_roles(role.declared_en[0])


@pytest.mark.parametrize(
    ("heading", "question", "context"),
    [
        ("问题描述", "CPU 飙高怎么处理？", True),
        ("告警名称", "磁盘满了先做什么", True),
        ("相关告警", "内存告警怎么排查", True),
        ("参考文档", "Redis 延迟高怎么办", True),
        ("Overview", "How do I fix the lag?", True),
        ("See also", "How do I fix the lag?", True),
        ("排查步骤", "CPU 飙高怎么处理？", False),
        ("Mitigation", "How do I fix the lag?", False),
        ("相关告警", "还有哪些别的告警会一起出现？", False),  # asked for: not context
        ("问题描述", "这个告警是什么意思？", False),
        ("Overview", "What is the meaning of this alert?", False),
        ("参考文档", "有没有官方文档可以参考？", False),
        ("Meaning", "How do I fix the lag?", True),
        ("Meaning", "At what threshold does this alert fire?", False),  # the Meaning section says when it fires
    ],
)
def test_a_section_of_context_is_one_the_question_does_not_ask_for(heading, question, context):
    assert context_section([(1, "Runbook"), (2, heading)], query_roles(question)) is context


@pytest.mark.parametrize(
    ("headings", "purposes"),
    [
        ([(1, "CPU 使用率过高"), (2, "排查步骤"), (3, "步骤4: 检查依赖服务状态")], {"locate"}),
        ([(1, "CPU 使用率过高"), (2, "常见原因分析"), (3, "原因3: 依赖服务故障")], {"cause"}),
        ([(1, "CPU 使用率过高"), (2, "排查步骤"), (3, "步骤5: 验证修复")], {"verify"}),  # its own heading first
        ([(1, "回滚方案"), (2, "第一步")], set()),  # a title names the subject, not the purpose
        ([(1, "回滚方案")], {"rollback"}),
        ([(2, "Diagnosis"), (3, "Step 2")], {"locate"}),
    ],
)
def test_a_section_without_a_purpose_of_its_own_takes_the_one_it_sits_under(headings, purposes):
    assert set(section_purposes(headings)) == purposes


def section(chunk_id: str, document: str, *headings: tuple[int, str], anchor: str = "") -> Chunk:
    anchor = anchor or chunk_id
    return Chunk(chunk_id, document, 0, 1, "t", "", headings, anchor, "ops", f"{document}.md", "x", "h", 0, 1, 1, 1)


def test_a_name_that_heads_one_section_below_the_title_names_it_and_scores_as_a_purpose():
    page = [
        section(f"c{i}", "alerts", (1, "报警规则"), (2, "TiKV 报警规则"), (3, heading))
        for i, heading in enumerate(["TiKV_channel_full_total", "TiKV_write_stall", "TiKV 写入慢", "TiKV 磁盘满"])
    ]
    split = [section("c0b", "alerts", *page[0].headings, anchor="c0")]  # a second chunk of the same section
    assert named_sections(page + split, ["tikv_channel_full_total", "nodedown"]) == {"c0", "c0b"}
    assert named_sections(page, ["tikv"]) == set()  # heads three sections (and a parent): names none of them
    title = [section("d0", "node", (1, "NodeDown")), section("d1", "node", (1, "NodeDown"), (2, "排查步骤"))]
    assert named_sections(title, ["nodedown"]) == set()  # a document's title is the keyword layer's
    other = [section("e0", "other", (1, "x"), (2, "TiKV_write_stall"))]
    assert named_sections(page + other, ["tikv_write_stall"]) == set()  # two documents' sections: neither
    nested = [section("g0", "alerts", (1, "报警规则"), (2, "TiKV_write_stall"), (3, "处理方法"))]
    assert named_sections(page + nested, ["tikv_write_stall"]) == {"c1"}  # a section's own heading, not its parent's
    worded = [section("h0", "faq", (1, "常见问题"), (2, "出现 TiKV_server_busy 怎么办"))]
    assert named_sections(worded, ["tikv_server_busy"]) == {"h0"}  # anywhere in the heading, for the lane
    assert named_sections(worded, ["tikv_server_busy"], whole=True) == set()  # the gate: the heading is the name
    assert named_sections(page, ["tikv_channel_full_total"], whole=True) == {"c0"}
    product = [section("p0", "cdc", (1, "x"), (2, "TiCDC")), section("p1", "cdc", (1, "x"), (2, "TiCDC 常见问题"))]
    assert named_sections(product, ["ticdc"], whole=True) == set()  # heads two sections, though one is only it
    twins = [section(f"t{i}", "alerts", (1, "报警规则"), (2, "TiKV_write_stall")) for i in range(2)]
    assert named_sections(twins, ["tikv_write_stall"]) == set()  # two sections of one page share a heading
    steps = section("f0", "alerts", (1, "报警规则"), (2, "验证步骤"))
    scores = section_scores([*page, steps], frozenset({"verify"}), frozenset({"tikv_channel_full_total"}), None)
    assert scores == {"c0": HEADING_NAME, "f0": 1.0}
    assert section_scores(page, frozenset(), frozenset({"tikv_channel_full_total"}), "alerts") == {
        "c0": HEADING_NAME + NAMED_BONUS
    }


@pytest.mark.parametrize(
    ("query", "roles"),
    [
        ('[conn.go:1184] ["command dispatched failed"] [err="please rollback"]', set()),
        ("[2026/11/30] [session.go] [TTL manager has timed out, please commit or rollback this transaction]", set()),
        ("TiDB_monitor_time_jump_back_error", set()),
        ('这个告警的"回滚方案"在哪里？', {"rollback"}),  # a quoted section name still asks for it
        ("[session.go] [[kv:6] please rollback] 怎么验证", {"verify"}),  # nested fields, from the inside out
        ("[unclosed 回滚怎么做", {"rollback"}),  # a bracket never closed hides nothing
        ("[回滚方案] 在哪里", {"rollback"}),  # one bracketed field is the asker's, not a log line's
        ("What's the short-term workaround?", {"mitigate"}),  # a hyphenated word is not a name
        ("It doesn't go away. Which metrics should I watch?", {"metrics"}),
    ],
)
def test_only_the_askers_own_words_ask_for_a_purpose(query, roles):
    assert query_roles(query) == roles, asked_words(query)
