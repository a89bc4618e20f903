"""What a section is *for*, in Chinese and English: roll back, verify, watch metrics, locate, root cause, ...

Runbook questions often name the purpose of the section that answers them ("what should I verify after the
fix?") without repeating its words, while the section says its purpose in its heading (``恢复验证``) and not in
its body. :func:`query_roles` reads the purposes a question asks for, :func:`heading_roles` those a heading
declares; a section whose heading declares a purpose the question asks for is a better answer to it.

The table is general runbook vocabulary, not the wording of any one knowledge base: each role lists the words
that ask for it in a question and the words that declare it in a heading.

>>> sorted(query_roles("回滚之后要验证哪些指标？"))
['metrics', 'rollback', 'verify']
>>> sorted(query_roles("How do I confirm the fix worked and which metrics should I watch?"))
['metrics', 'verify']
>>> sorted(heading_roles("4. 恢复验证"))
['recovery', 'verify']
>>> sorted(heading_roles("Rollback plan"))
['rollback']
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kbseek.core.answerability import identifiers
from kbseek.core.models import Chunk


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    asked_zh: tuple[str, ...]  # substrings of a question that ask for this purpose
    asked_en: tuple[str, ...]  # word prefixes of a question (matched at a word start, case-insensitive)
    declared_zh: tuple[str, ...]  # substrings of a heading that declare it
    declared_en: tuple[str, ...]  # word prefixes of a heading


ROLES: tuple[Role, ...] = (
    Role(
        "rollback",
        ("回滚", "回退", "撤回", "退回上一版", "降级回"),
        ("rollback", "roll back", "rolling back", "revert", "undo the"),
        ("回滚", "回退"),
        ("rollback", "roll back", "revert"),
    ),
    Role(
        "verify",
        ("验证", "校验", "核对", "核实", "是否生效", "是否恢复", "算恢复", "才算", "确认恢复", "确认修复", "确认已"),
        ("verify", "confirm", "validat", "make sure", "check that", "ensure", "call it done", "is fixed", "resolved"),
        ("验证", "确认", "校验", "核对"),
        ("verif", "validat", "confirm"),
    ),
    Role(
        "metrics",
        ("指标", "监控", "看板", "大盘", "曲线", "观察哪些", "盯"),
        ("metric", "dashboard", "monitor", "watch", "graph", "kpi"),
        ("指标", "监控项", "看板", "观察"),
        ("metric", "monitor", "dashboard", "observ"),
    ),
    Role(
        "locate",
        ("定位", "排查", "诊断", "找出", "确定是哪", "去哪查", "去哪里查", "怎么查", "查什么"),
        (
            "locate",
            "identify",
            "diagnos",
            "troubleshoot",
            "investigat",
            "pinpoint",
            "tell which",
            "where to look",
            "look at",
            "look into",
            "find out",
            "figure out",
            "debug",
        ),
        ("定位", "排查", "诊断", "识别", "确认是"),
        ("diagnos", "troubleshoot", "investigat", "identif", "locat"),
    ),
    Role(
        "cause",
        ("原因", "根因", "为什么", "为何", "原理", "怎么会", "导致"),
        ("cause", "why", "reason", "root cause", "how come"),
        ("原因", "根因", "原理", "模式", "来源"),
        ("cause", "reason", "why", "pattern"),
    ),
    Role(
        "mitigate",
        (
            "止损",
            "止血",
            "应急",
            "缓解",
            "临时",
            "先恢复",
            "快速恢复",
            "兜底",
            "处置",
            "马上",
            "立即",
            "立刻",
            "当场",
            "救火",
            "第一时间",
            "先做什么",
        ),
        (
            "mitigat",
            "workaround",
            "stop the bleeding",
            "emergency",
            "quick fix",
            "short-term",
            "stopgap",
            "immediate",
            "right now",
            "first thing",
        ),
        ("止损", "止血", "应急", "缓解", "处置", "临时", "立即", "短期", "紧急处理", "第一时间", "分钟内"),
        ("mitigat", "emergency", "workaround", "remediat", "immediate", "short-term"),
    ),
    Role(
        "escalate",
        ("升级", "通知", "上报", "知会", "通报", "拉群", "找谁", "联系", "归谁", "谁负责", "负责人", "值班"),
        ("escalat", "notify", "page ", "inform", "who to call", "contact", "who is on-call", "who owns", "owner"),
        ("升级", "通知", "上报", "通报", "联系", "负责人", "值班"),
        ("escalat", "notif", "contact", "communicat", "owner", "on-call"),
    ),
    Role(  # an alert runbook's "Meaning" says when the alert fires
        "trigger",
        ("阈值", "触发", "告警条件", "什么条件", "多少会", "响铃", "级别", "持续多久"),
        ("threshold", "trigger", "fire", "fires", "alert condition", "severity", "become critical"),
        ("告警名称", "告警说明", "告警规则", "告警定义", "触发", "阈值", "现象与告警"),
        ("alert rule", "alert definition", "threshold", "trigger", "severity", "meaning"),
    ),
    Role(
        "related",
        (
            "别的告警",
            "别的报警",
            "其他告警",
            "其他报警",
            "其它告警",
            "相关告警",
            "关联告警",
            "伴随",
            "一起冒",
            "一起出现",
            "一起触发",
            "同时出现",
            "同时触发",
            "连带",
        ),
        ("related alert", "other alert", "alongside", "fire together", "together with", "accompan"),
        ("相关告警", "关联告警", "伴随告警", "相关报警"),
        ("related alert", "see also", "related"),
    ),
    Role(
        "overview",
        ("什么意思", "是啥意思", "含义", "概述", "简介", "介绍一下", "讲的是什么", "说的是什么"),
        ("meaning", "overview", "describe", "description", "summary of", "introduc"),
        ("问题描述", "描述", "概述", "简介", "概要", "含义", "背景", "告警名称"),
        ("overview", "description", "meaning", "summary", "about", "background", "introduc"),
    ),
    Role(
        "references",
        ("参考文档", "参考资料", "文档链接", "官方文档", "相关文档", "延伸阅读", "资料"),
        ("reference", "documentation", "further reading", "docs", "link"),
        ("参考", "相关文档", "相关链接", "延伸阅读", "扩展阅读"),
        ("reference", "see also", "further reading", "links", "documentation"),
    ),
    Role(
        "prevent",
        (
            "预防",
            "避免",
            "根治",
            "杜绝",
            "从根上",
            "根本上",
            "再次发生",
            "改进",
            "以后别",
            "以后少",
            "以后不",
            "今后",
            "别再",
            "少出现",
            "长效",
            "制度",
            "长期",
        ),
        ("prevent", "avoid", "never happen", "recurr", "long-term", "long term", "permanent", "again"),
        ("预防", "避免", "改进", "最佳实践", "规范", "建议", "泄漏模式", "长期", "根治", "优化方案"),
        ("prevent", "best practice", "avoid", "recommend", "long-term", "long term"),
    ),
    Role(
        "postmortem",
        ("复盘", "回顾", "事后总结", "总结经验", "吸取教训", "改进项"),
        ("postmortem", "post-mortem", "retrospective", "lessons learned", "review afterwards", "after-action"),
        ("复盘", "事后", "回顾", "总结"),
        ("postmortem", "post-mortem", "retrospective", "lessons"),
    ),
    Role(
        "checklist",
        ("清单", "逐项", "勾一遍", "对照", "检查表", "一览表", "有现成的表"),
        ("checklist", "check list", "one by one", "tick off", "list of checks"),
        ("清单", "检查表", "检查项", "核对表"),
        ("checklist", "check list"),
    ),
    Role(
        "commands",
        ("命令", "终端", "速查", "脚本", "敲什么", "执行什么"),
        ("command", "cheat sheet", "shell", "terminal", "one-liner", "copy-paste", "copy and paste"),
        ("命令", "速查", "脚本", "常用工具"),
        ("command", "cheat sheet", "cli", "script"),
    ),
    Role(
        "impact",
        ("有什么影响", "影响范围", "影响哪些", "会影响", "后果", "波及"),
        (
            "impact",
            "affect",
            "consequence",
            "blast radius",
            "what happens",
            "happen to",
            "stop working",
            "stops working",
        ),
        ("影响",),
        ("impact",),
    ),
    Role(
        "recovery",
        ("恢复", "复原", "切回", "回切"),
        ("recover", "restore", "back to normal", "routing traffic back"),
        ("恢复",),
        ("recover", "restor"),
    ),
    Role(
        "config",
        ("配置", "参数", "调大", "调小", "设置多少", "怎么设"),
        ("config", "parameter", "setting", "tune", "timeout value"),
        ("配置", "参数", "对齐"),
        ("config", "parameter", "setting", "tuning"),
    ),
)


_EN_PATTERNS: dict[tuple[str, ...], re.Pattern[str]] = {}


def _has_en(text: str, prefixes: tuple[str, ...]) -> bool:
    """Whether one of ``prefixes`` starts a word of ``text`` (one compiled alternation per list)."""
    pattern = _EN_PATTERNS.get(prefixes)
    if pattern is None:
        pattern = _EN_PATTERNS[prefixes] = re.compile(r"(?<![a-z])(?:" + "|".join(map(re.escape, prefixes)) + ")")
    return pattern.search(text) is not None


# A log line's bracketed fields say what happened, not what the asker wants ([conn.go] ["command dispatched
# failed"], [please commit or rollback this transaction]). Quoted text is left: an asker quotes a section's name
# ("回滚方案"在哪里) as often as an error message.
_BRACKETED = re.compile(r"\[[^\[\]\n]*\]")
LOG_FIELDS = 2  # bracketed fields that make a log line; one is the asker's ([回滚方案] 在哪里)
# A name, not a request: TiDB_monitor_time_jump_back_error asks for no metrics, restore.go for no recovery. Only
# names joined by _ or . (hyphenated words ask: short-term, on-call, post-mortem); the lookbehind keeps it linear.
_NAME = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]+(?:[_.][A-Za-z0-9]+)+")


def asked_words(query: str) -> str:
    """The asker's own words of a question: without a log line's bracketed fields (when it has at least
    :data:`LOG_FIELDS`) and names joined by ``_`` or ``.``.

    >>> asked_words('[conn.go:1184] ["command dispatched failed"] [err="ERROR 9001"] 这个报错怎么处理')
    '这个报错怎么处理'
    >>> asked_words("Is TiDB_monitor_time_jump_back_error firing again? Which metrics show it?")
    'Is firing again? Which metrics show it?'
    """
    text = query
    if len(_BRACKETED.findall(text)) >= LOG_FIELDS:
        while (stripped := _BRACKETED.sub(" ", text)) != text:  # nested fields ([a] [[executor]Deadlock]) from inside
            text = stripped
    return " ".join(_NAME.sub(" ", text).split())


def query_roles(query: str) -> frozenset[str]:
    """The purposes a question asks for, read from the asker's own words (:func:`asked_words`)."""
    text = asked_words(query).casefold()
    return frozenset(r.name for r in ROLES if any(w in text for w in r.asked_zh) or _has_en(text, r.asked_en))


