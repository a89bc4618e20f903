"""Words people use for the same thing: a query's terms widened by groups of equivalent terms, at a lower weight.

A question says 连不上 where the runbook says 连接失败, *slow query* where it says 慢查询, 内存爆了 where it says
OOM. A group of such terms (one per line, the synonyms-file format of ``core.rewrite``) that a query names adds the
group's other words to the BM25 query, each counting ``weight / sqrt(n)`` of a query word for the ``n`` words the
group adds: a section that uses the documentation's word can now match, and one that repeats the question's own
words still ranks first. The bundled groups (``lexicons/ops-terms.txt``) are general operations vocabulary
(symptoms, resources, engine concepts, actions), Chinese and English, written before any question set they are
measured on; the container and Kubernetes groups were added later, for Chinese questions over English alert
runbooks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from kbseek.core.analysis import contains_term, normalize
from kbseek.core.clauses import cjk_share

BUNDLED = Path(__file__).with_name("lexicons") / "ops-terms.txt"


class Lexicon:
    """Term groups, each term held as its normalised text and its analysed tokens.

    >>> lex = Lexicon([("连不上", "连接失败", "connection refused")], lambda s: s.lower().split())
    >>> sorted(lex.expansions("数据库连不上", ["数据库", "连不上"], 0.6).items())
    [('connection', 0.3464), ('refused', 0.3464), ('连接失败', 0.3464)]
    """

    def __init__(self, groups: Sequence[tuple[str, ...]], analyze: Callable[[str], list[str]]) -> None:
        self._groups = [[(normalize(term), tuple(dict.fromkeys(analyze(term)))) for term in group] for group in groups]

    def __len__(self) -> int:
        return len(self._groups)

    def expansions(self, query: str, tokens: Sequence[str], weight: float) -> dict[str, float]:
        """The tokens the query's groups add, each with its weight; none that the query already holds.

        A term is named when its text is in the query (Chinese anywhere, identifiers on their boundaries) or, for
        a term of several words, when all its tokens are (so *slow queries* names *slow query*)."""
        if weight <= 0:
            return {}
        folded = normalize(query)
        present = set(tokens)
        added: dict[str, float] = {}
        for group in self._groups:
            named = _named(group, folded, present)
            if not named:
                continue
            # in the group's order: BM25 sums its terms' float32 scores in this order, and a set's order changes with
            # each process's string hashing, which moved scores in their last bits from one process to the next
            new = dict.fromkeys(
                t for i, (_, analysed) in enumerate(group) if i not in named for t in analysed if t not in present
            )
            # a group of many terms must not outweigh the question: its words share the weight (measured better
            # than each word at a fixed weight, docs/evaluation.md)
            share = weight / math.sqrt(len(new)) if new else 0.0
            for token in new:
                added[token] = max(added.get(token, 0.0), round(share, 4))
        return added

    def translations(self, query: str, tokens: Sequence[str], *, chinese: bool, per_group: int) -> list[str]:
        """The terms of the groups the query names that are written in the other script (Chinese when ``chinese``,
        else Latin letters), at most ``per_group`` of each group in its order, none the query holds already.

        >>> lex = Lexicon([("回滚", "回退", "撤回", "rollback", "roll back")], lambda s: s.lower().split())
        >>> lex.translations("How do I roll back a release?", ["how", "roll", "back", "release"], chinese=True,
        ...                  per_group=2)
        ['回滚', '回退']
        """
        folded, present = normalize(query), set(tokens)
        out: dict[str, None] = {}
        for group in self._groups if per_group > 0 else ():
            if _named(group, folded, present):
                other = [text for text, _ in group if (cjk_share(text) > 0.5) == chinese and text not in folded]
                out.update(dict.fromkeys(other[:per_group]))
        return list(out)


def _named(group: list[tuple[str, tuple[str, ...]]], folded: str, present: set[str]) -> list[int]:
    """Which terms of ``group`` a query names: its text is in the (normalised) query, Chinese anywhere and
    identifiers on their boundaries, or, for a term of several words, all its tokens are among the query's."""
    return [
        i
        for i, (text, analysed) in enumerate(group)
        if analysed and (contains_term(folded, text) or (len(analysed) > 1 and present.issuperset(analysed)))
    ]
