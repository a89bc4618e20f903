"""``/api/search/similar`` (ranked chunks with their lane scores) and ``/api/lookup`` (the agent tool
``lookup_knowledge`` as JSON, text or the legacy shape; ``explain=true`` adds how the answer was reached)."""

# no "from __future__ import annotations": FastAPI reads the parameters' Annotated types at import
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from kbseek.core.modes import RecallPolicy
from kbseek.interfaces.http.deps import Kb, Read
from kbseek.interfaces.http.guard import ApiError
from kbseek.lookup.render import legacy_view, render_text, response_view
from kbseek.lookup.views import lane_view, search_view

router = APIRouter(tags=["retrieval"])
EXPLAIN_LIMIT = 20  # candidates per lane, and places of the fused ranking, in an explain view


@router.get("/api/search/similar", summary="Ranked chunks with their lane scores")
def search(
    _: Read,
    kb: Kb,
    query: Annotated[str, Query(min_length=1, max_length=2000)],
    top_k: Annotated[int, Query(ge=1, le=100)] = 10,
    category: str | None = None,
    policy: RecallPolicy | None = None,
    threshold: Annotated[float | None, Query(ge=-1, le=1)] = None,
) -> dict[str, Any]:
    return search_view(kb.search(query, top_k=top_k, category=category, policy=policy, threshold=threshold))


@router.post("/api/lookup", summary="lookup_knowledge: levelled, deduplicated evidence")
async def lookup(
    _: Read,
    kb: Kb,
    request: Request,
    format: Annotated[str, Query(pattern="^(json|text|legacy)$")] = "json",
    explain: Annotated[bool, Query(description="json: add each lane's candidates and the fused ranking")] = False,
) -> Response:
    try:
        body = await request.json()
    except ValueError:
        raise ApiError(400, "invalid_json", "the body is not valid JSON") from None
    except RecursionError:
        raise ApiError(400, "invalid_json", "the body nests too deep") from None
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_request", "the body must be a JSON object of lookup_knowledge parameters")
    response = await run_in_threadpool(kb.lookup_knowledge, body)
    if format == "text":
        return PlainTextResponse(render_text(response))
    view = legacy_view(response) if format == "legacy" else response_view(response) | {"text": render_text(response)}
    if explain and format == "json":
        view["explain"] = explain_view(response)
    return JSONResponse(view)


def explain_view(response: Any, *, limit: int = EXPLAIN_LIMIT) -> dict[str, Any]:
    """How a ``lookup_knowledge`` answer was reached, from its fused recall (``response.ranked``): each lane's
    candidates in the lane's own order (scores as the answer's pieces show them, :func:`lane_view`), and the fused
    ranking with every lane's rank and, for what reached the answer, its relevance level.

    >>> from types import SimpleNamespace as NS
    >>> chunk = NS(id="c1", source_path="api/p.md", breadcrumb="P > ERR", heading_path=("P", "ERR"), anchor="err")
    >>> hit = NS(rank=1, score=0.9, chunk=chunk, lanes={"bm25": NS(rank=2, score=3.5, score_label="bm25")})
    >>> piece = NS(chunk_ids=("c1",), level="PRECISE")
    >>> response = NS(ranked=(hit,), answer=NS(documents=[NS(pieces=[piece])]))
    >>> view = explain_view(response)
    >>> view["lanes"]["bm25"][0]["rank"], view["fused"][0]["lanes"], view["fused"][0]["relevance"]
    (2, {'bm25': 2}, 'PRECISE')
    """
    levels = {
        cid: piece.level for entry in response.answer.documents for piece in entry.pieces for cid in piece.chunk_ids
    }
    lanes: dict[str, list[dict[str, Any]]] = {}
    for hit in response.ranked:
        for name, lane in hit.lanes.items():
            lanes.setdefault(name, []).append({**_chunk_ref(hit.chunk), **lane_view(lane)})
    return {
        "candidates": len(response.ranked),
        "lanes": {name: sorted(rows, key=lambda r: r["rank"])[:limit] for name, rows in sorted(lanes.items())},
        "fused": [
            {
                "rank": hit.rank,
                **_chunk_ref(hit.chunk),
                "score": round(hit.score, 6),
                "lanes": {name: lane.rank for name, lane in hit.lanes.items()},
                "relevance": levels.get(hit.chunk.id),
            }
            for hit in response.ranked[:limit]
        ],
    }


def _chunk_ref(chunk: Any) -> dict[str, Any]:
    return {
        "chunk_id": chunk.id,
        "path": chunk.source_path,
        "breadcrumb": chunk.breadcrumb,
        "heading_path": list(chunk.heading_path),
        "anchor": chunk.anchor,
    }
