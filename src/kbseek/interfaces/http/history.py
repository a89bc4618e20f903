"""A document's history over REST: ``/api/documents/{path}/history``, ``/versions/{n}``, ``/diff`` and
``/rollback``.

Mounted before the ``documents`` router, whose ``/api/documents/{path}`` would otherwise take these paths as
document paths. A rollback is a write: it needs the write key (the guard decides that from ``Write`` below) and is
attributed to it in the audit and the history, as an upload is.
"""

# no "from __future__ import annotations": FastAPI reads the parameters' Annotated types at import
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from kbseek.interfaces.http.deps import Kb, Read, Write
from kbseek.observability.logs import actor_scope

router = APIRouter(tags=["documents"])
MAX_VERSION = 2**31 - 1  # a version number the database's integer column can hold
VersionNumber = Annotated[int, Query(ge=1, le=MAX_VERSION, description="A version number (see the history)")]


class Rollback(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to: int = Field(ge=1, le=MAX_VERSION, description="The version to bring back as the newest one")


@router.get(
    "/api/documents/{path:path}/history",
    summary="A document's kept versions, oldest first (also of a deleted document)",
)
def history(_: Read, kb: Kb, path: str) -> dict[str, Any]:
    return kb.document_history(path)


@router.get("/api/documents/{path:path}/versions/{version}", summary="One version with its stored Markdown")
def one_version(
    _: Read, kb: Kb, path: str, version: Annotated[int, PathParam(ge=1, le=MAX_VERSION, description="Its number")]
) -> dict[str, Any]:
    return kb.document_history(path, version)


@router.get("/api/documents/{path:path}/diff", summary="The unified diff of two versions' stored Markdown")
def diff(_: Read, kb: Kb, path: str, a: VersionNumber, b: VersionNumber) -> dict[str, Any]:
    return kb.document_diff(path, a, b)


@router.post(
    "/api/documents/{path:path}/rollback",
    summary="Bring back an earlier version as the newest one",
    description="A new version with the old text, stored like a replace: indexes and vectors follow. 404 for a "
    "version not kept or a deleted document; 422 for a version that is a deletion. Nothing changes then.",
)
def rollback(principal: Write, kb: Kb, path: str, body: Annotated[Rollback, Body()]) -> dict[str, Any]:
    with actor_scope("api", principal.key_id):
        shown = kb.rollback(path, body.to)
    return shown | {"vectors": kb.vector_status(shown["document_id"])}
