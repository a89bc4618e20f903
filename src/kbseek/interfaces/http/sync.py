"""The configured Git sources over REST: ``GET /api/sync/git`` lists them with their last results, ``POST
/api/sync/git`` syncs one of them now (a write: the write key, attributed to it in the audit and the history).

A request names a source from the ``git_sources`` setting (by name or index), never a repository: what git
fetches is the operator's choice alone. A sync of a source already syncing answers 409 at once.
"""

# no "from __future__ import annotations": FastAPI reads the parameters' Annotated types at import
from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from kbseek.interfaces.http.deps import CurrentRuntime, Read, Write
from kbseek.observability.logs import actor_scope

router = APIRouter(tags=["sources"])


class SyncRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: Annotated[str, Field(min_length=1, max_length=100)] | Annotated[int, Field(ge=0, le=1000)] = Field(
        description="A configured source's name, or its index in GET /api/sync/git"
    )


@router.get("/api/sync/git", summary="The configured Git sources and their last sync results")
def sources(_: Read, runtime: CurrentRuntime) -> dict[str, Any]:
    return {"sources": runtime.live.sources.describe()}


@router.post(
    "/api/sync/git",
    summary="Sync one configured Git source now",
    description="Only sources of the git_sources setting, named by name or index. 404 for an unknown source, 409 "
    "while that source is syncing (by schedule or another request); a failed git or missing ref is the error, and "
    "also the source's last result.",
)
def sync(principal: Write, runtime: CurrentRuntime, body: Annotated[SyncRequest, Body()]) -> dict[str, Any]:
    live = runtime.live
    with actor_scope("api", principal.key_id):
        result = live.sources.sync(body.source)
    state = live.sources.find(body.source)
    return {"name": state.source.name, **result}
