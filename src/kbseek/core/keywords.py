"""L0: the keyword hint over frontmatter (keywords, title, summary, category: a ``DocumentCard``), in memory.

Matches are scored and ordered, not merely tested for a substring. Each document's best match sets
its tier: exact keyword 6 > partial keyword 5 > exact title 4 > partial title 3 > exact summary 2 >
partial summary 1 > category 0.5; its other matches add up to 0.99 inside the tier (a document
matching two keywords beats one matching one). *Exact* means the whole keyword (title, summary)
occurs in the query, on identifier boundaries for ASCII edges; *partial* means a query word is a part of the
keyword (``timeout`` in ``ERR_TIMEOUT``, ``网关`` in ``支付网关``); parts of a query identifier
(``high`` of ``KafkaConsumerLagHigh``) count only when they cover half of the keyword's parts. Any
shared title or summary token is a partial title or summary match. Tokens shared by more than a
fifth of the documents' titles and summaries are too common to make a partial title/summary match.
A title or summary of a single token counts as partial even when it occurs whole. A token found in
the frontmatter of more than 5% of the documents (and over 50 of them) selects no candidates: a
hint every other document shares is no hint, and skipping it keeps ``analyze_query`` fast. The single domain
is the one category of the *strong* matches (exact keyword or exact title), else none: partial
matches are too loose to narrow the search on.
"""

from __future__ import annotations

import heapq
import math
import re
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field

from kbseek.core.alertline import clean as clean_query
from kbseek.core.analysis import Analyzer, contains_term, identifier_tokens, normalize
from kbseek.core.models import DocumentCard

_IDENTIFIER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.\-:/]*[A-Za-z0-9])?")

TIERS = {
    ("keyword", True): 6.0,
    ("keyword", False): 5.0,
    ("title", True): 4.0,
    ("title", False): 3.0,
    ("summary", True): 2.0,
    ("summary", False): 1.0,
    ("category", True): 0.5,
}
STRONG_TIER = 4.0
COMMON_SHARE = 0.2
HINT_SHARE, MIN_HINT_DF = 0.05, 50
MAX_CANDIDATES = 200


@dataclass(frozen=True, slots=True)
class DocumentMatch:
    document_id: str
    path: str
    title: str
    category: str
    score: float
    field: str  # the best match: keyword | title | summary | category
    exact: bool
    matched_keywords: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KeywordHint:
    """The L0 hint of a query: matches, matched keywords, domains, and the single domain or none."""

    query: str
    matches: tuple[DocumentMatch, ...] = ()
    matched_keywords: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    single_domain: str | None = None


@dataclass(slots=True)
class _Prepared:
    entry: DocumentCard
    keywords: list[tuple[str, str, frozenset[str]]]  # original, normalised, parts
    title: str
    title_tokens: frozenset[str]
    summary: str
    summary_tokens: frozenset[str]
    category: str
    tokens: frozenset[str] = field(default_factory=frozenset)


