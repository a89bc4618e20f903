"""Adapters at the edges of the core: the SQL database (documents, caches, records), the file store of originals,
the vector stores (in-process, Milvus Lite, a Milvus server) and the embedding models. Each fits a small protocol in
``kbseek.ports``; the service and maintenance choose and wire them, nothing else imports them."""
