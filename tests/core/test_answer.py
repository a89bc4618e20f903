"""Answer assembly: levels, grouping, caps, budget, content forms, dedup pointers (pure core)."""

from __future__ import annotations

import pytest

from kbseek.core.answer import (
    Candidate,
    Deduplicated,
    DocumentEvidence,
    assemble,
    by_section,
    metadata_only,
)
from kbseek.core.completeness import strongest_given
from kbseek.core.models import Chunk, DocumentCard
from kbseek.core.relevance import (
    HIGHLY_RELEVANT,
    PRECISE,
    REFERENCE,
    Thresholds,
    level,
)
from kbseek.core.relevance import (
    LEVEL_ORDER as ORDER,
)

T = Thresholds(0.87, 0.82, 0.8, 0.5, gap_high=0.02, gap_low=0.01)


def chunk(doc: str, index: int, text: str, anchor: str = "a", start: int = 0) -> Chunk:
    return Chunk(
        f"{doc}-{index}",
        doc,
        index,
        9,
        doc.upper(),
        f"{doc.upper()} > {anchor}",
        ((2, anchor),),
        anchor,
        "ops",
        f"ops/{doc}.md",
        text,
        "h",
        start,
        start + len(text),
        index * 10 + 1,
        index * 10 + 5,
    )


def info(doc: str, outline=()) -> DocumentCard:
    return DocumentCard(doc, f"ops/{doc}.md", doc.upper(), f"about {doc}", ("k1", "k2"), "ops", tuple(outline))


def cand(c: Chunk, lvl: str = HIGHLY_RELEVANT, score: float = 1.0) -> Candidate:
    return Candidate((c,), score, {}, lvl)


@pytest.mark.parametrize(
    "sim, gap, cov, l0, expected",
    [
        (0.90, 0.03, 0.0, "unique", PRECISE),  # L0 unique match + high similarity that stands out
        (0.10, 0.00, 0.9, "unique", PRECISE),  # ... or full lexical coverage
        (0.90, 0.03, 0.0, "match", HIGHLY_RELEVANT),  # strong, but L0 matched several documents
        (0.84, 0.01, 0.0, "match", HIGHLY_RELEVANT),  # supported and an L0 match
        (0.90, 0.015, 0.0, "none", REFERENCE),  # high cosine, but not far above the query's background
        (0.84, 0.01, 0.0, "none", REFERENCE),
        (None, 0.0, 0.6, "none", REFERENCE),
        (0.95, 0.005, 0.4, "match", None),  # everything is about as similar: not evidence
        (0.80, 0.05, 0.4, "match", None),  # below the cosine floor
        (None, 0.0, 0.0, "unique", None),
    ],
)
def test_levels_follow_seed_001(sim, gap, cov, l0, expected):
    assert level(sim, gap, cov, l0, T) == expected


def test_levels_never_rise_down_the_answer():
    # fused order: a reference piece of A first, then a highly relevant piece of B, then A's precise piece
    a1, b1, a2 = (
        chunk("a", 1, "a one " * 40, "a1"),
        chunk("b", 1, "b one " * 40, "b1"),
        chunk("a", 2, "a two " * 40, "a2"),
    )
    answer = assemble(
        [cand(a1, REFERENCE, 0.9), cand(b1, HIGHLY_RELEVANT, 0.8), cand(a2, PRECISE, 0.7)],
        {"a": info("a"), "b": info("b")},
        seen={},
    )
    assert [e.document.id for e in answer.documents] == ["a", "b"]  # A holds the precise piece
    assert [p.anchor for p in answer.documents[0].pieces] == ["a2", "a1"]
    assert [p.level for p in answer.documents[0].pieces] == [PRECISE, REFERENCE]
    entries = [e.level for e in answer.documents]
    assert entries == sorted(entries, key=ORDER.__getitem__)