class KeywordIndex:
    """Thread-safe L0 index; ``analyze_query`` gives the L0 hint of one query.

    >>> index = KeywordIndex(Analyzer())
    >>> index.upsert(DocumentCard("d1", "api/pay.md", "支付网关错误码定义", "错误码含义", ("ERR_TIMEOUT",), "api"))
    >>> hint = index.analyze_query("timeout")
    >>> hint.matches[0].path, hint.matches[0].exact, hint.single_domain
    ('api/pay.md', False, None)
    >>> index.analyze_query("ERR_TIMEOUT 怎么办").single_domain
    'api'
    """

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer
        self._lock = threading.RLock()
        self._docs: dict[str, _Prepared] = {}
        self._postings: dict[str, set[str]] = {}
        self._text_df: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._docs)

    def load(self, entries: list[DocumentCard]) -> None:
        with self._lock:
            self._docs.clear()
            self._postings.clear()
            self._text_df.clear()
            for entry in entries:
                self.upsert(entry)

    def upsert(self, entry: DocumentCard) -> None:
        prepared = self._prepare(entry)
        with self._lock:
            self.remove(entry.id)
            self._docs[entry.id] = prepared
            for token in prepared.tokens:
                self._postings.setdefault(token, set()).add(entry.id)
            self._text_df.update(prepared.title_tokens | prepared.summary_tokens)

    def remove(self, document_id: str) -> None:
        with self._lock:
            old = self._docs.pop(document_id, None)
            if old is None:
                return
            for token in old.tokens:
                holders = self._postings.get(token)
                if holders is not None:
                    holders.discard(document_id)
                    if not holders:
                        del self._postings[token]
            self._text_df.subtract(old.title_tokens | old.summary_tokens)

    def _prepare(self, entry: DocumentCard) -> _Prepared:
        tokens = self.analyzer.tokens  # interned by the analyser: one string per word across entries and postings
        keywords = []
        for keyword in entry.keywords:
            norm = normalize(keyword).strip()
            if norm:
                parts = frozenset(t for t in tokens(keyword) if t != norm) or frozenset(tokens(keyword))
                keywords.append((keyword, norm, parts))
        title_tokens = frozenset(tokens(entry.title))
        summary_tokens = frozenset(tokens(entry.summary))
        all_tokens = set(title_tokens | summary_tokens)
        for _, norm, parts in keywords:
            all_tokens |= parts
            all_tokens.update(tokens(norm))
        category = sys.intern(normalize(entry.category))
        all_tokens.add(category)
        return _Prepared(
            entry,
            keywords,
            normalize(entry.title).strip(),
            title_tokens,
            normalize(entry.summary).strip(),
            summary_tokens,
            category,
            frozenset(all_tokens),
        )

    def analyze_query(self, query: str, *, limit: int = 10) -> KeywordHint:
        """Score every document whose frontmatter shares a token with ``query``."""
        query = clean_query(query)  # a pasted alert line: its alert name and service, not its labels
        norm = normalize(query)
        query_tokens = set(self.analyzer.tokens(query))
        # parts of a query identifier (``high`` of ``KafkaConsumerLagHigh``) are weaker than words
        derived = {p for raw in _IDENTIFIER.findall(query) for p in identifier_tokens(raw)[1:]}
        with self._lock:
            common = max(3, int(COMMON_SHARE * len(self._docs)))
            too_common = max(MIN_HINT_DF, int(HINT_SHARE * len(self._docs)))
            weights: dict[str, float] = {}
            for token in sorted(query_tokens):  # a set's order changes with the process's string hashing
                holders = self._postings.get(token, ())
                if len(holders) <= too_common:  # a token most documents share is no hint
                    weight = 1.0 / math.log(2 + len(holders))  # rarer tokens weigh more
                    for doc_id in holders:
                        weights[doc_id] = weights.get(doc_id, 0.0) + weight
            # score in full only the documents sharing the most (and rarest) tokens with the query
            # (equal weights fall to the document id: the same candidates in every process)
            candidates = heapq.nsmallest(MAX_CANDIDATES, weights, key=lambda d: (-weights[d], d))
            # a title or summary token too common for a partial match is so for every candidate: sorted out once
            df = self._text_df
            rare = {t for t in query_tokens if df[t] <= common}
            scored = []
            for i, doc_id in enumerate(candidates):
                doc = self._docs[doc_id]
                found = self._score(doc, norm, query_tokens, derived, rare)
                if found is not None:
                    scored.append((-found[0], doc.entry.path, i, doc, found))
        # (-score, path, candidate rank) orders as a stable sort by (-score, path) does; only the first
        # ``limit`` become matches
        scored.sort()
        matches = tuple(_match(doc, *found) for *_, doc, found in scored[:limit])
        keywords = tuple(dict.fromkeys(k for m in matches for k in m.matched_keywords))
        domains = tuple(dict.fromkeys(m.category for m in matches))
        strong = {m.category for m in matches if m.exact and m.score >= STRONG_TIER}
        single = next(iter(strong)) if len(strong) == 1 else None
        return KeywordHint(query, matches, keywords, domains, single)

    def _score(
        self, doc: _Prepared, query: str, tokens: set[str], derived: set[str], rare: set[str]
    ) -> tuple[float, float, tuple[str, ...]] | None:
        """(score, best tier, matched keywords), or None when nothing matches; ``rare``: the query tokens
        uncommon enough for a partial title or summary match."""
        # the best hit is the highest tier, and the strongest in it; the other hits' tiers add to the bonus
        best, strength, total = 0.0, 0.0, 0.0
        matched: list[tuple[float, str]] = []
        for original, norm, parts in doc.keywords:
            if contains_term(query, norm):
                tier, power = _EXACT_KEYWORD, 1.0
                matched.append((2.0, original))
            elif (shared := parts & tokens) and (shared - derived or len(shared) * 2 >= len(parts)):
                tier, power = _PARTIAL_KEYWORD, len(shared) / len(parts)
                matched.append((power, original))
            else:
                continue
            total += tier
            if tier > best or (tier == best and power > strength):
                best, strength = tier, power
        for exact_tier, partial_tier, text, text_tokens in (
            (_EXACT_TITLE, _PARTIAL_TITLE, doc.title, doc.title_tokens),
            (_EXACT_SUMMARY, _PARTIAL_SUMMARY, doc.summary, doc.summary_tokens),
        ):
            if len(text) >= 2 and text in query and contains_term(query, text):  # ``in``: a cheap first test
                # a one-word title ("RESTORE") is a weak, not an exact, title match
                tier, power = (exact_tier if len(text_tokens) >= 2 else partial_tier), 1.0
            elif shared_rare := text_tokens & rare:
                tier, power = partial_tier, len(shared_rare) / max(1, len(text_tokens))
            else:
                continue
            total += tier
            if tier > best or (tier == best and power > strength):
                best, strength = tier, power
        if doc.category in tokens:
            total += _CATEGORY
            if best < _CATEGORY:
                best, strength = _CATEGORY, 1.0
        if not best:
            return None
        # tiers are halves and wholes, so their sums are exact in any order
        bonus = min(0.99, strength / 2 + (total - best) / 20)
        if len(matched) > 1:
            matched.sort(key=lambda m: -m[0])
        return round(best + bonus, 4), best, tuple(m[1] for m in matched)


_EXACT_KEYWORD, _PARTIAL_KEYWORD = TIERS["keyword", True], TIERS["keyword", False]
_EXACT_TITLE, _PARTIAL_TITLE = TIERS["title", True], TIERS["title", False]
_EXACT_SUMMARY, _PARTIAL_SUMMARY = TIERS["summary", True], TIERS["summary", False]
_CATEGORY = TIERS["category", True]
_FIELD_OF_TIER = {tier: key for key, tier in TIERS.items()}  # each tier is one field and exactness


def _match(doc: _Prepared, score: float, tier: float, matched: tuple[str, ...]) -> DocumentMatch:
    field_name, exact = _FIELD_OF_TIER[tier]
    entry = doc.entry
    return DocumentMatch(entry.id, entry.path, entry.title, entry.category, score, field_name, exact, matched)