# Sections of context: they restate what the document is about (its overview, the alerts that fire with it, where
# to read more), so they resemble every question about the document, and they rarely hold its answer.
CONTEXT_ROLES = frozenset({"overview", "related", "references"})

HEADING_CACHE = 100_000  # headings kept per process: they repeat across queries


@functools.lru_cache(maxsize=HEADING_CACHE)
def heading_roles(heading: str) -> frozenset[str]:
    """The purposes a section heading declares."""
    text = heading.casefold()
    return frozenset(r.name for r in ROLES if any(w in text for w in r.declared_zh) or _has_en(text, r.declared_en))


def section_purposes(headings: Sequence[tuple[int, str]]) -> frozenset[str]:
    """The purposes a section declares, from its ``(level, heading)`` stack: its own heading's or, when that
    declares none, those of the nearest heading above it that declares some (a step under 排查步骤 is a step of
    locating the fault); above the section, a document's title (level 1) names its subject, not a purpose.

    >>> sorted(section_purposes([(1, "CPU 使用率过高"), (2, "排查步骤"), (3, "步骤4: 检查依赖服务状态")]))
    ['locate']
    >>> sorted(section_purposes([(1, "回滚方案"), (2, "步骤1")])), sorted(section_purposes([(1, "回滚方案")]))
    ([], ['rollback'])
    """
    for above, (level, heading) in enumerate(reversed(headings)):
        if (not above or level > 1) and (declared := heading_roles(heading)):
            return declared
    return frozenset()


