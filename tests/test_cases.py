"""Golden case files: the schema, the loader and its errors, and a recorded lookup turned into a case."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from support import EXAMPLES, ROOT, answerable_cases

from kbseek.core.document import ChunkingConfig, parse_document
from kbseek.errors import DatasetError
from kbseek.evaluation.cases import TAGS, add_case, case_from_lookup, load_cases, read_cases, schema
from kbseek.lookup.render import response_view
from kbseek.service import KnowledgeBase

CASES = EXAMPLES / "eval" / "golden-cases.json"
# Every case file in the repository: the examples' and the held-out ones under eval/cases
CASE_FILES = sorted([*(EXAMPLES / "eval").glob("*.json"), *(ROOT / "eval" / "cases").glob("*.json")])


def test_committed_schema_is_the_generated_one_and_the_example_cases_follow_it():
    committed = json.loads((ROOT / "schemas" / "golden-cases.schema.json").read_text("utf-8"))
    assert committed == schema()
    data = json.loads(CASES.read_text("utf-8"))
    jsonschema.validate(data, committed)
    cases = read_cases(CASES).cases
    assert len(cases) >= 40 and {t for c in cases for t in c.tags} == set(TAGS)
    assert sum(not c.answerable for c in cases) >= 8


def test_a_case_file_loads_into_the_dataset_shape():
    dev = load_cases(CASES, split="dev")
    assert dev.corpus == (EXAMPLES / "knowledge_base").resolve()
    assert all(q.metadata["split"] == "dev" for q in dev.queries + dev.unanswerable)
    assert dev.qrels["kb-001"] == {"api/payment-errors.md#支付网关错误码定义/超时类错误/ERR_TIMEOUT": 3}
    assert dev.unanswerable and all(q.id not in dev.qrels for q in dev.unanswerable)


def _write(tmp_path, cases, kb="kb"):
    (tmp_path / "kb").mkdir(exist_ok=True)
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"knowledge_base": kb, "cases": cases}, ensure_ascii=False), "utf-8")
    return path


@pytest.mark.parametrize(
    "cases, message",
    [
        ([{"id": "a", "query": "q", "expected": []}], "case a: an answerable case needs expected evidence of grade 3"),
        (
            [
                {
                    "id": "a",
                    "query": "q",
                    "answerable": False,
                    "tags": ["no-answer"],
                    "expected": [{"document": "d.md", "grade": 3}],
                }
            ],
            "case a: a case without an answer lists no expected",
        ),
        ([{"id": "a", "query": "q", "answerable": False}], "tag 'no-answer' goes with answerable: false"),
        ([{"id": "a", "query": "q", "expected": [{"document": "d.md"}]}] * 2, "case a: the id is used twice"),
        ([{"id": "a", "query": "q", "tags": ["typo"], "expected": [{"document": "d.md"}]}], "cases[0] (a).tags[0]"),
        ([{"id": "b", "query": "q", "expected": [{"document": "d.md", "grade": 7}]}], "cases[0] (b).expected[0].grade"),
    ],
)
def test_bad_case_files_are_refused_with_the_case_named(tmp_path, cases, message):
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_cases(_write(tmp_path, cases))


def test_missing_knowledge_base_folder_is_named(tmp_path):
    path = _write(tmp_path, [{"id": "a", "query": "q", "expected": [{"document": "d.md"}]}], kb="nowhere")
    with pytest.raises(DatasetError, match="knowledge_base 'nowhere'"):
        load_cases(path)


def test_a_recorded_lookup_becomes_a_case(kb: KnowledgeBase, tmp_path):
    kb.ingest([EXAMPLES / "knowledge_base"])
    recorded = response_view(kb.lookup_knowledge({"query": "ERR_GATEWAY_TIMEOUT 能不能直接标记失败"}))
    path = _write(tmp_path, [{"id": "a", "query": "q", "expected": [{"document": "d.md"}]}])
    case = case_from_lookup(recorded, case_id="from-prod-1", tags=["exact-term"], notes="seen in production")
    add_case(path, case)
    loaded = load_cases(path)
    assert loaded.qrels["from-prod-1"] == {"api/payment-errors.md#支付网关错误码定义/超时类错误/ERR_GATEWAY_TIMEOUT": 3}
    refused = case_from_lookup(
        {"query": "iOS 推送证书", "status": "no_confident_match", "documents": []}, case_id="from-prod-2"
    )
    add_case(path, refused)
    assert [q.id for q in load_cases(path).unanswerable] == ["from-prod-2"]
    with pytest.raises(DatasetError, match="exists already"):
        add_case(path, refused)
    with pytest.raises(DatasetError, match="the answer has"):
        case_from_lookup(recorded, case_id="x", pieces=[99])


def test_eval_run_takes_a_case_file(tmp_path):
    from typer.testing import CliRunner

    from kbseek.interfaces.cli import app

    result = CliRunner().invoke(
        app,
        [
            "eval",
            "run",
            str(CASES),
            "--split",
            "dev",
            "--policy",
            "lexical",
            "--cache",
            str(tmp_path / "cache"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["dataset"] == "golden-cases" and report["config"]["queries"] == answerable_cases(CASES, "dev")


def _unresolved_evidence(path) -> list[str]:
    """Each expected piece of ``path`` whose document is missing or whose heading path starts no chunk's."""
    cases = read_cases(path)
    corpus = (path.parent / cases.knowledge_base).resolve()
    sections: dict[str, set[tuple[str, ...]]] = {}
    for doc in sorted(corpus.rglob("*.md")):
        rel = doc.relative_to(corpus).as_posix()
        sections[rel] = {
            tuple(c.heading_path) for c in parse_document(doc.read_bytes(), path=rel, config=ChunkingConfig()).chunks
        }
    problems = []
    for case in cases.cases:
        for e in case.expected:
            wanted = tuple(e.heading_path)
            if e.document not in sections:
                problems.append(f"{case.id}: no document {e.document}")
            elif not any(hp[: len(wanted)] == wanted for hp in sections[e.document]):
                problems.append(f"{case.id}: no section {e.judged_id}")
    return problems


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_expected_heading_path_is_a_section_of_its_document(path):
    corpus = (path.parent / read_cases(path).knowledge_base).resolve()
    if not corpus.is_dir() and not corpus.is_relative_to(ROOT):
        pytest.skip(f"{corpus} (shared data outside the repository) is absent here")
    assert CASE_FILES and corpus.is_dir()
    assert _unresolved_evidence(path) == []


