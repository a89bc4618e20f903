"""What search and lookup return. Open for the later lanes (dense, fusion) and answer shapes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kbseek.core.keywords import KeywordHint
from kbseek.core.models import Chunk


@dataclass(frozen=True, slots=True)
class LaneScore:
    """One recall lane's view of a chunk: its rank (1-based) and the score the lane gave it.

    ``score_label`` says what ``score`` is: ``bm25``, ``similarity`` (cosine, higher is closer) or
    ``l0`` (the document's L0 match score).
    """

    rank: int
    score: float
    score_label: str


@dataclass(frozen=True, slots=True)
class Hit:
    """A ranked chunk with the document fields an agent needs to cite it."""

    rank: int
    score: float
    chunk: Chunk
    document_title: str
    lanes: dict[str, LaneScore] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CategoryFilter:
    category: str | None  # None: no filter was used
    source: str  # "request" | "l0_single_domain" | "none"
    relaxed: bool = False  # the filter found nothing and was dropped


@dataclass(frozen=True, slots=True)
class SearchResult:
    query: str
    request_id: str
    policy: str
    hits: tuple[Hit, ...]
    filter: CategoryFilter
    index_version: str
    timings_ms: dict[str, float]
    notes: tuple[str, ...] = ()  # degraded paths taken: a fallback store, a missing lane


@dataclass(frozen=True, slots=True)
class LookupResult:
    """``lookup_knowledge``'s answer: the L0 hint and the best evidence, with how it was reached."""

    query: str
    request_id: str
    policy: str
    hint: KeywordHint
    evidence: tuple[Hit, ...]
    filter: CategoryFilter
    index_version: str
    timings_ms: dict[str, float]
    notes: tuple[str, ...] = ()
    explain: dict[str, Any] = field(default_factory=dict)
    reference_similarity: float | None = None  # the dense lane's 10th best cosine (relevance gap)
    candidates: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # each lane's, before fusion
