"""An optional reranker endpoint, for a team that runs a cross-encoder (off by default: no ``reranker_url``).

Two request shapes cover the servers in use:

* ``tei``: Hugging Face text-embeddings-inference ``POST /rerank`` with ``{"query", "texts"}``, answering
  ``[{"index", "score"}, ...]``.
* ``cohere``: ``POST /v1/rerank`` with ``{"model", "query", "documents", "top_n"}``, answering
  ``{"results": [{"index", "relevance_score"}, ...]}`` (Cohere, Jina, vLLM, Infinity, LocalAI).

Either reply shape is read whichever shape was sent. A failure fails open: the caller keeps its own ranking.
After a failure the endpoint rests ``retry_s`` seconds, so a dead endpoint costs one timeout, not one per lookup.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kbseek.adapters.http_json import HttpJsonError, post_json
from kbseek.core.modes import RERANK_APIS
from kbseek.errors import ConfigError, RerankError
from kbseek.observability.redact import mask_url

PASSAGE_CHARS = 2000  # a cross-encoder reads ~512 tokens; more is sent for nothing


class HttpReranker:
    """Scores passages through a ``/rerank`` endpoint; see the module docstring for the shapes."""

    def __init__(
        self,
        *,
        url: str,
        api: str = "tei",
        model: str = "",
        api_key: str = "",
        timeout: float = 2.0,
        depth: int = 20,
        retry_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if api not in RERANK_APIS:
            raise ConfigError(f"reranker_api {api!r} is not one of {', '.join(RERANK_APIS)}")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"reranker_url {mask_url(url)!r} is not an http(s) URL",
                hint="the endpoint itself, e.g. http://127.0.0.1:8080/rerank",
            )
        if api == "cohere" and not model:
            raise ConfigError("reranker_api 'cohere' needs reranker_model (the model the endpoint serves)")
        self.url, self.api, self.model, self.api_key = url, api, model, api_key
        self.timeout, self.depth, self.retry_s, self.clock = timeout, depth, retry_s, clock
        self.name = mask_url(url)
        self._lock = threading.Lock()
        self._failed: tuple[float, str] | None = None  # when the last call failed, and why

    def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        with self._lock:
            if self._failed is not None:
                at, why = self._failed
                waited = self.clock() - at
                if waited < self.retry_s:
                    raise RerankError(f"reranker {self.name} rests {self.retry_s - waited:.0f} s more after: {why}")
        texts = [p[:PASSAGE_CHARS] for p in passages]
        try:
            scores = _scores(self._post(query, texts), len(texts))
        except RerankError as exc:
            with self._lock:
                self._failed = (self.clock(), exc.message)
            raise
        with self._lock:
            self._failed = None
        return scores

    def _post(self, query: str, texts: list[str]) -> Any:
        if self.api == "tei":
            payload: dict[str, Any] = {"query": query, "texts": texts, "truncate": True}
        else:
            payload = {"model": self.model, "query": query, "documents": texts, "top_n": len(texts)}
        try:
            return post_json(self.url, payload, api_key=self.api_key, timeout=self.timeout)
        except HttpJsonError as exc:
            raise RerankError(f"reranker {exc}") from exc


def _scores(reply: Any, count: int) -> list[float]:
    """One finite score per passage from either reply shape; a passage the reply leaves out scores one below the
    lowest given (after every scored one, in the caller's order)."""
    rows = reply.get("results") if isinstance(reply, dict) else reply
    if not isinstance(rows, list):
        raise RerankError("reranker reply is neither a list nor an object with 'results'")
    scores = [-math.inf] * count
    for row in rows:
        index = row.get("index") if isinstance(row, dict) else None
        score = row.get("score", row.get("relevance_score")) if isinstance(row, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise RerankError(f"reranker reply names passage {index!r}; {count} were sent")
        if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
            raise RerankError(f"reranker reply gives passage {index} the score {score!r}, not a finite number")
        scores[index] = float(score)
    given = [s for s in scores if s != -math.inf]
    if not given:
        raise RerankError("reranker reply scores no passage")
    floor = min(given) - 1.0
    return [s if s != -math.inf else floor for s in scores]
