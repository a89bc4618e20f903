"""What a recall returns: ranked hits with each lane's score, the category filter used, and the L0 hint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kbseek.core.keywords import KeywordHint
from kbseek.core.models import Chunk


@dataclass(frozen=True, slots=True)
class LaneScore:
    """One recall lane's view of a chunk: its rank (1-based) and the score the lane gave it.

    ``score_label`` says what ``score`` is: ``bm25``, ``similarity`` (cosine, higher is closer),
    ``l0`` (the document's L0 match score), ``rank`` (an interleaving lane's, higher is earlier), ``heading``
    (the section lane's purpose or name match), ``terms`` (the latent-terms lane's dot product) or ``rerank`` (a
    reranker endpoint's relevance score).
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
class RecallResult:
    """A ranked recall: the fused hits, how they were reached, and for a lookup the L0 hint beside them.

    ``search`` (``/api/search/similar``) and ``lookup`` (the recall under ``lookup_knowledge``) return this one
    shape; a search leaves ``hint`` unset. ``candidates`` are each lane's ids and raw scores before fusion (what a
    fixture records), ``reference_similarity`` the dense lane's ``GAP_RANK``-th best cosine (the relevance gap).
    """

    query: str
    request_id: str
    policy: str
    hits: tuple[Hit, ...]
    filter: CategoryFilter
    index_version: str
    timings_ms: dict[str, float]
    notes: tuple[str, ...] = ()  # degraded paths taken: a fallback store, a missing lane
    hint: KeywordHint | None = None
    explain: dict[str, Any] = field(default_factory=dict)
    reference_similarity: float | None = None
    candidates: dict[str, list[tuple[str, float]]] = field(default_factory=dict)


# The names the two recalls were published under (``kbseek.SearchResult``, ``kbseek.LookupResult``): one type.
SearchResult = RecallResult
LookupResult = RecallResult