def context_section(headings: Sequence[tuple[int, str]], asked: frozenset[str]) -> bool:
    """Whether a section (its ``(level, heading)`` stack) is context for a question asking for ``asked``: it
    declares a context purpose (``section_purposes``) and none the question asks for.

    >>> context_section([(1, "CPU 飙高"), (2, "问题描述")], query_roles("CPU 飙高怎么处理？"))
    True
    >>> context_section([(1, "CPU 飙高"), (2, "相关告警")], query_roles("还有哪些相关告警？"))
    False
    >>> context_section([(2, "Overview")], frozenset()), context_section([(2, "Mitigation")], frozenset())
    (True, False)
    """
    declared = section_purposes(headings)
    return bool(declared & CONTEXT_ROLES) and not declared & asked


HEADING_NAME = 1.0  # a section headed by a name the question gives (an alert, a variable) counts as one purpose
NAMED_BONUS = 0.5  # below one purpose: another document's section declaring two asked purposes still leads


def section_scores(
    chunks: Sequence[Chunk], roles: frozenset[str], names: frozenset[str], named: str | None
) -> dict[str, float]:
    """The section lane's score of each of ``chunks`` that scores: one per asked purpose (``roles``) its heading
    declares, :data:`HEADING_NAME` when its heading holds one of ``names`` (:func:`named_sections`), and
    :data:`NAMED_BONUS` more in the document the question names alone (``named``)."""
    headed = named_sections(chunks, names)
    scores = {}
    for chunk in chunks:
        matched = len(roles & section_purposes(chunk.headings)) + (HEADING_NAME if chunk.id in headed else 0.0)
        if matched:
            scores[chunk.id] = matched + (NAMED_BONUS if chunk.document_id == named else 0.0)
    return scores


