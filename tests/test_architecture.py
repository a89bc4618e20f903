"""The shape of the package, checked: the layer contract (import-linter, ``pyproject.toml``), no import cycles, no
hidden imports inside functions, modules a reader can hold in their head. See ``docs/architecture.md``."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
from support import ROOT

PACKAGE = ROOT / "src" / "kbseek"
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
MAX_LINES = 420  # "about 400": a module longer than this should be split by what it does
SKIP = ("adapters/sql/migrations",)


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not any(s in p.as_posix() for s in SKIP))


def lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(source_root)}
    return subprocess.run(
        [LINT_IMPORTS, str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_layer_contracts_hold():
    run = lint_imports(ROOT / "src")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "BROKEN" not in run.stdout and run.stdout.count("KEPT") >= 4


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("retrieval/recall.py", "from kbseek.service import KnowledgeBase"),  # a lower layer reaching up
        ("lookup/render.py", "from kbseek.adapters.sql import tables"),  # an edge around the wiring
        ("core/ids.py", "import sqlalchemy"),  # the pure core growing a stack
    ],
)
def test_a_forbidden_import_breaks_the_contracts(tmp_path, module, forbidden):
    copy = tmp_path / "src" / "kbseek"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text("utf-8") + f"\n{forbidden}  # planted by the test\n", "utf-8")
    run = lint_imports(tmp_path / "src")
    assert run.returncode != 0 and "BROKEN" in run.stdout, run.stdout[-3000:]


def test_no_import_cycles_between_modules():
    graph = grimp.build_graph("kbseek", exclude_type_checking_imports=True)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert cycles == []


def test_imports_inside_functions_say_why():
    """A kbseek import inside a function hides a dependency; it is allowed where a comment on its line or the
    line above says why (usually: start-up cost of a heavy stack a command may not need)."""
    unexplained = []
    for path in modules():
        source = path.read_text("utf-8")
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                imports_kbseek = (isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("kbseek")) or (
                    isinstance(inner, ast.Import) and any(a.name.startswith("kbseek") for a in inner.names)
                )
                if imports_kbseek and not _explained(lines, inner.lineno - 1, inner.end_lineno or inner.lineno):
                    unexplained.append(f"{path.relative_to(ROOT)}:{inner.lineno}: {lines[inner.lineno - 1].strip()}")
    assert sorted(set(unexplained)) == []


def _explained(lines: list[str], first: int, end: int) -> bool:
    """A comment on the import's own lines, or on a line above it within its run of imports (one comment may
    explain a group of imports made for the same reason)."""
    if any("#" in line for line in lines[first:end]):
        return True
    for line in reversed(lines[:first]):
        text = line.strip()
        if "#" in text:
            return True
        if text and not (text.startswith(("from ", "import ", ")")) or text.endswith(",")):
            return False
    return False


def test_modules_stay_short():
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in modules()
        if (n := len(p.read_text("utf-8").splitlines())) > MAX_LINES
    ]
    assert long == []


def test_every_package_says_what_it_is():
    silent = [
        str(init.relative_to(ROOT))
        for init in PACKAGE.rglob("__init__.py")
        if "migrations" not in init.as_posix() and not ast.get_docstring(ast.parse(init.read_text("utf-8")))
    ]
    assert silent == []