def test_a_reference_document_ranked_first_reads_after_a_highly_relevant_one():
    ref, high = chunk("r", 1, "r " * 200, "r1"), chunk("h", 1, "h " * 200, "h1")
    answer = assemble(
        [cand(ref, REFERENCE, 0.9), cand(high, HIGHLY_RELEVANT, 0.5)], {"r": info("r"), "h": info("h")}, seen={}
    )
    assert [(e.document.id, e.level) for e in answer.documents] == [("h", HIGHLY_RELEVANT), ("r", REFERENCE)]
    # within a level the fused rank stands
    r2 = chunk("q", 1, "q " * 200, "q1")
    tie = assemble([cand(ref, REFERENCE, 0.9), cand(r2, REFERENCE, 0.5)], {"r": info("r"), "q": info("q")}, seen={})
    assert [e.document.id for e in tie.documents] == ["r", "q"]


def test_extra_entries_take_their_place_by_level():
    ref = chunk("r", 1, "r " * 200, "r1")
    summary = DocumentEvidence(info("s"), "metadata_only", HIGHLY_RELEVANT, content=metadata_only(info("s")))
    answer = assemble([cand(ref, REFERENCE)], {"r": info("r")}, seen={}, extra=[summary])
    assert [e.document.id for e in answer.documents] == ["s", "r"]


OUTLINE = [{"heading": h, "anchor": h, "level": 2} for h in ("a1", "a2", "a3", "a4", "a5")]


def five_pieces(doc: str = "a") -> list[Candidate]:
    return [
        cand(chunk(doc, i, f"piece {i}. " * 30, f"a{i}", start=i * 1000), HIGHLY_RELEVANT, 1 - i / 10)
        for i in range(1, 6)
    ]


def test_the_per_document_cap_is_named_as_the_limit_and_leaves_the_evidence_complete():
    answer = assemble(five_pieces(), {"a": info("a", OUTLINE)}, seen={}, per_document=3, budget_chars=100_000)
    assert len(answer.documents[0].pieces) == 3 and answer.evidence_status == "complete"
    assert answer.omitted == 2
    sentence = answer.completeness
    assert "At most 3 piece(s) per document: 2 more matching piece(s) not shown" in sentence
    assert "ops/a.md#a4, ops/a.md#a5" in sentence and "section=PATH#ANCHOR" in sentence
    assert "budget" not in sentence


def test_the_budget_is_named_when_it_cut_and_the_evidence_is_partial():
    answer = assemble(five_pieces(), {"a": info("a", OUTLINE)}, seen={}, per_document=5, budget_chars=400)
    assert answer.evidence_status == "partial"
    sentence = answer.completeness
    assert "Cut to the 400-character budget" in sentence and "left out" in sentence
    assert "per document" not in sentence


def test_both_limits_are_named_when_both_cut():
    # A's first two pieces fill most of the budget, the cap holds back its other three, B finds no room left
    answer = assemble(
        five_pieces("a") + five_pieces("b")[:2],
        {"a": info("a", OUTLINE), "b": info("b")},
        seen={},
        per_document=2,
        budget_chars=600,
    )
    sentence = answer.completeness
    assert [e.document.id for e in answer.documents] == ["a"] and answer.evidence_status == "partial"
    assert "Cut to the 600-character budget (2 item(s) left out)" in sentence
    assert "At most 2 piece(s) per document: 3 more matching piece(s) not shown" in sentence


def test_nothing_limited_says_so():
    answer = assemble(five_pieces()[:2], {"a": info("a", OUTLINE)}, seen={}, per_document=3, budget_chars=100_000)
    assert answer.evidence_status == "complete" and answer.omitted == 0
    assert "Nothing was held back by the budget or the per-document cap." in answer.completeness
    assert "budget (" not in answer.completeness and "not shown" not in answer.completeness