def test_a_heading_path_that_is_not_in_the_document_is_named(tmp_path):
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "d.md").write_text("# 手册\n\n## 排查步骤\n\n先看日志。\n\n## 验证\n\n看指标。\n", "utf-8")
    path = _write(
        tmp_path,
        [
            {
                "id": "ok",
                "query": "q",
                "expected": [
                    {"document": "d.md", "heading_path": ["手册", "排查步骤"]},
                    {"document": "d.md", "heading_path": ["手册"]},
                ],
            },
            {"id": "typo", "query": "q", "expected": [{"document": "d.md", "heading_path": ["手册", "验证步骤"]}]},
            {"id": "skipped-h1", "query": "q", "expected": [{"document": "d.md", "heading_path": ["验证"]}]},
            {"id": "gone", "query": "q", "expected": [{"document": "e.md"}]},
        ],
    )
    assert _unresolved_evidence(path) == [
        "typo: no section d.md#手册/验证步骤",
        "skipped-h1: no section d.md#验证",
        "gone: no document e.md",
    ]


def test_held_out_case_files_are_test_split_only():
    held_out = [p for p in CASE_FILES if p.parent == ROOT / "eval" / "cases"]
    assert held_out, "eval/cases holds the unseen questions"
    for path in held_out:
        assert {c.split for c in read_cases(path).cases} == {"test"}, f"{path.name} holds a case that may be tuned on"


def test_the_console_offers_every_case_tag():
    from kbseek.interfaces.http.console import CASE_TAGS

    assert set(CASE_TAGS) == set(TAGS)
    script = (ROOT / "src" / "kbseek" / "web" / "lookup.js").read_text("utf-8")
    offered = re.search(r"const TAGS = \[(.*?)\];", script, re.S)
    assert offered and set(re.findall(r"'([a-z-]+)'", offered.group(1))) == set(TAGS) - {"no-answer"}
