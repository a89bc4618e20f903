"""The fused hits reordered by a reranker endpoint, failing open to the fused order with a note saying so."""

from __future__ import annotations

import logging
from dataclasses import replace

from kbseek.core.results import Hit, LaneScore
from kbseek.errors import RerankError
from kbseek.ports import Reranker

log = logging.getLogger("kbseek")
UNAVAILABLE = "reranker unavailable"  # the start of the note a fail-open lookup carries


def passage(hit: Hit) -> str:
    """What the reranker reads of a hit: its breadcrumb (the section it answers) and its text."""
    return f"{hit.chunk.breadcrumb}\n{hit.chunk.text}" if hit.chunk.breadcrumb else hit.chunk.text


def reranked(reranker: Reranker, query: str, hits: list[Hit]) -> tuple[list[Hit], str]:
    """Of ``hits`` (at least one), the first ``reranker.depth`` in the reranker's order (ties keep the fused
    order) and the rest after them, each reranked hit carrying a ``rerank`` lane score; and the note for the
    result."""
    head = hits[: reranker.depth]
    try:
        scores = reranker.rerank(query, [passage(h) for h in head])
    except RerankError as exc:
        log.warning("%s (%s): the fused ranking is kept", UNAVAILABLE, exc.message)
        return hits, f"{UNAVAILABLE} ({exc.message}): the fused ranking is kept"
    order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
    ranked = [
        replace(head[i], lanes={**head[i].lanes, "rerank": LaneScore(place, scores[i], "rerank")})
        for place, i in enumerate(order, 1)
    ] + hits[len(head) :]
    renumbered = [replace(hit, rank=rank) for rank, hit in enumerate(ranked, 1)]
    return renumbered, f"the first {len(head)} hits were reranked by {reranker.name}"
