"""The CLI end to end, in-process, with every --json output checked against its schema."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import click
import jsonschema
import pytest
import typer
from typer.testing import CliRunner

import kbseek

from kbseek.interfaces.cli import app
from tests.conftest import EXAMPLES, ROOT, write

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


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, command in group.commands.items():
        found += _commands(command, (*prefix, name)) if isinstance(command, click.Group) else [(*prefix, name)]
    return found


def test_help_shows_flags_as_flags_and_the_version():
    top = runner.invoke(app, ["--help"]).stdout
    assert "-v, --verbose " in top and "--log-json " in top and "--version" in top
    for path in _commands(typer.main.get_command(app)):  # every command's help, not only the top one
        text = runner.invoke(app, [*path, "--help"]).stdout
        assert "<bool>" not in text and "--help " in text, (path, text)
        assert "-v <int>" not in text and "--verbose <int>" not in text
    search = runner.invoke(app, ["search", "--help"]).stdout
    assert "--json " in search and "--top-k <int" in search  # options that take values still say which
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.strip() == f"kbseek {kbseek.__version__}"


def test_make_run_takes_host_and_port_and_execs_the_server():
    planned = subprocess.run(["make", "-n", "run", "PORT=8123", "HOST=0.0.0.0"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
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
