"""Golden cases: fixed questions with their expected evidence, one JSON file per knowledge base.

The format is ``schemas/golden-cases.schema.json`` (generated from the models below). A case names its
expected evidence as the knowledge base names it: a document path and, optionally, a heading path as the
chunker writes it (H1 down). Loaded, a case file becomes the same ``Dataset`` a BEIR-style folder does:
qrels ``{case id: {"path#H1/H2": grade}}``, and the cases without an answer kept apart for the
no-answer metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kbseek.errors import DatasetError
from kbseek.evaluation.datasets import Dataset, Query

TAGS = (
    "exact-term",
    "paraphrase",
    "mixed-language",
    "english",
    "multi-doc",
    "alert-line",
    "no-answer",
    "section",
    "multi-part",
    "purpose",
    "near-topic",
)


class Expected(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document: str = Field(min_length=1, description="Document path as the knowledge base names it")
    heading_path: list[str] = Field(default_factory=list, description="Headings from H1 down; empty = whole document")
    grade: int = Field(3, ge=1, le=3, description="3 answers the question, 2 helps substantially, 1 is related")

    @property
    def judged_id(self) -> str:
        return f"{self.document}#{'/'.join(self.heading_path)}" if self.heading_path else self.document


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=100)
    query: str = Field(min_length=1, max_length=4000)
    expected: list[Expected] = Field(default_factory=list)
    answerable: bool = True
    tags: list[Literal[TAGS]] = Field(default_factory=list)  # type: ignore[valid-type]
    split: Literal["dev", "test"] = "dev"
    notes: str = ""

    @field_validator("expected")
    @classmethod
    def _grades(cls, expected: list[Expected]) -> list[Expected]:
        ids = [e.judged_id for e in expected]
        if len(ids) != len(set(ids)):
            raise ValueError("the same evidence is listed twice")
        return expected

    def check(self) -> None:
        if self.answerable and not any(e.grade == 3 for e in self.expected):
            raise ValueError("an answerable case needs expected evidence of grade 3")
        if not self.answerable and self.expected:
            raise ValueError("a case without an answer lists no expected evidence")
        if self.answerable == ("no-answer" in self.tags):
            raise ValueError("tag 'no-answer' goes with answerable: false, and only with it")


class CaseFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    knowledge_base: str = Field(min_length=1, description="The folder the cases target, relative to this file")
    description: str = ""
    cases: list[Case] = Field(min_length=1)


def schema() -> dict[str, Any]:
    """The JSON Schema committed as ``schemas/golden-cases.schema.json``."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "kbseek/golden-cases.schema.json",
        "title": "kbseek golden cases",
        **CaseFile.model_json_schema(),
    }


