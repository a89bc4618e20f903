"""The web console: static HTML/CSS/JS served at ``/``, and the REST routes only the console needed.

The console is a client of the public REST API and nothing else, so it shows exactly what an agent receives.
What it needed beyond the agent's routes, under the same key rules (reads: GET; writes: adding a case,
running an evaluation):

- ``GET  /api/eval/cases``: the golden cases (``settings.golden_cases_path``);
- ``POST /api/eval/cases``: a lookup's query and the chosen evidence saved as a case (the file is created
  when missing);
- ``GET  /api/eval/reports`` · ``GET /api/eval/reports/{name}`` (Markdown) ·
  ``GET /api/eval/reports/{name}/charts/{file}.png``: the reports in ``settings.reports_path``;
- ``POST /api/eval/runs``: the golden cases run through the live knowledge base, in process;
- ``POST /api/lookup?explain=true`` (``retrieval.py``): each lane's candidates and the fused ranking
  (``retrieval.explain_view``).

``router`` holds the routes; :func:`mount_files` serves the files at ``/``, after every other route.
"""

# no "from __future__ import annotations": FastAPI and pydantic read the Annotated and Literal types at import
import datetime as dt
import os
import re
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, FastAPI
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.staticfiles import StaticFiles

from kbseek.core.modes import POLICIES, RECALL_POLICIES
from kbseek.evaluation.cases import TAGS, CaseFile, case_from_lookup, load_cases, read_cases, write_case_file
from kbseek.evaluation.cases import add_case as append_case
from kbseek.evaluation.report import write_report
from kbseek.evaluation.runner import metric_names, report, run_policy
from kbseek.interfaces.http.deps import AppSettings, Kb, Read, Write
from kbseek.interfaces.http.guard import ApiError

WEB_DIR = Path(__file__).resolve().parents[2] / "web"
EVAL_POLICIES = (*POLICIES, *(f"answer:{p}" for p in RECALL_POLICIES))
CASE_TAGS = TAGS
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
# The console renders documents people upload: nothing but its own files may run or load
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


# -- request bodies -----------------------------------------------------------------------------


class _Item(BaseModel):
    heading_path: list[str] = Field(default_factory=list, max_length=12)


class _Document(BaseModel):
    source_path: str = Field(min_length=1, max_length=600)
    items: list[_Item] = Field(default_factory=list, max_length=200)


class _Lookup(BaseModel):
    """The part of a ``lookup_knowledge`` JSON answer a case is made from (the rest is ignored)."""

    query: str = Field(min_length=1, max_length=4000)
    status: str = "answer"
    documents: list[_Document] = Field(default_factory=list, max_length=200)


class NewCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=100, pattern=r"^[\w.:-]+$")
    lookup: _Lookup
    pieces: list[int] | None = Field(None, max_length=50, description="Answer pieces (1-based) that are right")
    split: Literal["dev", "test"] = "dev"
    tags: list[Literal[CASE_TAGS]] = Field(default_factory=list)  # type: ignore[valid-type]
    notes: str = Field("", max_length=2000)


class NewRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policies: list[Literal[EVAL_POLICIES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["hybrid", "answer:hybrid"], min_length=1, max_length=len(EVAL_POLICIES)
    )
    split: Literal["dev", "test"] | None = None
    k: list[Annotated[int, Field(ge=1, le=100)]] = Field(
        default_factory=lambda: [1, 3, 5, 10], min_length=1, max_length=6, description="Cut-offs of the metrics"
    )
    depth: int = Field(100, ge=10, le=100)
    save: bool = Field(True, description="Write the report (Markdown, JSON, charts) into the reports folder")
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")


# -- files --------------------------------------------------------------------------------------


def _inside(folder: Path, name: str) -> Path:
    """``folder/name`` for a bare, safe file name that resolves inside ``folder``; ApiError otherwise."""
    if not SAFE_NAME.match(name) or ".." in name:
        raise ApiError(
            400,
            "unsafe_path",
            f"{name[:80]!r} is not a report or chart name",
            hint="names are letters, digits, '.', '_' and '-', without '..'",
        )
    path = (folder / name).resolve()
    if path.parent != folder.resolve():
        raise ApiError(400, "unsafe_path", f"{name!r} is outside the reports folder")
    return path


def _title(markdown: str, default: str) -> str:
    for line in markdown.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return default


def report_list(folder: Path) -> list[dict[str, Any]]:
    """The Markdown reports in ``folder``, newest first, each with its charts (``<name>-*.png``)."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.glob("*.md"):
        if not SAFE_NAME.match(path.name) or not path.is_file():
            continue
        name = path.stem
        try:
            head = path.read_text(encoding="utf-8")[:4000]
        except (OSError, UnicodeDecodeError):
            continue
        info = path.stat()
        found.append(
            {
                "name": name,
                "title": _title(head, name),
                "bytes": info.st_size,
                "modified": dt.datetime.fromtimestamp(info.st_mtime, dt.UTC).isoformat(),
                "charts": sorted(p.name for p in folder.glob(f"{name}-*.png") if SAFE_NAME.match(p.name)),
                "json": (folder / f"{name}.json").is_file(),
            }
        )
    return sorted(found, key=lambda r: (r["modified"], r["name"]), reverse=True)


def _new_case_file(path: Path, knowledge_base: Path, case: Any) -> None:
    """A case file holding ``case``, its ``knowledge_base`` (the stored originals) relative to it."""
    folder = os.path.relpath(knowledge_base, path.parent)
    cases = CaseFile(knowledge_base=folder, description="Golden cases saved from the kbseek web console.", cases=[case])
    write_case_file(path, cases)


def run_summary(report: dict[str, Any]) -> dict[str, Any]:
    """An evaluation report's means per metric and run (what the console shows; the full report is saved)."""
    return {
        "dataset": report["dataset"],
        "config": report["config"],
        "runs": [
            {
                "name": r["name"],
                "policy": r["policy"],
                "seconds": r["seconds"],
                "metrics": {name: m["mean"] for name, m in r["metrics"].items()},
                "no_answer": r["no_answer"],
            }
            for r in report["runs"]
        ],
    }


class ConsoleFiles(StaticFiles):
    """The console's static files, with a Content-Security-Policy: only the package's own scripts run."""

    async def get_response(self, path: str, scope: Any) -> Any:
        if path.split("/", 1)[0] == "api":  # a mistyped API route, whatever its method: 404, not 405
            raise HTTPException(404, "Not Found")
        response = await super().get_response(path, scope)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


# -- routes -------------------------------------------------------------------------------------


router = APIRouter(tags=["evaluation"])
# One writer of a case file at a time, and one evaluation at a time in the process (it is long, and matplotlib,
# which draws the report's charts, is not thread-safe)
_cases_lock = threading.Lock()
_eval_lock = threading.Lock()


@router.get("/api/eval/cases", summary="The golden cases the console adds to and runs")
def list_cases(_: Read, settings: AppSettings) -> dict[str, Any]:
    path = settings.golden_cases_path
    if not path.exists():
        return {"file": path.name, "exists": False, "count": 0, "cases": []}
    cases = read_cases(path)
    return {
        "file": path.name,
        "exists": True,
        "count": len(cases.cases),
        "description": cases.description,
        "knowledge_base": cases.knowledge_base,
        "cases": [c.model_dump() for c in cases.cases],
    }


@router.post(
    "/api/eval/cases", status_code=201, summary="Save a lookup's query and its chosen evidence as a golden case"
)
def add_case(_: Write, settings: AppSettings, new: Annotated[NewCase, Body()]) -> dict[str, Any]:
    path = settings.golden_cases_path
    try:
        case = case_from_lookup(
            new.lookup.model_dump(),
            case_id=new.id,
            pieces=new.pieces,
            split=new.split,
            tags=list(new.tags),
            notes=new.notes,
        )
        case.check()
    except (ValidationError, ValueError) as exc:  # a pydantic ValidationError is a ValueError too
        problems = "; ".join(e["msg"] for e in exc.errors()) if isinstance(exc, ValidationError) else str(exc)
        raise ApiError(422, "invalid_case", f"case {new.id}: {problems}") from None
    with _cases_lock:
        created = not path.exists()
        if created:
            _new_case_file(path, settings.knowledge_base_dir, case)
        else:
            if any(c.id == case.id for c in read_cases(path).cases):
                raise ApiError(
                    409, "case_exists", f"case id {case.id!r} exists already in {path.name}", hint="choose another id"
                )
            append_case(path, case)
        count = len(read_cases(path).cases)
    return {"case": case.model_dump(), "file": path.name, "created": created, "count": count}


@router.get("/api/eval/reports", summary="Evaluation reports, newest first, with their charts")
def reports(_: Read, settings: AppSettings) -> dict[str, Any]:
    return {"reports": report_list(settings.reports_path)}


@router.get("/api/eval/reports/{name}", summary="One evaluation report (Markdown)")
def report_text(_: Read, settings: AppSettings, name: str) -> PlainTextResponse:
    path = _inside(settings.reports_path, f"{name}.md")
    if not path.is_file():
        raise ApiError(404, "not_found", f"no report named {name!r}", hint="see GET /api/eval/reports")
    return PlainTextResponse(path.read_text(encoding="utf-8"), media_type="text/markdown; charset=utf-8")


@router.get("/api/eval/reports/{name}/charts/{file}", summary="A chart of a report (PNG)")
def report_chart(_: Read, settings: AppSettings, name: str, file: str) -> FileResponse:
    _inside(settings.reports_path, f"{name}.md")
    if not file.endswith(".png"):
        raise ApiError(400, "unsafe_path", f"{file[:80]!r} is not a PNG chart")
    path = _inside(settings.reports_path, file)
    if not path.is_file():
        raise ApiError(404, "not_found", f"no chart {file!r}")
    return FileResponse(path, media_type="image/png")


@router.post("/api/eval/runs", summary="Run the golden cases against this knowledge base")
def run_cases(_: Write, kb: Kb, settings: AppSettings, new: Annotated[NewRun, Body()] = NewRun()) -> JSONResponse:
    path = settings.golden_cases_path
    if not path.exists():
        raise ApiError(
            404, "not_found", f"no golden cases yet ({path.name})", hint="save a case from the retrieval test first"
        )
    if not _eval_lock.acquire(blocking=False):
        raise ApiError(409, "evaluation_running", "an evaluation is running already", hint="try again when it ends")
    try:
        dataset = load_cases(path, split=new.split)
        ks = tuple(sorted(set(new.k)))
        started = time.perf_counter()
        runs = [
            run_policy(kb, dataset, policy=p, depth=new.depth, names=metric_names(ks), name=p, overrides={})
            for p in dict.fromkeys(new.policies)
        ]
        result = report(
            dataset,
            runs,
            ks=ks,
            depth=new.depth,
            base=kb.settings,
            timings={"run": round(time.perf_counter() - started, 3)},
        )
        saved = None
        if new.save:
            stem = new.name or "console-" + dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
            write_report(result, settings.reports_path, stem, title=f"Live evaluation: {path.name} on this server")
            saved = next((r for r in report_list(settings.reports_path) if r["name"] == stem), None)
    finally:
        _eval_lock.release()
    body = run_summary(result) | {
        "seconds": result["timings_s"]["run"],
        "unanswerable": len(dataset.unanswerable),
        "report": saved,
    }
    return JSONResponse(body, status_code=201 if saved else 200)


def mount_files(app: FastAPI) -> None:
    """Serve the console's files at ``/`` (mount it after every other route: it answers every other path)."""
    if not (WEB_DIR / "index.html").is_file():
        raise RuntimeError(f"the web console's files are missing from {WEB_DIR} (a broken install?)")
    app.mount("/", ConsoleFiles(directory=WEB_DIR, html=True), name="console")
