"""A question's clauses, and its script: what the multi-part and cross-language recall read of a query.

A two-part question ("how do I locate the hot thread, and then how do I verify the fix?") is answered by two
sections; recalled as one bag of words, the section sharing most words with the whole question wins and the
other part's section can fall out of the top five. :func:`clauses` splits a question at sentence punctuation
and at Chinese and English connectives, keeping parts with enough words of their own.

>>> clauses("Java 进程 CPU 很高：怎么找到是哪个线程在占？如果是 GC 线程，下一步该做什么？")
['Java 进程 CPU 很高：怎么找到是哪个线程在占', '如果是 GC 线程', '下一步该做什么']
>>> clauses("how do I find the hot thread and then verify the fix")
['how do I find the hot thread', 'verify the fix']
>>> clauses("ERR_TIMEOUT 怎么排查")
['ERR_TIMEOUT 怎么排查']
>>> round(cjk_share("How do I roll back?"), 2), round(cjk_share("怎么回滚 release"), 2)
(0.0, 0.8)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

_ENDS = r"[；;？?。！!\n]+"
_NEXT_REQUEST_ZH = "并且|而且|以及|同时|然后|之后再|另外|此外|接着"  # connectives that start another request
_NEXT_REQUEST_EN = "and then|and also|as well as"
_SPLIT = re.compile(
    rf"{_ENDS}|[，,](?!\d)|(?:{_NEXT_REQUEST_ZH}|再说|还有)|\s+(?:{_NEXT_REQUEST_EN}|then|also|plus|and)\s+",
    re.IGNORECASE,
)
# Between questions: sentence ends and those connectives, never a bare comma (a comma mostly adds context to the
# same request: "CPU 持续偏高，除了当场救火，根治层面要做哪些事情")
_QUESTION_SPLIT = re.compile(rf"{_ENDS}|(?:{_NEXT_REQUEST_ZH})|\s+(?:{_NEXT_REQUEST_EN})\s+", re.IGNORECASE)
MIN_CLAUSE_CHARS = 4  # a clause shorter than this joins its neighbour: "和" alone splits nothing


def clauses(query: str) -> list[str]:
    """The parts of a question (the question itself when it has one part)."""
    return _parts(_SPLIT, query)


def questions(query: str) -> list[str]:
    """The separate requests of a query: split only where another question starts, not at commas.

    >>> questions("磁盘告警时，怎么找出哪个目录占空间最多？清理完之后要验证哪些方面？")
    ['磁盘告警时，怎么找出哪个目录占空间最多', '清理完之后要验证哪些方面']
    >>> questions("CPU 持续偏高，除了当场救火，根治层面要做哪些事情？")
    ['CPU 持续偏高，除了当场救火，根治层面要做哪些事情']
    """
    return _parts(_QUESTION_SPLIT, query)


def _parts(split: re.Pattern[str], query: str) -> list[str]:
    parts = [p.strip(" :：、") for p in split.split(query)]
    parts = [p for p in parts if p]
    merged: list[str] = []
    for part in parts:
        if merged and _size(part) < MIN_CLAUSE_CHARS:
            merged[-1] = f"{merged[-1]} {part}"
        else:
            merged.append(part)
    if len(merged) > 1 and _size(merged[0]) < MIN_CLAUSE_CHARS:
        merged[1] = f"{merged[0]} {merged[1]}"
        merged.pop(0)
    return merged or [query.strip()]


def _size(text: str) -> int:
    """Characters of Chinese plus two per word of other scripts: about how much a clause says."""
    return len(_CJK.findall(text)) + 2 * len(re.findall(r"[A-Za-z0-9_]+", text))


_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")  # counted by the regex engine: chunks are read per lookup
_LATIN_WORD = re.compile("[A-Za-z]+")


@functools.lru_cache(maxsize=20_000)  # the same chunk texts are read by lookup after lookup
def cjk_share(text: str) -> float:
    """Share of the text's letters that are Chinese characters (an English word counts as one letter)."""
    cjk = len(_CJK.findall(text))
    words = len(_LATIN_WORD.findall(text))
    return cjk / (cjk + words) if cjk + words else 0.0


CROSS_LANGUAGE_GAP = 0.6  # of the Chinese share: an English question over Chinese chunks differs by about 0.9


def other_language(query: str, evidence: Sequence[float]) -> bool:
    """Whether ``query`` is written in another script (Chinese or not) than the evidence, on average: ``evidence``
    holds each text's ``cjk_share`` (the indexes keep every chunk's, computed once per refresh).

    >>> other_language("Who do we escalate to?", [cjk_share("升级机制：30 分钟未恢复，通知技术负责人")])
    True
    >>> other_language("HighCPUUsage 告警怎么处理", [cjk_share("CPU 使用率过高告警处理方案")]), other_language("x", [])
    (False, False)
    """
    if not evidence:
        return False
    return abs(cjk_share(query) - sum(evidence) / len(evidence)) > CROSS_LANGUAGE_GAP