def table_rows() -> list[Candidate]:
    """A section split across three chunks (its header row first), hit out of document order, and another section."""
    header = chunk("t", 0, "## Table\n| code | cause |\n" + "| 502 | upstream closed |\n" * 8, "table", start=0)
    rows = chunk("t", 1, "| 504 | upstream slow |\n" * 10, "table", start=len(header.text))
    far = chunk("t", 5, "| 429 | rate limited |\n" * 10, "table", start=5000)
    other = chunk("t", 7, "## Other\n" + "more text. " * 20, "other", start=8000)
    return [cand(rows, PRECISE, 0.9), cand(other, REFERENCE, 0.8), cand(header, PRECISE, 0.7), cand(far, PRECISE, 0.6)]


def test_hits_of_one_section_are_one_piece_in_document_order():
    merged = by_section(table_rows())
    answer = assemble(merged, {"t": info("t")}, seen={}, budget_chars=100_000)
    pieces = answer.documents[0].pieces
    assert [p.anchor for p in pieces] == ["table", "other"]
    table = pieces[0]
    assert table.chunk_ids == ("t-0", "t-1", "t-5") and table.level == PRECISE
    assert table.text.startswith("## Table") and table.text.index("| 504 |") < table.text.index("| 429 |")
    assert "\n\n…\n\n| 429 |" in table.text  # the rows between chunks 1 and 5 are not given, and it says so
    assert (table.line_start, table.line_end) == (1, 55)


def test_hits_of_one_section_at_different_levels_stay_apart():
    rows, _, header, _ = table_rows()
    weak_header = Candidate(header.chunks, header.score, {}, REFERENCE)
    merged = by_section([rows, weak_header])
    assert [(len(c.chunks), c.level) for c in merged] == [(1, PRECISE), (1, REFERENCE)]


def test_a_merged_section_that_does_not_fit_gives_its_best_hit():
    rows, _, header, _ = table_rows()
    merged = by_section([rows, header])
    whole = len(header.chunks[0].text) + len(rows.chunks[0].text)
    answer = assemble(merged, {"t": info("t")}, seen={}, budget_chars=whole - 50)
    (piece,) = answer.documents[0].pieces
    assert piece.chunk_ids == ("t-1",) and piece.text.startswith("…\n\n| 504 |")  # the left-out header is marked
    # the header row was left out: the piece is shortened (so a session does not remember the section as given)
    assert piece.truncated and answer.evidence_status == "partial" and answer.omitted == 0
    assert "pieces shortened" in answer.completeness


def test_a_follow_up_whose_strongest_section_was_given_reads_complete_and_names_it():
    given, new = chunk("g", 0, "the answer. " * 30, "fix"), chunk("n", 0, "related text. " * 30, "other")
    documents = {"g": info("g"), "n": info("n")}
    candidates = [cand(given, PRECISE), cand(new, REFERENCE)]
    by_section_key = assemble(candidates, documents, seen={"g#fix": 1}, budget_chars=100_000)
    assert [d.judged for d in by_section_key.deduplicated] == [PRECISE]
    assert by_section_key.level == REFERENCE and by_section_key.evidence_status == "complete"
    assert (
        "strongest evidence for this question (PRECISE) is one of them: G > fix (call 1)" in by_section_key.completeness
    )
    by_document = assemble(candidates, documents, seen={"g": 1}, dedup_mode="document", budget_chars=100_000)
    assert by_document.deduplicated and by_document.evidence_status == "partial"
    assert "Only reference-level evidence" in by_document.completeness


def test_the_strongest_evidence_given_earlier_is_a_section_not_a_document():
    section = Deduplicated("t", "ops/t.md", "T", "table", "T > table", 1, "given", PRECISE)
    document = Deduplicated("t", "ops/t.md", "T", None, "T", 1, "given", PRECISE)
    assert strongest_given([], [document]) is None  # dedup by document: this section may never have been given
    assert strongest_given([], [document, section]) is section
    new = DocumentEvidence(info("u"), "chunks", PRECISE)
    assert strongest_given([new], [section]) is None  # the new evidence is as strong
