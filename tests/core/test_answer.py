"""Answer assembly: levels, grouping, caps, budget, content forms, dedup pointers (pure core)."""

from __future__ import annotations

import pytest

from kbseek.core.answer import (
    EXCERPT_LONG, EXCERPT_SHORT, Candidate, DocumentEvidence, DocumentInfo, assemble, compact_summary, cut, excerpt,
    join_chunks, metadata_only,
)
from kbseek.core.models import Chunk
from kbseek.core.relevance import (
    HIGHLY_RELEVANT, LEXICAL_ONLY, PRECISE, REFERENCE, Thresholds, level, strongest, thresholds_for,
)

T = Thresholds(0.87, 0.82, 0.8, 0.5, gap_high=0.02, gap_low=0.01)


def chunk(doc: str, index: int, text: str, anchor: str = "a", start: int = 0) -> Chunk:
    return Chunk(f"{doc}-{index}", doc, index, 9, doc.upper(), f"{doc.upper()} > {anchor}", ((2, anchor),), anchor,
                 "ops", f"ops/{doc}.md", text, "h", start, start + len(text), index * 10 + 1, index * 10 + 5)


def info(doc: str, outline=()) -> DocumentInfo:
    return DocumentInfo(doc, f"ops/{doc}.md", doc.upper(), f"about {doc}", ("k1", "k2"), "ops", tuple(outline))


def cand(c: Chunk, lvl: str = HIGHLY_RELEVANT, score: float = 1.0) -> Candidate:
    return Candidate((c,), score, {}, lvl)


@pytest.mark.parametrize("sim, gap, cov, l0, expected", [
    (0.90, 0.03, 0.0, "unique", PRECISE),       # L0 unique match + high similarity that stands out
    (0.10, 0.00, 0.9, "unique", PRECISE),       # ... or full lexical coverage
    (0.90, 0.03, 0.0, "match", HIGHLY_RELEVANT),  # strong, but L0 matched several documents
    (0.84, 0.01, 0.0, "match", HIGHLY_RELEVANT),  # supported and an L0 match
    (0.90, 0.015, 0.0, "none", REFERENCE),      # high cosine, but not far above the query's background
    (0.84, 0.01, 0.0, "none", REFERENCE),
    (None, 0.0, 0.6, "none", REFERENCE),
    (0.95, 0.005, 0.4, "match", None),          # everything is about as similar: not evidence
    (0.80, 0.05, 0.4, "match", None),           # below the cosine floor
    (None, 0.0, 0.0, "unique", None),
])
def test_levels_follow_seed_001(sim, gap, cov, l0, expected):
    assert level(sim, gap, cov, l0, T) == expected


