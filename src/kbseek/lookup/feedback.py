"""Feedback from those who read the evidence: ``report_evidence`` (MCP) and ``POST /api/feedback``.

A report names one recorded ``lookup_knowledge`` call by its request id and says its evidence ``helped``, was
``wrong`` or ``outdated``, or that the answer ``missed`` something (optionally which chunks, and a note). It is
checked against the record before anything is stored: an unknown request id, a session that is not the call's, or
a chunk the answer did not give (for ``missed``: a chunk the knowledge base does not hold) is refused, naming the
field. "Outdated" reports put their documents on the review list; "wrong" and "missed" ones become golden cases
(``kbseek eval add-case --from-feedback``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from kbseek.errors import InvalidRequest, NotFoundError

VERDICTS = ("helped", "wrong", "outdated", "missed")
MAX_CHUNKS = 50
_Id = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]

REPORT_DESCRIPTION = (
    "Tell the knowledge base how a lookup_knowledge answer served you, so its owners can fix what misled you: "
    "verdict helped (the evidence answered), wrong (it was not the answer), outdated (it no longer matches the "
    "system) or missed (the answer left out what was needed). Name the call by the request_id its answer carried; "
    "add the chunk_ids of the pieces you mean (the items' chunk_ids; for missed, the chunks that should have come), "
    "your session_id and a short note. Reporting changes no answer; it is recorded for review."
)


class FeedbackRequest(BaseModel):
    """``report_evidence``'s arguments (and ``POST /api/feedback``'s body); strict like ``LookupRequest``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    request_id: Annotated[_Id, Field(max_length=64, description="The request_id of the lookup_knowledge answer.")]
    verdict: Annotated[Literal["helped", "wrong", "outdated", "missed"], Field(description="What the evidence was.")]
    chunk_ids: Annotated[
        list[_Id],
        Field(max_length=MAX_CHUNKS, description="The pieces meant (their chunk_ids); none: the whole answer."),
    ] = []
    chunk_id: Annotated[_Id | None, Field(description="One piece meant (same as a one-item chunk_ids).")] = None
    session_id: Annotated[_Id | None, Field(description="Your session_id, as passed to lookup_knowledge.")] = None
    note: Annotated[str | None, Field(max_length=2000, description="What was wrong, outdated or missing.")] = None

    @classmethod
    def parse(cls, arguments: Any) -> FeedbackRequest:
        if isinstance(arguments, cls):
            return arguments
        try:
            return cls.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
            raise InvalidRequest(f"invalid report_evidence request: {problems}") from None

    @property
    def chunks(self) -> list[str]:
        return list(dict.fromkeys([*self.chunk_ids, *([self.chunk_id] if self.chunk_id else [])]))


def feedback_row(request: FeedbackRequest, call: dict[str, Any] | None, chunks: dict[str, Any]) -> dict[str, Any]:
    """The row to store for ``request`` about the recorded ``call`` (``None``: no such call), with ``chunks`` the
    indexed chunks by id; a report that does not fit the record raises and nothing is stored."""
    if call is None:
        raise NotFoundError(
            f"request_id: no recorded lookup_knowledge call with request id {request.request_id!r}",
            hint="use the request_id of a lookup_knowledge answer; calls past the invocation retention are gone",
        )
    if request.session_id is not None and call["session_id"] != request.session_id:
        raise InvalidRequest(
            f"session_id: call {request.request_id!r} belongs to session {call['session_id']!r}, "
            f"not {request.session_id!r}",
            hint="leave session_id out, or pass the one the lookup was made with",
        )
    given = {e["path"] for e in call["evidence"]}
    evidence = []
    for chunk_id in request.chunks:
        chunk = chunks.get(chunk_id)
        if chunk is None:
            raise InvalidRequest(
                f"chunk_ids: no chunk {chunk_id!r} in the knowledge base",
                hint="use the chunk_ids of the answer's items",
            )
        if request.verdict != "missed" and chunk.source_path not in given:
            raise InvalidRequest(
                f"chunk_ids: chunk {chunk_id!r} ({chunk.source_path}) was not in the answer of {request.request_id!r}",
                hint="report the pieces that answer gave, or use verdict 'missed' for evidence it left out",
            )
        evidence.append({"chunk_id": chunk_id, "path": chunk.source_path, "heading_path": list(chunk.heading_path)})
    if not request.chunks:
        evidence = [{"chunk_id": None, "path": path, "heading_path": []} for path in sorted(given)]
    return {
        "request_id": request.request_id,
        "session_id": call["session_id"],
        "verdict": request.verdict,
        "chunk_ids": request.chunks,
        "evidence": evidence,
        "note": request.note,
        "query": call["query"],
    }


def feedback_view(row: dict[str, Any]) -> dict[str, Any]:
    """A stored report as JSON (the REST answer, the MCP result, the trace)."""
    return {
        "id": row["id"],
        "request_id": row["request_id"],
        "session_id": row["session_id"],
        "verdict": row["verdict"],
        "chunk_ids": list(row["chunk_ids"]),
        "evidence": list(row["evidence"]),
        "note": row["note"],
        "query": row["query"],
        "actor": row["actor"],
        "key_id": row["key_id"],
        "at": row["created_at"].isoformat(),
    }


def outdated_by_path(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """ "Outdated" reports by the document they name (a report of several documents counts for each)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        for path in dict.fromkeys(e["path"] for e in row["evidence"]):
            out.setdefault(path, []).append({"id": row["id"], "created_at": row["created_at"].isoformat()})
    return out
