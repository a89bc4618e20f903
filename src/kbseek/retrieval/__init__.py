"""The in-memory retrieval engine: the indexes of one knowledge base and what keeps them fresh.

``indexes`` (refresh, snapshots) drives two copies of the lexical indexes (``index_copy``, swapped by
``rwlock.TwoCopies``) and the dense lane (``vector_lane``: the vector index of ``vectors``, the documents still
without vectors in ``pending``, the ``vector_worker`` thread that embeds uploads); ``recall`` runs the lanes of a
query and ``sections`` resolves documents and sections. It reads the database and the stores through the protocols
of ``kbseek.ports`` only: which adapters serve them is chosen by ``kbseek.wiring``. It knows nothing of answers or
edges; ``docs/architecture-concurrency.md`` describes its threads and locks."""
