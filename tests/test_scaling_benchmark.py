"""``benchmarks/scaling.py`` at a toy size: it builds, starts, sizes its structures and times lookups, and its fits
name the growth they are given. The real runs (10k-1M chunks) are by hand; their numbers are in docs/scaling.md."""

from __future__ import annotations

import sys

import pytest
from support import ROOT, SHARED_DATA

sys.path.insert(0, str(ROOT / "benchmarks"))
scaling = pytest.importorskip("scaling")
from scaling_pg import tsvector_literal  # noqa: E402
from scaling_report import fit  # noqa: E402

from kbseek.adapters import embedders  # noqa: E402

needs_corpus = pytest.mark.skipif(
    not (SHARED_DATA / "tidb-faq-zh-dev" / "corpus.jsonl").exists(), reason="the shared TiDB FAQ corpus is not here"
)


def test_power_law_fits_name_the_growth():
    assert fit([(1e4, 2.0), (1e5, 20.0), (1e6, 200.0)]) | {"a": 0} == {"b": 1.0, "a": 0, "growth": "linear"}
    assert fit([(1e4, 1.0), (1e5, 2.0), (1e6, 4.0)])["growth"] == "sublinear"
    assert fit([(1e4, 1e4 * 9.21), (1e5, 1e5 * 11.51), (1e6, 1e6 * 13.82)])["growth"] == "n log n"
    assert fit([(1e4, 5.0)]) is None


def test_tsvector_literal_keeps_tokens_whole_and_quotes_them():
    assert tsvector_literal(["err_timeout", "数据库", "err_timeout", "it's", ""]) == (
        "'err_timeout':1,3 '数据库':2 'it''s':4"
    )


@pytest.mark.slow  # the real query model under a loaded machine: 6-90 s here, whatever the size
@pytest.mark.data
@needs_corpus
def test_a_toy_build_starts_and_measures(tmp_path, monkeypatch):
    documents = list(scaling.synthetic_documents(60))
    assert documents == list(scaling.synthetic_documents(60))  # seeded
    text = b"".join(data for _, data in documents).decode("utf-8")
    assert text.startswith("# ") and "\n## " in text and any("\u4e00" <= ch <= "\u9fff" for ch in text)
    monkeypatch.setattr(embedders, "_SHARED", dict(embedders._SHARED))  # the synthetic embedder stays in this test
    built = scaling.build(tmp_path / "home", 60)
    assert built["failed"] == 0 and built["chunks"] >= 50
    measured = scaling.measure(tmp_path / "home", "local", "", rounds=1, limit=8)
    assert measured["chunks"] == built["chunks"] and measured["lookups"] == 8
    assert measured["p50_ms"] <= measured["p95_ms"]
    sizes = measured["structures_mib"]
    assert sizes["vector_store"] > 0 and sizes["bm25_postings"] > 0
