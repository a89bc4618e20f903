"""The suite and the benchmarks run from any virtual environment and any working directory: no code in tests/ or
benchmarks/ names a path inside the checkout's own ``.venv``, an absolute path of one machine, a fixed local port,
or a path relative to the working directory. (A fresh clone once failed because ``benchmarks/http_load.py`` ran
``ROOT/.venv/bin/kbseek`` while the tests ran ``sys.executable``.) Docstrings and comments may show commands."""

from __future__ import annotations

import ast
import re
import sys
import sysconfig
from pathlib import Path

import pytest
from serving import KBSEEK, console_script
from support import ROOT

SOURCES = sorted(
    p for p in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")] if p != Path(__file__).resolve()
)  # this file names what it looks for
CHECKOUT_DIRS = ("examples/", "eval/", "src/", "benchmarks/", "tests/", "docs/", "schemas/")
# 5432: the PostgreSQL the suite documents (KBSEEK_TEST_PG_URL overrides it); 9: the discard port, where a test
# needs an address nothing answers on
ALLOWED_PORTS = {"5432", "9"}
LOCAL_PORT = re.compile(r"(?:127\.0\.0\.1|localhost|0\.0\.0\.0):(\d+)")


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return {
        id(body[0].value)
        for body in (getattr(n, "body", []) for n in nodes)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    }


def problems_in(source: str, name: str) -> list[str]:
    """What in ``source`` ties a run to one checkout, machine or working directory.

    >>> problems_in('KBSEEK = ROOT / ".venv" / "bin" / "kbseek"', "x.py")
    ["x.py:1: '.venv': a path into the checkout's own virtual environment"]
    >>> problems_in('open("examples/a.md"); url = "http://127.0.0.1:8000/"', "y.py")[1]
    "y.py:1: 'http://127.0.0.1:8000/': a fixed local port (take a free one)"
    """
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.startswith(CHECKOUT_DIRS)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("Path", "open")
        ):
            found.append(
                f"{name}:{node.lineno}: {node.args[0].value!r}: relative to the working directory (join it to ROOT)"
            )
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in skip:
            continue
        text = node.value
        if text == ".venv" or "/.venv/" in text or text.startswith(".venv/"):
            found.append(f"{name}:{node.lineno}: {text!r}: a path into the checkout's own virtual environment")
        if text.startswith(("/work/", "/home/", "/root/", "/Users/")):
            found.append(f"{name}:{node.lineno}: {text!r}: an absolute path of one machine")
        if any(port not in ALLOWED_PORTS for port in LOCAL_PORT.findall(text)):
            found.append(f"{name}:{node.lineno}: {text!r}: a fixed local port (take a free one)")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_source_assumes_the_checkout_venv_a_machine_or_the_working_directory(path):
    assert problems_in(path.read_text("utf-8"), str(path.relative_to(ROOT))) == []


def test_the_cli_the_suite_starts_belongs_to_the_running_interpreter():
    assert Path(KBSEEK).parent in (Path(sysconfig.get_path("scripts")), Path(sys.executable).parent)
    assert Path(KBSEEK).is_file()
    with pytest.raises(FileNotFoundError, match="no-such-script"):
        console_script("no-such-script")