def read_cases(path: Path) -> CaseFile:
    """Parse and check a case file; errors name the file and the case."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: {exc}") from None
    try:
        cases = CaseFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(data, e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise DatasetError(f"{path}: {problems}") from None
    seen: set[str] = set()
    for case in cases.cases:
        if case.id in seen:
            raise DatasetError(f"{path}: case {case.id}: the id is used twice")
        seen.add(case.id)
        try:
            case.check()
        except ValueError as exc:
            raise DatasetError(f"{path}: case {case.id}: {exc}") from None
    return cases


def _where(data: Any, loc: tuple[Any, ...]) -> str:
    """``cases[3] (kb-004).expected[0].grade`` from a pydantic error location."""
    parts, node = [], data
    for key in loc:
        if isinstance(key, int):
            label = f"[{key}]"
            if isinstance(node, list) and key < len(node) and isinstance(node[key], dict) and "id" in node[key]:
                label += f" ({node[key]['id']})"
            parts.append(label)
            node = node[key] if isinstance(node, list) and key < len(node) else None
        else:
            parts.append(f".{key}" if parts else str(key))
            node = node.get(key) if isinstance(node, dict) else None
    return "".join(parts) or "file"


def load_cases(path: Path, *, split: str | None = None) -> Dataset:
    """A case file as a ``Dataset``; ``split`` keeps the cases of that split."""
    cases = read_cases(path)
    corpus = (path.parent / cases.knowledge_base).resolve()
    if not corpus.is_dir():
        raise DatasetError(f"{path}: knowledge_base {cases.knowledge_base!r} is not a folder next to it")
    chosen = [c for c in cases.cases if split is None or c.split == split]
    queries = [
        Query(c.id, c.query, {"split": c.split, "tags": list(c.tags), "answerable": c.answerable, "notes": c.notes})
        for c in chosen
        if c.answerable
    ]
    unanswerable = [
        Query(c.id, c.query, {"split": c.split, "tags": list(c.tags), "answerable": False, "notes": c.notes})
        for c in chosen
        if not c.answerable
    ]
    if not queries:
        raise DatasetError(f"{path}: no answerable case" + (f" in split {split!r}" if split else ""))
    qrels = {c.id: {e.judged_id: e.grade for e in c.expected} for c in chosen if c.answerable}
    return Dataset(path.stem, path.parent, corpus, path, path, queries, qrels, unanswerable=unanswerable)


def case_from_lookup(
    lookup: dict[str, Any],
    *,
    case_id: str,
    pieces: list[int] | None = None,
    split: str = "dev",
    tags: list[str] | None = None,
    notes: str = "",
) -> Case:
    """A recorded ``lookup_knowledge`` answer (its JSON) as a new case: the chosen pieces (1-based, in the
    answer's order; default the first) become grade-3 evidence; an answer with no confident match becomes
    a no-answer case."""
    items = [
        (doc["source_path"], tuple(item["heading_path"]))
        for doc in lookup.get("documents", [])
        for item in doc.get("items", [])
    ]
    if lookup.get("status") == "no_confident_match" or not items:
        return Case(
            id=case_id,
            query=lookup["query"],
            answerable=False,
            tags=["no-answer", *(tags or [])],
            split=split,
            notes=notes or "recorded with no confident match",
        )
    chosen = pieces or [1]
    if any(not 1 <= n <= len(items) for n in chosen):
        raise DatasetError(f"pieces {chosen}: the answer has {len(items)} piece(s)")
    expected = list(
        {items[n - 1]: Expected(document=items[n - 1][0], heading_path=list(items[n - 1][1])) for n in chosen}.values()
    )
    return Case(id=case_id, query=lookup["query"], expected=expected, tags=tags or [], split=split, notes=notes)


def case_from_feedback(report: dict[str, Any], *, split: str = "dev") -> Case:
    """A reader's "wrong" or "missed" report (``kbseek.lookup.feedback``) as a new case, id ``fb-<report id>``.

    "missed" names the evidence that should have come (its chunks): those become grade-3 expected evidence.
    "wrong" says what came was not the answer, and not what is: the case expects no answer until someone who
    knows lists the right evidence (its notes say so), so the regression gate fails an answer that cites the
    wrong evidence with confidence.

    >>> case_from_feedback({"id": 7, "verdict": "missed", "query": "磁盘满", "request_id": "r1", "note": None,
    ...     "evidence": [{"chunk_id": "c1", "path": "ops/disk.md", "heading_path": ["磁盘满", "清理"]}]}).expected
    [Expected(document='ops/disk.md', heading_path=['磁盘满', '清理'], grade=3)]
    """
    note = f": {report['note']}" if report.get("note") else ""
    given = ", ".join(
        f"{e['path']}#{'/'.join(e['heading_path'])}" if e["heading_path"] else e["path"] for e in report["evidence"]
    )
    source = f"from feedback {report['id']} ({report['verdict']}, request {report['request_id']}){note}"
    if report["verdict"] == "missed":
        if not any(e["chunk_id"] for e in report["evidence"]):
            raise DatasetError(f"feedback {report['id']}: a 'missed' report names no chunk, so no expected evidence")
        expected = {
            (e["path"], tuple(e["heading_path"])): Expected(document=e["path"], heading_path=list(e["heading_path"]))
            for e in report["evidence"]
            if e["chunk_id"]
        }
        return Case(
            id=f"fb-{report['id']}", query=report["query"], expected=list(expected.values()), split=split, notes=source
        )
    if report["verdict"] != "wrong":
        raise DatasetError(f"feedback {report['id']}: only 'wrong' and 'missed' reports become cases")
    return Case(
        id=f"fb-{report['id']}",
        query=report["query"],
        answerable=False,
        tags=["no-answer"],
        split=split,
        notes=f"{source}; reported wrong: {given or 'the answer'}. If the knowledge base does answer this, list the "
        "right evidence and set answerable to true",
    )


def add_case(path: Path, case: Case) -> None:
    """Append ``case`` to a case file (checked first; the file is rewritten atomically)."""
    cases = read_cases(path)
    if any(c.id == case.id for c in cases.cases):
        raise DatasetError(f"{path}: case id {case.id!r} exists already")
    try:
        case.check()
    except ValueError as exc:
        raise DatasetError(f"case {case.id}: {exc}") from None
    cases.cases.append(case)
    write_case_file(path, cases)


def write_case_file(path: Path, cases: CaseFile) -> None:
    """Write a case file whole or not at all (a temp file renamed over it): a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(
        json.dumps(cases.model_dump(exclude_defaults=False), ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    tmp.replace(path)
