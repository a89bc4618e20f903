"""The CLI end to end, in-process, with every --json output checked against its schema."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import click
import jsonschema
import pytest
import typer
from support import EXAMPLES, ROOT, doc, write
from typer.testing import CliRunner

import kbseek
from kbseek.interfaces.cli import app

SCHEMAS = ROOT / "schemas"
runner = CliRunner()


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text("utf-8"))


def run(home: Path, *args: str, code: int = 0):
    result = runner.invoke(app, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result


def run_json(home: Path, *args: str, code: int = 0):
    return json.loads(run(home, *args, "--json", code=code).stdout)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_schemas_are_valid_json_schema():
    for path in SCHEMAS.glob("*.schema.json"):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text("utf-8")))


def test_ingest_examples_then_list_show_delete(home):
    report = run_json(home, "ingest", str(EXAMPLES / "knowledge_base"))
    jsonschema.validate(report, schema("ingest-report"))
    assert report["counts"]["added"] >= 12 and report["counts"]["failed"] == 0
    assert {item["keyword"] for item in report["lint"]} == {"超时"}

    listed = run_json(home, "docs", "list")
    jsonschema.validate(listed, schema("documents-list"))
    assert len(listed) == report["counts"]["added"]
    assert len({d["category"] for d in listed}) >= 3

    shown = run_json(home, "docs", "show", "troubleshoot/fault-diagnosis-process.md")
    jsonschema.validate(shown, schema("document-show"))
    crumbs = [c["breadcrumb"] for c in shown["chunks"]]
    assert "故障诊断流程规范 > 应急响应流程 > 2. 快速止血" in crumbs
    assert "故障诊断流程规范 > 根因分析方法 > 5-Why 分析法" in crumbs

    again = run_json(home, "ingest", str(EXAMPLES / "knowledge_base"))
    assert again["counts"]["unchanged"] == report["counts"]["added"]

    deleted = run_json(home, "docs", "delete", "troubleshoot/fault-diagnosis-process.md")
    jsonschema.validate(deleted, schema("document-delete"))
    error = run_json(home, "docs", "show", "troubleshoot/fault-diagnosis-process.md", code=2)
    jsonschema.validate(error, schema("error"))
    assert error["error"]["code"] == "not_found"

    lint = run_json(home, "docs", "lint")
    jsonschema.validate(lint, schema("docs-lint"))


def test_broken_examples_report_each_error_and_exit_1(home, tmp_path):
    broken = tmp_path / "broken"
    for file in (EXAMPLES / "broken").iterdir():
        write(broken, file.name, file.read_bytes())
    write(broken, "binary.md", b"\x89PNG\r\n\x1a\n\x00\x00")
    report = run_json(home, "ingest", str(broken), code=1)
    jsonschema.validate(report, schema("ingest-report"))
    by_name = {Path(f["source"]).name: f for f in report["files"]}
    assert by_name["malformed-yaml.md"]["reason"].split(": ")[0].endswith("malformed-yaml.md:3")
    assert by_name["unclosed-frontmatter.md"]["error_code"] == "frontmatter_error"
    assert "frontmatter-not-mapping.md:2" in by_name["frontmatter-not-mapping.md"]["reason"]
    assert "bad-keywords-type.md:3" in by_name["bad-keywords-type.md"]["reason"]
    assert "binary" in by_name["binary.md"]["reason"]
    assert "empty" in by_name["empty.md"]["reason"]
    assert by_name["no-frontmatter.md"]["status"] == "added"
    assert any("keywords, summary" in w for w in by_name["missing-fields.md"]["warnings"])
    assert any("unclosed-fence.md:14" in w for w in by_name["unclosed-fence.md"]["warnings"])
    shown = run_json(home, "docs", "show", "no-frontmatter.md")
    assert shown["title"] == "Redis 连接池耗尽" and shown["title_source"] == "h1"
    assert shown["keywords"] == []
    fence = run_json(home, "docs", "show", "unclosed-fence.md")
    assert [s["heading"] for s in fence["sections"]] == ["网络丢包排查", "常用命令"]


def test_human_output_and_errors(home, tmp_path):
    result = run(home, "ingest", str(EXAMPLES / "knowledge_base"))
    assert "added" in result.stdout and "lint:" in result.stdout
    listing = run(home, "docs", "list").stdout
    assert "api/payment-errors.md" in listing
    missing = run(home, "ingest", str(tmp_path / "nope"), code=1)
    assert "no such file or folder" in missing.stdout
    bad = runner.invoke(app, ["--home", str(home), "ingest", str(EXAMPLES / "knowledge_base"), "--category", "../x"])
    assert bad.exit_code == 2 and "category" in bad.stderr
    # lint is advice shown where it belongs (ingest reports, 'docs lint', the server's start-up), not on every command
    for args in (["search", "超时"], ["lookup", "超时"], ["docs", "list"], ["docs", "show", "api/payment-errors.md"]):
        assert "lint:" not in run(home, *args).stderr
    assert "keyword '超时' is shared by 2 documents" in run(home, "docs", "lint").stdout


def test_ingest_prints_file_names_and_reasons_as_text_not_markup(home, tmp_path):
    folder = tmp_path / "kb"
    write(folder, "ops/[red]disk.md", doc("磁盘", "DISK_X", "磁盘清理", "# 磁盘\n\n清理日志。"))
    write(folder, "ops/[bold]bad.md", b"---\ntitle: [unclosed\n---\nbody")
    shown = run(home, "ingest", str(folder), code=1).stdout
    assert "ops/[red]disk.md" in shown and "ops/[bold]bad.md" in shown


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, command in group.commands.items():  # typer's groups are not click.Group: they have .commands
        found += _commands(command, (*prefix, name)) if hasattr(command, "commands") else [(*prefix, name)]
    return found


def test_help_shows_flags_as_flags_and_the_version():
    top = runner.invoke(app, ["--help"]).stdout
    assert "-v, --verbose " in top and "--log-json " in top and "--version" in top
    commands = _commands(typer.main.get_command(app))
    assert ("docs", "list") in commands and ("invocations", "prune") in commands and ("eval", "run") in commands
    for path in commands:  # every command's help, not only the top one
        text = runner.invoke(app, [*path, "--help"]).stdout
        assert "<bool>" not in text and "--help " in text, (path, text)
        assert "-v <int>" not in text and "--verbose <int>" not in text
    search = runner.invoke(app, ["search", "--help"]).stdout
    assert "--json " in search and "--top-k <int" in search  # options that take values still say which
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.strip() == f"kbseek {kbseek.__version__}"


def test_make_run_takes_host_and_port_and_execs_the_server():
    planned = subprocess.run(
        ["make", "-n", "run", "PORT=8123", "HOST=0.0.0.0"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "exec .venv/bin/kbseek serve --host 0.0.0.0 --port 8123" in planned  # exec: signals reach the server
    default = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "--host 127.0.0.1 --port 8000" in default


def test_db_upgrade_and_current(home):
    run(home, "db", "upgrade")
    info = run_json(home, "db", "current")
    jsonschema.validate(info, schema("db-current"))
    assert info["up_to_date"] and info["current"] == info["head"]


def test_bad_setting_is_a_clear_error(home, monkeypatch):
    monkeypatch.setenv("KBSEEK_CHUNK_SIZE", "tiny")
    error = run_json(home, "docs", "list", code=2)
    assert error["error"]["code"] == "config_error" and "chunk_size" in error["error"]["message"]


HEAVY = (
    "kbseek.service",
    "kbseek.maintenance.records",
    "kbseek.maintenance.doctor",
    "kbseek.maintenance.schema",
    "kbseek.maintenance.backup",
    "kbseek.maintenance.reindex",
    "kbseek.evaluation.runner",
    "kbseek.interfaces.http",
    "kbseek.interfaces.mcp_server",
    "alembic",
    "fastapi",
    "uvicorn",
    "mcp",
)


def test_help_loads_neither_the_knowledge_base_nor_the_web_evaluation_or_migration_stack():
    """`kbseek --help` (and a typo's usage line) comes back at once: the knowledge base, the maintenance work, the
    evaluation and the web stack are imported by the command that runs them."""
    code = (
        "import sys\nfrom kbseek.interfaces.cli import main\nsys.argv = ['kbseek', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"heavy = {HEAVY!r}\n"
        "print('loaded:', sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Commands:" in done.stdout and "loaded: []" in done.stdout, done.stdout[-500:]


def test_command_modules_share_only_common_and_no_private_names():
    """Each command module takes what it shares from `common`, by public names, never from a sibling (no cycle
    through the package); only the package's `__init__` puts the command modules together."""
    package = ROOT / "src" / "kbseek" / "interfaces" / "cli"
    modules = sorted(package.glob("*.py"))
    assert {p.stem for p in modules} >= {"common", "documents", "retrieval", "records", "maintenance", "serve", "mcp"}
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kbseek")):
                continue
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.endswith("__")]
            assert not private, (path.name, node.module, private)
            if node.module.startswith("kbseek.interfaces.cli") and path.name != "__init__.py":
                assert node.module == "kbseek.interfaces.cli.common", (path.name, node.module)
