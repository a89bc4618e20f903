"""Live acceptance: the same evaluation as offline, against a running server's endpoints.

Recall policies (``hybrid``, ``dense``, ``lexical``) read ``GET /api/search/similar``; answer policies
(``answer:<policy>``, ``legacy``) read ``POST /api/lookup``, so what is scored is what an agent received.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from kbseek.core.modes import is_answer_policy
from kbseek.errors import LiveEvalError
from kbseek.evaluation.datasets import Dataset, Query
from kbseek.evaluation.retrievers import (
    AnswerChunks,
    LabelledChunk,
    answer_request,
    default_request,
)
from kbseek.evaluation.runner import metric_names, report, run_policy
from kbseek.settings import Settings

SEARCH_LIMIT = 100  # the API's top_k bound


@dataclass(frozen=True, slots=True)
class RemoteChunk:
    """What the judgment mapper needs of a chunk the server returned."""

    source_path: str
    heading_path: tuple[str, ...]
    level: str | None = None


class HttpRetriever:
    def __init__(self, base_url: str, *, api_key: str = "", timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)
        self._first_chunk: dict[str, RemoteChunk | None] = {}

    def close(self) -> None:
        self.client.close()

    def _call(self, method: str, url: str, **kwargs: Any) -> Any:
        try:
            response = self.client.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            raise LiveEvalError(
                f"{self.client.base_url}{url}: {exc}", hint="is 'kbseek serve' running there?"
            ) from None
        if response.status_code != 200:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:300]
            raise LiveEvalError(f"{method} {url} answered {response.status_code}: {message}")
        return response.json()

    def ready(self) -> dict[str, Any]:
        return self._call("GET", "/ready")

    def __call__(self, query: Query, policy: str, depth: int) -> list[RemoteChunk] | AnswerChunks:
        if not is_answer_policy(policy):
            data = self._call(
                "GET",
                "/api/search/similar",
                params={"query": query.text, "top_k": min(depth, SEARCH_LIMIT), "policy": policy},
            )
            return [RemoteChunk(h["path"], tuple(h["heading_path"])) for h in data["hits"]]
        data = self._call("POST", "/api/lookup", json=answer_request(query.text, policy, depth))
        chunks = AnswerChunks()
        for entry in data["documents"]:
            if entry["items"]:
                chunks += [
                    LabelledChunk(entry["source_path"], tuple(p["heading_path"]), p.get("relevance"))
                    for p in entry["items"]
                ]
            elif entry["form"] == "compact_summary" and (first := self.first_chunk(entry["source_path"])):
                # as offline: a compact summary stands for its document's first chunk
                chunks.append(LabelledChunk(first.source_path, first.heading_path, entry.get("relevance")))
        chunks.chars = self._call("POST", "/api/lookup", json=default_request(query.text, policy))["budget"]["chars"]
        return chunks

    def first_chunk(self, path: str) -> RemoteChunk | None:
        if path not in self._first_chunk:
            chunks = self._call("GET", f"/api/documents/{path}")["chunks"]
            self._first_chunk[path] = RemoteChunk(path, tuple(chunks[0]["heading_path"])) if chunks else None
        return self._first_chunk[path]


def evaluate_live(
    dataset: Dataset,
    base_url: str,
    *,
    policies: list[str],
    ks: tuple[int, ...],
    depth: int,
    api_key: str = "",
    base: Settings | None = None,
) -> dict[str, Any]:
    """Every policy over the dataset against the server at ``base_url``; the same report as ``evaluate``."""
    retriever = HttpRetriever(base_url, api_key=api_key)
    try:
        started = time.perf_counter()
        readiness = retriever.ready()
        if not readiness.get("ready"):
            raise LiveEvalError(f"{base_url} is not ready: {readiness}")
        names = metric_names(tuple(sorted(set(ks))))
        runs = [
            run_policy(retriever, dataset, policy=p, depth=depth, names=names, name=p, overrides={}) for p in policies
        ]
        result = report(
            dataset,
            runs,
            ks=ks,
            depth=depth,
            base=base or Settings(),
            timings={"live": round(time.perf_counter() - started, 3)},
        )
        result["base_url"] = base_url
        return result
    finally:
        retriever.close()
