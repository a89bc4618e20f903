"""Ingest the shared real runbooks and check chunk counts and breadcrumbs of named sections."""

from __future__ import annotations

import pytest
from support import SHARED_DATA

PROMETHEUS = SHARED_DATA / "prometheus-operator-runbooks" / "docs"
SUPERBIZ = SHARED_DATA / "superbizagent-runbooks" / "docs"
pytestmark = pytest.mark.skipif(not PROMETHEUS.is_dir(), reason="../shared/data is not laid out here")


@pytest.fixture
def sqlite_kb(tmp_path):
    from kbseek.service import KnowledgeBase
    from kbseek.settings import Settings

    kb = KnowledgeBase.open(Settings(home=tmp_path / "home"))
    yield kb
    kb.close()


def test_prometheus_runbooks(sqlite_kb):
    report = sqlite_kb.ingest([PROMETHEUS])
    files = list(PROMETHEUS.rglob("*.md"))
    assert report.counts["added"] == len(files) == 117 and report.ok
    doc = sqlite_kb.get_document("alertmanager/AlertmanagerFailedReload.md")
    assert doc.category == "alertmanager" and doc.title == "Alertmanager Failed Reload"
    # the bare H1 joins the first section; breadcrumbs start with the H1 (the alert name)
    assert [c.breadcrumb for c in doc.chunks] == [
        "AlertmanagerFailedReload > Meaning",
        "AlertmanagerFailedReload > Impact",
        "AlertmanagerFailedReload > Diagnosis",
        "AlertmanagerFailedReload > Mitigation",
    ]
    assert doc.chunks[0].line_start == 5 and doc.chunks[-1].line_end == 38
    original = (sqlite_kb.settings.knowledge_base_dir / doc.path).read_text("utf-8")
    for chunk in doc.chunks:  # every chunk is an exact slice of the stored original
        assert original[chunk.start : chunk.end] == chunk.text
    total = sqlite_kb.stats()["chunks"]
    assert 450 <= total <= 700, total


def test_superbizagent_runbooks(sqlite_kb):
    report = sqlite_kb.ingest([SUPERBIZ])
    assert report.counts["added"] == 5
    doc = sqlite_kb.get_document("cpu_high_usage.md")
    assert doc.chunk_count == 16
    crumbs = [c.breadcrumb for c in doc.chunks]
    assert "CPU使用率过高告警处理方案 > 排查步骤 > 步骤2: 查询系统日志" in crumbs
    assert "CPU使用率过高告警处理方案 > 紧急处理措施 > 立即操作（5分钟内）" in crumbs
    step2 = next(c for c in doc.chunks if c.heading(3) == "步骤2: 查询系统日志")
    assert "system-metrics" in step2.text and step2.anchor == "步骤2-查询系统日志"
    assert (step2.heading(1), step2.heading(2)) == ("CPU使用率过高告警处理方案", "排查步骤")
    # every judged section of the dev qrels exists as a chunk heading path
    judged = [line.split("\t")[1] for line in (SUPERBIZ.parent / "qrels.tsv").read_text("utf-8").splitlines()[1:]]
    paths = {
        (d.path, "/".join(c.heading_path))
        for d in (sqlite_kb.get_document(x.path) for x in sqlite_kb.list_documents())
        for c in d.chunks
    }
    for corpus_id in judged:
        file, _, heading = corpus_id.partition("#")
        assert any(p == file and h.startswith(heading) for p, h in paths), corpus_id
