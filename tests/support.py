"""What tests share besides fixtures: the repository's paths, the local PostgreSQL's URL, small builders of
test documents, counts of golden cases, and the gate's signals of one question. Tests import it as
``from support import …`` (pytest puts ``tests/`` on the path); the fixtures themselves live in ``conftest.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kbseek.core.keywords import KeywordHint
from kbseek.lookup.answering import question_signals

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
EXAMPLES = ROOT / "examples"
PG_ADMIN_URL = os.environ.get("KBSEEK_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def answerable_cases(case_file: Path, split: str | None = None) -> int:
    """How many cases of a golden-case file (of one split) have an answer: what an evaluation run scores."""
    cases = json.loads(case_file.read_text("utf-8"))["cases"]
    return sum(1 for c in cases if c.get("answerable", True) and split in (None, c["split"]))


def case_count(case_file: Path) -> int:
    return len(json.loads(case_file.read_text("utf-8"))["cases"])


def write(folder: Path, relative: str, content: str | bytes) -> Path:
    """Write a test document (text as UTF-8) and return its path."""
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def doc(title: str, keywords: str, summary: str, body: str, **extra: str) -> str:
    """A well-formed document with frontmatter."""
    lines = ["---", f"title: {title}", f"keywords: [{keywords}]", f"summary: {summary}"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "\n".join([*lines, "---", body])


def reply_json(handler, payload) -> None:
    """Answer a stub server's request (a ``BaseHTTPRequestHandler``) with ``payload`` as JSON, status 200."""
    body = json.dumps(payload).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def gate_signals(kb: Any, query: str) -> tuple[Any, Any]:
    """The answerability signals the gate reads for ``query`` on ``kb`` (a ``KnowledgeBase``), with the recall."""
    tool = kb.lookup_tool
    recall = tool.recall(query, top_k=15, policy="hybrid", category=None, only=None, config=tool.config)
    hint = recall.hint if recall.hint is not None else KeywordHint(recall.query)
    found = question_signals(
        kb.indexes, query, list(recall.hits), hint, recall.reference_similarity, recall.candidates.get("dense")
    )
    return found, recall
