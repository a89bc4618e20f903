import pytest

from kbseek.core.fusion import l0_lane, rrf


def test_rrf_formula_by_hand():
    lanes = {"bm25": ["a", "b", "c"], "dense": ["b", "a", "d"], "l0": ["c"]}
    fused = {f.chunk_id: f for f in rrf(lanes, k=60, weights={"bm25": 1.0, "dense": 1.0, "l0": 0.5})}
    assert fused["a"].score == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"].score == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"].score == pytest.approx(1 / 63 + 0.5 / 61)
    assert fused["d"].score == pytest.approx(1 / 63)
    assert fused["c"].ranks == {"bm25": 3, "l0": 1}
    order = [f.chunk_id for f in rrf(lanes, k=60, weights={"bm25": 1.0, "dense": 1.0, "l0": 0.5})]
    assert order == ["a", "b", "c", "d"]  # a and b tie; both have a rank-1 lane; id decides


def test_weights_k_and_duplicates():
    assert [f.chunk_id for f in rrf({"x": ["a", "b"], "y": ["b"]}, k=0, weights={"x": 1, "y": 0})] == ["a", "b"]
    assert rrf({"x": ["a", "a", "b"]})[1].ranks == {"x": 3}  # a repeat keeps its first rank only
    assert [f.chunk_id for f in rrf({"x": ["a"], "y": ["b"]}, weights={"x": 0, "y": 1})] == ["b"]
    with pytest.raises(ValueError):
        rrf({}, k=-1)


def test_l0_lane_keeps_document_order_and_caps_chunks():
    assert l0_lane(["d1", "d9", "d2"], {"d1": ["a", "b", "c"], "d2": ["z"]}, per_document=2) == ["a", "b", "z"]


def test_relative_score_fusion_keeps_margins():
    from kbseek.core.fusion import relative_score_fusion

    fused = relative_score_fusion(
        {"bm25": [("a", 10.0), ("b", 2.0)], "dense": [("b", 0.91), ("a", 0.90)]}, weights={"bm25": 1.0, "dense": 1.0}
    )
    assert [(f.chunk_id, round(f.score, 3)) for f in fused] == [("a", 1.0), ("b", 1.0)]  # tie: rank, then id
    margin = relative_score_fusion(
        {"bm25": [("a", 10.0), ("b", 9.0), ("c", 0.0)], "dense": [("b", 0.9), ("c", 0.8), ("a", 0.7)]}
    )
    assert [f.chunk_id for f in margin] == ["b", "a", "c"]  # b: 0.9 + 1.0 beats a: 1.0 + 0.0
    one = relative_score_fusion({"x": [("a", 5.0), ("b", 5.0)]})
    assert [f.score for f in one] == [1.0, 1.0]  # a flat lane gives every candidate full credit


def test_document_prior_lifts_the_sections_of_the_document_the_evidence_points_to():
    from kbseek.core.fusion import Fused, document_prior

    ranked = [Fused("stray", 1.0, {"bm25": 1}), Fused("a1", 0.9, {"dense": 1}), Fused("a2", 0.85, {"dense": 2})]
    docs = {"stray": "X", "a1": "A", "a2": "A"}
    assert [f.chunk_id for f in document_prior(ranked, docs, weight=0.5)] == ["a1", "a2", "stray"]
    assert [f.chunk_id for f in document_prior(ranked, docs, weight=0.0)] == ["stray", "a1", "a2"]
    assert document_prior([], docs, weight=1.0) == []
