"""Evaluation: datasets and golden-case files in one shape (``datasets``, ``cases``), the retrievers a run scores
(``retrievers``: the lookup tool in process; ``replay``: the same tool on recorded lane candidates; ``live``: a
server over HTTP), the runner and its metrics (``runner``), paired comparison (``compare``), reports with charts
(``report``) and the regression gate (``gate``). Configurations are tried on a lookup tool of their own; an
evaluation never changes a knowledge base."""
