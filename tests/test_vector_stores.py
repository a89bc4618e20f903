"""One conformance suite for every VectorStore: the in-process store, Milvus Lite and a Milvus server (all real)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from kbseek.adapters.vectors_local import LocalVectorStore, _kth_largest
from kbseek.adapters.vectors_milvus import MilvusVectorStore, string_literal
from kbseek.ports import VectorRecord, VectorStore

DIM = 8


def record(chunk_id: str, vector: list[float], category: str = "api") -> VectorRecord:
    return VectorRecord(
        chunk_id,
        np.asarray(vector, dtype=np.float32),
        f"doc-{chunk_id}",
        category,
        f"{category}/x.md",
        "x.md",
        0,
        1,
        "标题",
        "标题 > 章节",
    )


def basis(i: int, noise: float = 0.0) -> list[float]:
    vector = [noise] * DIM
    vector[i] = 1.0
    return vector


@pytest.fixture(params=["local", "milvus", pytest.param("milvus-server", marks=pytest.mark.slow)])
def store(request, tmp_path) -> VectorStore:
    if request.param == "local":
        made: VectorStore = LocalVectorStore(dim=DIM)
    elif request.param == "milvus-server":  # a collection of its own on the session's server (tests/milvus_server.py)
        uri = request.getfixturevalue("milvus_server").uri
        made = MilvusVectorStore(uri=uri, dim=DIM, model_id=f"conformance-{uuid.uuid4().hex[:8]}")
    else:
        made = MilvusVectorStore(uri=str(tmp_path / "milvus.db"), dim=DIM, model_id="conformance")
    yield made
    made.close()


def test_search_orders_by_cosine_and_honours_top_k(store):
    store.upsert([record("a", basis(0)), record("b", basis(1)), record("c", basis(0, 0.3))])
    hits = store.search(np.asarray(basis(0, 0.1)), top_k=2)
    assert [h.chunk_id for h in hits] == ["a", "c"]
    assert hits[0].similarity == pytest.approx(1 / np.linalg.norm(basis(0, 0.1)), abs=1e-4)
    assert store.count() == 3 and store.ids() == {"a", "b", "c"}


def test_upsert_replaces_and_delete_ignores_unknown(store):
    store.upsert([record("a", basis(0)), record("b", basis(1))])
    store.upsert([record("a", basis(2))])
    assert [h.chunk_id for h in store.search(np.asarray(basis(2)), top_k=1)] == ["a"]
    store.delete(["b", "nope"])
    assert store.ids() == {"a"} and store.count() == 1


def test_category_filter_threshold_and_empty(store):
    assert store.search(np.asarray(basis(0)), top_k=3) == []
    store.upsert([record("a", basis(0), "api"), record("b", basis(0, 0.2), "ops"), record("c", basis(3), "ops")])
    assert [h.chunk_id for h in store.search(np.asarray(basis(0)), top_k=5, categories=["ops"])] == ["b", "c"]
    assert [h.chunk_id for h in store.search(np.asarray(basis(0)), top_k=5, threshold=0.5)] == ["a", "b"]
    assert store.search(np.asarray(basis(0)), top_k=5, categories=[]) == []


@pytest.mark.parametrize("hostile", ['api" or category != "x', 'api\\" || true || "', "ops') or ('1'='1", '"', "\\"])
def test_hostile_category_values_are_data(store, hostile):
    store.upsert([record("a", basis(0), "api"), record("b", basis(1), hostile)])
    hits = store.search(np.asarray(basis(0)), top_k=5, categories=[hostile])
    assert [h.chunk_id for h in hits] == ["b"]


def test_wrong_dimension_is_refused():
    with pytest.raises(ValueError):
        LocalVectorStore(dim=DIM).upsert([record("a", [1.0, 0.0])])


def test_string_literal_escapes_quotes_and_backslashes():
    assert string_literal('a"b\\c') == '"a\\"b\\\\c"'


def test_the_kth_largest_is_the_one_a_full_partition_selects():
    rng = np.random.default_rng(7)
    for trial in range(400):
        n = int(rng.integers(1, 12000))
        k = int(rng.integers(1, min(n, 300) + 1))
        values = rng.standard_normal(n).astype(np.float32)
        if trial % 2:
            values = np.round(values, 1)  # ties
        if trial % 3 == 0:
            values[rng.random(n) < 0.6] = -np.inf  # rows outside the asked categories
        if trial % 5 == 0:
            values[rng.random(n) < 0.01] = np.nan
        expected = np.partition(values, n - k)[n - k]
        got = _kth_largest(values, k)
        assert type(got) is np.float32
        assert got == expected or (np.isnan(got) and np.isnan(expected))
