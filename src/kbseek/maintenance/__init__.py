"""Looking after a data home, beside the service rather than through it: ``doctor`` (check the stored originals,
indexes and vectors against the database, and repair them), ``reindex``, ``backup`` and ``restore``, the schema
(``db upgrade`` / ``db current``), the records read straight from the database without opening a knowledge base
(``records``: invocations, audit, metrics, so those commands need no embedder or index), and holding the home
for a writing command (``home``: one owner per data home). The only layer besides ``service`` that touches the
adapters; the interfaces call it. Each module imports what it needs when it is imported, so this package imports
nothing."""
