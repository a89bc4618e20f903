"""``eval compare``: per-case wins and losses and the paired randomisation test, by hand and end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support import EXAMPLES, answerable_cases

from kbseek.errors import DatasetError
from kbseek.evaluation.compare import compare, paired_permutation_p


def run(name, scores):
    return {
        "name": name,
        "metrics": {"ndcg@10": {"mean": float(np.mean(list(scores.values())))}},
        "per_query": [{"query_id": q, "query": f"question {q}", "metrics": {"ndcg@10": v}} for q, v in scores.items()],
    }


def test_wins_losses_and_mean_difference_by_hand():
    a = run("a", {"q1": 0.5, "q2": 1.0, "q3": 0.0, "q4": 0.2})
    b = run("b", {"q1": 1.0, "q2": 1.0, "q3": 0.5, "q4": 0.1, "q5": 1.0})
    result = compare(a, b)
    assert (result["wins"], result["losses"], result["ties"], result["cases"]) == (2, 1, 1, 4)
    assert result["mean_difference"] == pytest.approx((0.5 + 0 + 0.5 - 0.1) / 4)
    assert result["only_in_b"] == ["q5"] and result["losses_detail"][0]["query_id"] == "q4"
    with pytest.raises(DatasetError, match="share no case"):
        compare(run("a", {"x": 1.0}), run("b", {"y": 1.0}))


def test_permutation_p_value_matches_the_exact_test_on_a_small_case():
    # 4 cases, all differences +0.25: of the 16 sign patterns, 2 (all + or all -) reach |mean| 0.25 -> exact p = 1/8
    p = paired_permutation_p(np.array([0.25, 0.25, 0.25, 0.25]), permutations=20_000)
    assert p == pytest.approx(1 / 8, abs=0.01)
    assert paired_permutation_p(np.array([0.3, -0.3, 0.3, -0.3])) == 1.0


def test_cli_compare_and_add_case(tmp_path):
    from typer.testing import CliRunner

    from kbseek.interfaces.cli import app

    runner = CliRunner()
    cases = EXAMPLES / "eval" / "golden-cases.json"
    result = runner.invoke(
        app,
        [
            "eval",
            "run",
            str(cases),
            "--split",
            "dev",
            "--policy",
            "lexical",
            "--set",
            "bm25:bm25_k1=1.2",
            "--set",
            "flat:bm25_k1=0.1,bm25_b=0",
            "--cache",
            str(tmp_path / "cache"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = tmp_path / "report.json"
    report.write_text(result.stdout, "utf-8")
    compared = runner.invoke(app, ["eval", "compare", f"{report}#lexical/bm25", f"{report}#lexical/flat", "--json"])
    assert compared.exit_code == 0, compared.output
    data = json.loads(compared.stdout)
    scored = answerable_cases(cases, "dev")
    assert (
        data["cases"] == scored and data["wins"] + data["losses"] + data["ties"] == scored and 0 < data["p_value"] <= 1
    )
    missing = runner.invoke(app, ["eval", "compare", f"{report}#nope", str(report), "--json"])
    assert missing.exit_code == 2 and "no run named 'nope'" in missing.stdout

    home = tmp_path / "home"
    assert runner.invoke(app, ["--home", str(home), "ingest", str(EXAMPLES / "knowledge_base")]).exit_code == 0
    lookup = runner.invoke(app, ["--home", str(home), "lookup", "ERR_GATEWAY_TIMEOUT 能不能标记失败", "--json"])
    recorded = tmp_path / "lookup.json"
    recorded.write_text(lookup.stdout, "utf-8")
    case_file = tmp_path / "cases.json"
    case_file.write_text(cases.read_text("utf-8"), "utf-8")
    case_file_kb = json.loads(case_file.read_text("utf-8"))
    case_file_kb["knowledge_base"] = str(EXAMPLES / "knowledge_base")
    case_file.write_text(json.dumps(case_file_kb, ensure_ascii=False), "utf-8")
    added = runner.invoke(
        app, ["eval", "add-case", str(case_file), str(recorded), "--id", "prod-1", "--tag", "exact-term"]
    )
    assert added.exit_code == 0, added.output
    stored = json.loads(case_file.read_text("utf-8"))["cases"][-1]
    assert stored["id"] == "prod-1" and stored["expected"][0]["document"] == "api/payment-errors.md"


def test_report_writes_markdown_json_and_png_charts(tmp_path):
    from typer.testing import CliRunner

    from kbseek.interfaces.cli import app

    runner = CliRunner()
    cases = EXAMPLES / "eval" / "golden-cases.json"
    result = runner.invoke(
        app,
        [
            "eval",
            "run",
            str(cases),
            "--policy",
            "lexical",
            "--policy",
            "answer:lexical",
            "--cache",
            str(tmp_path / "cache"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    (tmp_path / "run.json").write_text(result.stdout, "utf-8")
    made = runner.invoke(
        app, ["eval", "report", str(tmp_path / "run.json"), "--out", str(tmp_path / "out"), "--name", "baseline"]
    )
    assert made.exit_code == 0, made.output
    text = (tmp_path / "out" / "baseline.md").read_text("utf-8")
    assert "| answer:lexical |" in text and "![metrics per run](baseline-metrics.png)" in text
    assert "## ndcg@10 by tag" in text and "| paraphrase |" in text
    for chart in ("baseline-metrics.png", "baseline-tags.png"):
        assert (tmp_path / "out" / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "out" / "baseline.json").read_text("utf-8"))["runs"][1]["name"] == "answer:lexical"


def test_report_without_json_copies_no_query_text(tmp_path):
    from kbseek.evaluation.report import write_report

    report = json.loads((EXAMPLES.parent / "eval" / "reports" / "baseline.json").read_text("utf-8"))
    path = write_report(report, tmp_path, "shared", with_json=False)
    assert not (tmp_path / "shared.json").exists()
    assert report["runs"][0]["per_query"][0]["query"] not in path.read_text("utf-8")
    # the cases without an answer that an answer policy answered are named by id, never by their text
    answer = next(r for r in report["runs"] if r["name"] == "answer:hybrid")
    answered = [u for u in answer["unanswerable"] if u["ranking"]]
    text = path.read_text("utf-8")
    assert answered and f"| answer:hybrid | {', '.join(u['query_id'] for u in answered)} |" in text
    # and so are the answerable cases given a strong piece judged not relevant, where evidence precision is lost
    wrong = [q["query_id"] for q in answer["per_query"] if any(not p["relevant"] for p in q["strong"])]
    assert wrong and f"| answer:hybrid | {', '.join(wrong)} |" in text
    assert not any(u["query"] in text for u in answer["unanswerable"])