def named_sections(chunks: Iterable[Chunk], names: Iterable[str], *, whole: bool = False) -> set[str]:
    """The ids of ``chunks`` in a section whose own heading (below its document's title) holds one of ``names`` (a
    question's identifiers), when that name heads no other section among ``chunks``: an alert or a variable on a
    reference page (``TiKV_channel_full_total`` among a hundred alerts), not a product name that heads half of its
    documents' sections (TiCDC). A title is the keyword layer's to match: it names the whole document. ``whole``:
    the one section's heading must also be the name and nothing else (``TiKV_channel_full_total``, not ``TiCDC 常见
    问题``; nor a variable whose heading adds a version note).
    """
    wanted = frozenset(names)
    sections: dict[str, dict[tuple[str, str], tuple[str, list[str]]]] = {}
    for chunk in chunks:
        if wanted and chunk.headings and chunk.headings[-1][0] > 1:
            heading = chunk.headings[-1][1]
            for name in wanted & _heading_names(heading):
                key = (chunk.document_id, chunk.anchor)
                sections.setdefault(name, {}).setdefault(key, (heading, []))[1].append(chunk.id)
    return {
        c
        for name, found in sections.items()
        if len(found) == 1
        for heading, ids in found.values()
        if not whole or _letters(heading) == _letters(name)
        for c in ids
    }


@functools.lru_cache(maxsize=HEADING_CACHE)  # 3 us each to read, 600 in a large pool
def _heading_names(heading: str) -> frozenset[str]:
    return frozenset(identifiers(heading))


def _letters(text: str) -> str:
    return re.sub(r"[\W_]", "", text.casefold())
