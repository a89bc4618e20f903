"""The records: a session's diagnosis trace and its bounded summary for a verifier, the recorded
``lookup_knowledge`` calls, and the write audit (all reads)."""

# no "from __future__ import annotations": FastAPI reads the parameters' Annotated types at import
import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Query

from kbseek.core.spans import parse_since
from kbseek.errors import KbseekError
from kbseek.interfaces.http.deps import Kb, Read
from kbseek.interfaces.http.guard import ApiError
from kbseek.lookup.views import jsonable
from kbseek.observability.trace_summary import summarize

router = APIRouter(tags=["sessions"])
Since = Annotated[str | None, Query(description="24h, 7d or an ISO date")]


@router.get("/api/sessions/{session_id}/trace", summary="A session's diagnosis trace")
def trace(_: Read, kb: Kb, session_id: str) -> dict[str, Any]:
    return jsonable(kb.trace(session_id))


@router.get("/api/sessions/{session_id}/verify-summary", summary="The bounded tool-trace summary for a verifier")
def verify_summary(
    _: Read, kb: Kb, session_id: str, limit: Annotated[int, Query(ge=200, le=20_000)] = 2000
) -> dict[str, Any]:
    return summarize(kb.trace(session_id), limit=limit)


@router.get("/api/invocations", summary="Recorded lookup_knowledge calls, newest last")
def invocations(
    _: Read,
    kb: Kb,
    session: str | None = None,
    since: Since = None,
    level: str | None = None,
    failed: bool = False,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> dict[str, Any]:
    rows = kb.list_invocations(session_id=session, since=_since(since), level=level, failed=failed, limit=limit)
    return {"invocations": [jsonable(r) for r in rows]}


@router.get("/api/audit", summary="The write audit: who changed which document and when")
def audit(
    _: Read,
    kb: Kb,
    path: str | None = None,
    since: Since = None,
    action: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> dict[str, Any]:
    rows = kb.list_audit(path=path, since=_since(since), action=action, limit=limit)
    return {"entries": [jsonable(r) for r in rows]}


def _since(text: str | None) -> dt.datetime | None:
    """The ``since`` parameter as a time, or 422 naming it."""
    if not text:
        return None
    try:
        return parse_since(text, dt.datetime.now(dt.UTC))
    except KbseekError as exc:
        raise ApiError(
            422,
            "invalid_request",
            f"query.since: {text[:100]!r} is not a span like 24h or 7d back from now, nor an ISO date",
            hint=exc.hint,
        ) from None
