"""``/api/feedback``: readers' reports on a lookup's evidence (write: the write key, attributed to it) and their
list (read). The same report as the MCP tool ``report_evidence`` (``kbseek.lookup.feedback``)."""

# no "from __future__ import annotations": FastAPI reads the parameters' Annotated types at import
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query

from kbseek.interfaces.http.deps import Kb, Read, Write
from kbseek.lookup.feedback import FeedbackRequest
from kbseek.observability.logs import actor_scope

router = APIRouter(tags=["sessions"])


@router.post(
    "/api/feedback",
    status_code=201,
    summary="Report how a lookup's evidence served: helped, wrong, outdated or missed",
    description="Names the call by its request_id. 404 for a request id with no recorded call, 422 for a session "
    "that is not the call's or a chunk the answer did not give; nothing is stored then.",
)
def report(principal: Write, kb: Kb, body: Annotated[FeedbackRequest, Body()]) -> dict[str, Any]:
    with actor_scope("api", principal.key_id):
        return kb.reviews.report(body)


@router.get("/api/feedback", summary="Stored reports on evidence, oldest first")
def listing(
    _: Read,
    kb: Kb,
    session: Annotated[str | None, Query(max_length=128)] = None,
    verdict: Literal["helped", "wrong", "outdated", "missed"] | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> dict[str, Any]:
    rows = kb.reviews.feedback(session_id=session, verdicts=(verdict,) if verdict else None, limit=limit)
    return {"feedback": rows}
