"""``/api/documents`` (upload, list, show, replace, delete), ``/api/reindex`` and ``/api/categories``.

Writes are attributed to the caller's key in the write audit. An upload answers each file's report with its
vectors' state (``pending`` while the background worker embeds it): 201 when all are stored, 200 when nothing
was new, 207 when some failed, and when every file failed the error of their shared code.
"""

# no "from __future__ import annotations": FastAPI reads the parameters' Annotated types at import
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Query, UploadFile
from fastapi.responses import JSONResponse

from kbseek.errors import http_status
from kbseek.interfaces.http import errors as api_errors
from kbseek.interfaces.http.deps import Kb, Read, Write
from kbseek.interfaces.http.guard import ApiError, error_body
from kbseek.lookup.review import owners
from kbseek.lookup.views import document_view
from kbseek.maintenance.reindex import reindex as rebuild
from kbseek.observability.logs import actor_scope
from kbseek.service import KnowledgeBase

router = APIRouter(tags=["documents"])


@router.post(
    "/api/documents",
    status_code=201,
    summary="Upload one or many Markdown documents (multipart field 'files')",
    description="Each file gets its report. 201: all stored; 200: nothing new (all unchanged); 207: some "
    "stored, some failed (see each report's status); when every file failed, the error of "
    "their shared code (e.g. 413) or 422, and for several files their reports under "
    "'documents'.",
    responses={207: {"description": "Some files stored, some failed"}, 422: {"description": "No file stored"}},
)
def upload(
    principal: Write,
    kb: Kb,
    files: Annotated[list[UploadFile], File(description="Markdown files")],
    category: Annotated[str | None, Form(description="Category (folder); default: frontmatter")] = None,
) -> JSONResponse:
    reports = []
    with actor_scope("api", principal.key_id):
        for sent in files:
            report = kb.upload(sent.file.read(), sent.filename or "", category=category)
            reports.append(_shown(kb, report.to_dict()))
    failed = [r for r in reports if r["status"] == "failed"]
    if failed and len(failed) == len(reports):
        codes = {r["error_code"] or "document_error" for r in failed}
        code = codes.pop() if len(codes) == 1 else "documents_failed"
        if len(failed) == 1:  # one file: its error, as for any request
            raise ApiError(http_status(code), code, failed[0]["reason"])
        body = error_body(
            code, f"none of the {len(failed)} files was stored", "each file's report is under 'documents'"
        ) | {"documents": reports}
        return JSONResponse(body, status_code=http_status(code))
    stored = any(r["status"] in ("added", "updated") for r in reports)
    return JSONResponse({"documents": reports}, status_code=207 if failed else 201 if stored else 200)


@router.get("/api/documents", summary="List documents, filtered and paginated")
def list_documents(
    _: Read,
    kb: Kb,
    category: str | None = None,
    q: Annotated[str | None, Query(max_length=200, description="In path or title")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
    stale: Annotated[
        bool, Query(description="Only what needs review (past its review date or reported outdated), by owner")
    ] = False,
    owner: Annotated[str | None, Query(max_length=200, description="With stale: one owner's ('-': none)")] = None,
) -> dict[str, Any]:
    if stale:
        rows = kb.reviews.stale(owner)
        return {"total": len(rows), "limit": limit, "offset": offset, "owners": owners(rows)} | {
            "documents": rows[offset : offset + limit]
        }
    docs = kb.list_documents(category=category)
    if q:
        needle = q.casefold()
        docs = [d for d in docs if needle in d.path.casefold() or needle in (d.title or "").casefold()]
    return {
        "total": len(docs),
        "limit": limit,
        "offset": offset,
        "documents": [document_view(d) for d in docs[offset : offset + limit]],
    }


@router.get("/api/documents/{path:path}", summary="One document: metadata, warnings, chunks")
def get_document(_: Read, kb: Kb, path: str) -> dict[str, Any]:
    doc = kb.get_document(path)
    return document_view(doc, with_chunks=True) | {"vectors": kb.vector_status(doc.id)}


@router.put(
    "/api/documents/{path:path}",
    summary="Replace a document's content",
    description="The new Markdown in the multipart field 'files' (as for uploads) or 'file'; one file.",
)
def replace_document(
    principal: Write,
    kb: Kb,
    path: str,
    files: Annotated[list[UploadFile] | None, File(description="The new Markdown (one file)")] = None,
    file: Annotated[UploadFile | None, File(description="The same, under its older name")] = None,
) -> dict[str, Any]:
    given = [*(files or []), *([file] if file is not None else [])]
    if len(given) != 1:
        raise ApiError(
            422,
            "invalid_request",
            f"files: send exactly one file, not {len(given)}",
            hint="multipart field 'files' (or 'file') with the new Markdown",
        )
    with actor_scope("api", principal.key_id):
        report = _shown(kb, kb.replace(path, given[0].file.read()).to_dict())
    if report["status"] == "failed":
        raise ApiError(
            http_status(report["error_code"]), report["error_code"] or "document_error", report["reason"] or "failed"
        )
    return report


@router.delete("/api/documents/{path:path}", summary="Delete a document everywhere")
def delete_document(principal: Write, kb: Kb, path: str) -> dict[str, Any]:
    with actor_scope("api", principal.key_id):
        kb.delete(path)
    return {"deleted": path}


@router.post("/api/reindex", summary="Re-sync every index with the database")
def reindex(_: Write, kb: Kb) -> dict[str, Any]:
    return rebuild(kb)


@router.get("/api/categories", summary="Categories and their document counts")
def categories(_: Read, kb: Kb) -> dict[str, Any]:
    return {"categories": [{"name": name, "documents": n} for name, n in kb.categories().items()]}


def _shown(kb: KnowledgeBase, shown: dict[str, Any]) -> dict[str, Any]:
    """A file's report (``FileReport.to_dict()``) as the API shows it: with its vectors' state, and no internals in
    a failure's reason."""
    if shown["document_id"]:
        shown["vectors"] = kb.vector_status(shown["document_id"])
    if shown["status"] == "failed" and shown["error_code"]:
        shown["reason"] = api_errors.clean(shown["error_code"], shown["reason"] or "")
    return shown
