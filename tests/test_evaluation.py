"""The measuring stick: judgment mapping, a real evaluation run, its JSON schema and cache."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from support import ROOT, write

from kbseek.core.models import Chunk
from kbseek.errors import DatasetError
from kbseek.evaluation.cases import load_cases
from kbseek.evaluation.datasets import JudgmentMapper, cache_home, cached_settings, load_dataset, open_dataset_kb
from kbseek.evaluation.replay import record
from kbseek.evaluation.runner import evaluate, parse_configs
from kbseek.settings import Settings


def chunk(path: str, *headings: str) -> Chunk:
    return Chunk(
        id="c",
        document_id="d",
        index=0,
        total=1,
        title="t",
        breadcrumb="",
        headings=tuple((level, h) for level, h in enumerate(headings, 1)),
        anchor="",
        category="c",
        source_path=path,
        text="",
        content_hash="",
        start=0,
        end=0,
        line_start=1,
        line_end=1,
    )


def test_heading_prefixes_match_segment_by_segment():
    qrels = {"q": {"a.md#手册/排查步骤/步骤1": 3, "a.md#手册/排查步骤": 1, "b.md": 1}}
    mapper = JudgmentMapper(qrels, markdown=True)
    assert mapper.ids(chunk("a.md", "手册", "排查步骤", "步骤1")) == ["a.md#手册/排查步骤/步骤1", "a.md#手册/排查步骤"]
    assert mapper.ids(chunk("a.md", "手册", "排查步骤", "步骤10")) == ["a.md#手册/排查步骤"]
    assert mapper.ids(chunk("a.md", "手册", "其他")) == ["a.md#手册/其他"]  # unjudged: its own id
    assert mapper.ids(chunk("b.md", "任意")) == ["b.md"]
    # headings are compared the way the chunker normalises them
    marked = JudgmentMapper({"q": {"a.md#**手册**/`ERR_TIMEOUT`  超时": 1}}, markdown=True)
    assert marked.ids(chunk("a.md", "手册", "ERR_TIMEOUT 超时")) == ["a.md#**手册**/`ERR_TIMEOUT`  超时"]


def test_corpus_ids_map_without_the_md_suffix():
    mapper = JudgmentMapper({"q": {"123": 1}}, markdown=False)
    assert mapper.ids(chunk("123.md", "Title")) == ["123"]


def make_dataset(root: Path) -> Path:
    write(
        root,
        "docs/pay.md",
        "---\ntitle: 支付网关错误码\nkeywords: [ERR_TIMEOUT]\nsummary: 错误码\n---\n"
        "# 支付网关错误码\n\n## 超时类错误\n\n### ERR_TIMEOUT\n\n支付网关请求超时，检查下游。\n\n"
        "### ERR_SIGN\n\n签名校验失败。\n",
    )
    write(root, "docs/disk.md", "# 磁盘告警\n\n## 步骤1\n\n用 df -h 看磁盘使用率。\n\n## 步骤10\n\n清理日志文件。\n")
    queries = [
        {"_id": "q1", "text": "ERR_TIMEOUT 是什么", "metadata": {"split": "dev"}},
        {"_id": "q2", "text": "磁盘满了怎么清理日志", "metadata": {"split": "test"}},
        {"_id": "q3", "text": "签名校验失败", "metadata": {"split": "dev"}},
    ]
    write(root, "queries.jsonl", "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    write(
        root,
        "qrels.tsv",
        "query-id\tcorpus-id\tscore\nq1\tpay.md#支付网关错误码/超时类错误/ERR_TIMEOUT\t2\n"
        "q2\tdisk.md#磁盘告警/步骤10\t1\nq3\tpay.md#支付网关错误码/签名类错误/ERR_SIGN\t1\n",
    )
    return root


def test_evaluation_run_matches_its_schema_and_reuses_the_cache(tmp_path):
    dataset = load_dataset(make_dataset(tmp_path / "set"))
    report = evaluate(dataset, policies=["lexical"], ks=(1, 5), depth=20, cache_root=tmp_path / "cache")
    schema = json.loads((ROOT / "schemas" / "eval-run.schema.json").read_text("utf-8"))
    jsonschema.validate(report, schema)
    metrics = report["runs"][0]["metrics"]
    assert metrics["hit@1"]["mean"] == pytest.approx(2 / 3, abs=1e-3)  # q3's judged heading path is wrong on purpose
    assert metrics["recall@5"]["mean"] == pytest.approx(2 / 3, abs=1e-3)
    q2 = next(p for p in report["runs"][0]["per_query"] if p["query_id"] == "q2")
    assert q2["ranking"][0] == "disk.md#磁盘告警/步骤10"
    again = evaluate(dataset, policies=["lexical"], ks=(1, 5), depth=20, cache_root=tmp_path / "cache")
    assert again["runs"][0]["metrics"] == metrics
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_split_configs_and_bad_inputs(tmp_path):
    root = make_dataset(tmp_path / "set")
    assert [q.id for q in load_dataset(root, split="dev").queries] == ["q1", "q3"]
    dataset = load_dataset(root)
    report = evaluate(
        dataset,
        policies=["lexical"],
        configs=parse_configs(["a:bm25_k1=0.9", "b:bm25_k1=1.5"]),
        ks=(3,),
        depth=10,
        cache_root=tmp_path / "cache",
    )
    assert [r["name"] for r in report["runs"]] == ["lexical/a", "lexical/b"]
    with pytest.raises(DatasetError):
        parse_configs(["nocolon"])
    with pytest.raises(DatasetError):
        parse_configs(["x:not_a_setting=1"])
    with pytest.raises(DatasetError):
        load_dataset(tmp_path / "missing")
    write(root, "bad.tsv", "query-id\tcorpus-id\tscore\nq1\tonly-two\n")
    with pytest.raises(DatasetError, match="bad.tsv:2"):
        load_dataset(root, qrels="bad.tsv")


def test_answers_are_scored_as_the_agent_receives_them(tmp_path):
    dataset = load_cases(ROOT / "examples" / "eval" / "golden-cases.json", split="dev")
    report = evaluate(
        dataset, policies=["lexical", "answer:lexical", "legacy"], ks=(10,), depth=50, cache_root=tmp_path / "cache"
    )
    recall, answer, legacy = (r["metrics"]["recall@10"]["mean"] for r in report["runs"])
    # the answer caps pieces per document and refuses unconfident questions: never more than the recall
    assert 0 < answer <= recall
    # legacy answers a unique L0 match with one compact summary (one judged section at most)
    assert 0 < legacy < recall
    first = report["runs"][2]["per_query"][0]
    assert len(first["ranking"]) <= 10


def test_no_answer_metrics_and_tag_breakdown(tmp_path):
    cases = {
        "knowledge_base": str(ROOT / "examples" / "knowledge_base"),
        "cases": [
            {
                "id": "a",
                "query": "ERR_TIMEOUT 怎么排查",
                "tags": ["exact-term"],
                "expected": [
                    {
                        "document": "api/payment-errors.md",
                        "heading_path": ["支付网关错误码定义", "超时类错误", "ERR_TIMEOUT"],
                    }
                ],
            },
            {
                "id": "b",
                "query": "jmap 导出堆转储",
                "tags": ["exact-term", "section"],
                "expected": [{"document": "troubleshoot/jvm-oom.md"}],
            },
            {"id": "n", "query": "光合作用的化学方程式是什么", "answerable": False, "tags": ["no-answer"]},
        ],
    }
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases, ensure_ascii=False), "utf-8")
    report = evaluate(
        load_cases(path), policies=["lexical", "answer:lexical"], ks=(1, 5), depth=20, cache_root=tmp_path / "cache"
    )
    jsonschema.validate(report, json.loads((ROOT / "schemas" / "eval-run.schema.json").read_text("utf-8")))
    recall, answer = report["runs"]
    # BM25 finds no chunk sharing a word with the off-topic question: an empty list counts as a refusal too
    assert recall["no_answer"] == {
        "answerable": 2,
        "answerable_refused": 0.0,
        "unanswerable": 1,
        "unanswerable_refused": 1.0,
    }
    assert answer["no_answer"]["unanswerable_refused"] == 1.0 and answer["no_answer"]["answerable_refused"] == 0.0
    # the questions without an answer are listed with what was returned for them: here nothing
    assert [(u["query_id"], u["ranking"]) for u in recall["unanswerable"]] == [("n", [])]
    assert [(u["query_id"], u["ranking"]) for u in answer["unanswerable"]] == [("n", [])]
    assert recall["by_tag"]["exact-term"]["queries"] == 2 and recall["by_tag"]["section"]["queries"] == 1
    per = {p["query_id"]: p["metrics"] for p in recall["per_query"]}
    assert recall["by_tag"]["exact-term"]["hit@1"] == pytest.approx((per["a"]["hit@1"] + per["b"]["hit@1"]) / 2)
    assert 1 <= recall["metrics"]["sources@5"]["mean"] <= 5


def test_a_replay_scores_what_the_live_run_scores_under_every_configuration(tmp_path):
    """``eval record`` then ``eval run --replay``, as the CLI does: the tool's own steps on the recorded lanes give
    the live rankings case by case, for each answer shape and for query-time settings tried on the side."""
    dataset = load_cases(ROOT / "examples" / "eval" / "golden-cases.json", split="dev")
    policies = ["hybrid", "answer:hybrid", "legacy"]
    configs = [("default", {}), ("rrf", {"fusion": "rrf", "answer_per_document": 1, "coverage_low": 0.3})]
    base, cache = Settings(), tmp_path / "cache"
    live = evaluate(dataset, policies=policies, configs=configs, ks=(10,), depth=100, cache_root=cache, base=base)
    kb = open_dataset_kb(dataset, cached_settings(dataset, base, cache))
    try:
        fixture = record(kb, dataset)
    finally:
        kb.close()
    # the section lane reads only the other lanes' candidates and the index: a replay runs it by today's code, so a
    # fixture without it (or recorded under other purposes) replays the same
    dropped = [c["candidates"].pop("section", None) for c in fixture["cases"].values()]
    assert any(dropped)
    replayed = evaluate(
        dataset, policies=policies, configs=configs, ks=(10,), depth=100, cache_root=cache, base=base, fixture=fixture
    )
    assert [r["name"] for r in replayed["runs"]] == [r["name"] for r in live["runs"]]
    for ours, theirs in zip(replayed["runs"], live["runs"]):
        assert [q["ranking"] for q in ours["per_query"]] == [q["ranking"] for q in theirs["per_query"]], ours["name"]
        assert ours["metrics"] == theirs["metrics"] and ours["no_answer"] == theirs["no_answer"]
    default, strict = (r["metrics"]["recall@10"]["mean"] for r in live["runs"] if r["policy"] == "answer:hybrid")
    assert default != strict  # the second configuration is really another one


def test_dataset_folders_carry_unanswerable_questions_into_the_no_answer_metrics(tmp_path):
    folder = tmp_path / "set"
    write(folder, "docs/kafka.md", "# Kafka 消费延迟\n\n## 排查\n\nconsumer lag 持续增长时先看分区再看消费者组。\n")
    write(folder, "docs/cpu.md", "# CPU 使用率高\n\n## 定位\n\n用 top -H 找到最耗 CPU 的线程。\n")
    rows = [
        {"_id": "a", "text": "Kafka consumer lag 持续增长怎么排查"},
        {"_id": "n", "text": "光合作用的化学方程式是什么", "metadata": {"answerable": False}},
        {"_id": "m", "text": "没有判断也没有标记的问题"},  # neither judged nor marked: not scored
    ]
    write(folder, "queries.jsonl", "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    write(folder, "qrels.tsv", "query-id\tcorpus-id\tscore\na\tkafka.md\t1\n")
    dataset = load_dataset(folder)
    assert [q.id for q in dataset.queries] == ["a"] and [q.id for q in dataset.unanswerable] == ["n"]
    report = evaluate(dataset, policies=["lexical", "answer:lexical"], ks=(1, 5), depth=20, cache_root=tmp_path / "c")
    jsonschema.validate(report, json.loads((ROOT / "schemas" / "eval-run.schema.json").read_text("utf-8")))
    recall, answer = report["runs"]
    assert recall["no_answer"]["unanswerable"] == 1 and recall["no_answer"]["unanswerable_refused"] == 1.0
    assert answer["no_answer"]["unanswerable_refused"] == 1.0 and answer["no_answer"]["answerable_refused"] == 0.0
    assert recall["evidence"] == {}  # a recall policy labels nothing
    assert answer["evidence"]["chars_mean"] > 0
    assert all("strong" not in q for q in recall["per_query"] + recall["unanswerable"])
    pieces = [p for q in answer["per_query"] + answer["unanswerable"] for p in q["strong"]]
    assert len(pieces) == answer["evidence"]["strong_pieces"]
    # a question marked unanswerable that is judged relevant somewhere is a contradiction, named
    write(folder, "qrels.tsv", "query-id\tcorpus-id\tscore\na\tkafka.md\t1\nn\tcpu.md\t1\n")
    with pytest.raises(DatasetError, match="answerable: false"):
        load_dataset(folder)


def test_evidence_precision_counts_strong_pieces_and_strong_pieces_for_unanswerable_questions():
    from kbseek.evaluation.datasets import Dataset, Query  # imported here: only this test builds one by hand
    from kbseek.evaluation.retrievers import AnswerChunks, LabelledChunk  # imported here: as above
    from kbseek.evaluation.runner import run_policy  # imported here: as above

    answers = {
        "a": [LabelledChunk("x.md", ("X",), "PRECISE"), LabelledChunk("y.md", ("Y",), "HIGHLY_RELEVANT")],
        "b": [LabelledChunk("z.md", ("Z",), "HIGHLY_RELEVANT"), LabelledChunk("y.md", ("Y",), "REFERENCE")],
        "n": [LabelledChunk("y.md", ("Y",), "HIGHLY_RELEVANT")],
    }

    def retrieve(query, policy, depth):
        chunks = AnswerChunks(answers[query.id])
        chunks.chars = 100 * len(chunks)
        return chunks

    qrels = {"a": {"x.md": 1}, "b": {"z.md": 2, "y.md": 1}}
    dataset = Dataset(
        "t", Path("."), Path("docs"), Path("q"), Path("r"), [Query("a", "qa"), Query("b", "qb")], qrels,
        unanswerable=[Query("n", "qn")],
    )  # fmt: skip
    run = run_policy(retrieve, dataset, policy="answer:hybrid", depth=10, names=["hit@1"], name="r", overrides={})
    # strong pieces: a/x (right), a/y (wrong), b/z (right), n/y (wrong: nothing answers n); REFERENCE is not counted
    assert run.evidence["strong_pieces"] == 4 and run.evidence["precision"] == 0.5
    # the same pieces by question, so a precision figure can be traced to the questions behind it
    assert {q: [(p["id"], p["level"], p["relevant"]) for p in pieces] for q, pieces in run.strong.items()} == {
        "a": [("x.md", "PRECISE", True), ("y.md", "HIGHLY_RELEVANT", False)],
        "b": [("z.md", "HIGHLY_RELEVANT", True)],
        "n": [("y.md", "HIGHLY_RELEVANT", False)],
    }
    assert run.evidence["chars_mean"] == round((200 + 200 + 100) / 3, 1) and run.evidence["chars_max"] == 200
    recall = run_policy(retrieve, dataset, policy="hybrid", depth=10, names=["hit@1"], name="r", overrides={})
    assert recall.evidence == {}


def test_a_corpus_has_one_cache_home_however_its_path_is_written(tmp_path, monkeypatch):
    """``../shared/data/set`` from the project and ``/…/shared/data/set`` from a script are the same files: one
    index, embedded once (a second spelling of the TiDB tree's path used to embed its 16,000 chunks again)."""
    folder = tmp_path / "data" / "set"
    write(folder, "docs/kafka.md", "# Kafka 消费延迟\n\n## 排查\n\nconsumer lag 持续增长时先看分区再看消费者组。\n")
    write(folder, "queries.jsonl", json.dumps({"_id": "a", "text": "Kafka consumer lag"}) + "\n")
    write(folder, "qrels.tsv", "query-id\tcorpus-id\tscore\na\tkafka.md\t1\n")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    spellings = [folder, Path("../data/set"), tmp_path / "work" / ".." / "data" / "set"]
    homes = {cache_home(load_dataset(path), Settings(), tmp_path / "cache") for path in spellings}
    assert len(homes) == 1
    write(folder, "docs/kafka.md", "# Kafka 消费延迟\n\n## 排查\n\n先看分区。\n")  # another corpus: another home
    assert cache_home(load_dataset(folder), Settings(), tmp_path / "cache") not in homes
