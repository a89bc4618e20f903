"""What the runner scores: a retriever gives, for one query and policy, the ranked chunks the policy returns.

Recall policies (``hybrid``, ``dense``, ``lexical``) return the fused recall. Answer policies (``legacy`` and
``answer:<policy>``) return the answer an agent receives from ``lookup_knowledge`` (gated, grouped, capped), read
as chunks: each piece its first chunk, a compact summary its document's first chunk (its excerpt is the start of
the body), a metadata-only entry nothing (it has no content).

An answer policy's chunks carry the level the answer gave each piece (``LabelledChunk``) and the list the
characters a default request (``top_k`` 5, the configured budget) hands the agent (``AnswerChunks.chars``): the
runner measures evidence precision and answer size from them.

Three retrievers, one request shape (:func:`answer_request`): :class:`ToolRetriever` runs the lookup tool in
process; a replay (``kbseek.evaluation.replay``) is the same tool reading recorded lane candidates; a live run
(``kbseek.evaluation.live``) asks a server over HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kbseek.core.answer import Answer
from kbseek.core.models import Chunk
from kbseek.core.modes import ANSWER_PREFIX, is_answer_policy
from kbseek.evaluation.datasets import JudgedChunk, Query
from kbseek.lookup.tool import LookupTool
from kbseek.retrieval.indexes import Indexes

ANSWER_TOP_K = 50  # the most pieces a lookup_knowledge request may ask for
ANSWER_BUDGET_CHARS = 100_000  # the largest budget: the answer is scored, not read


class Retriever(Protocol):
    """``retrieve(query, policy, depth)``: the policy's ranked chunks for ``query``, best first, at most ``depth``."""

    def __call__(self, query: Query, policy: str, depth: int) -> Sequence[JudgedChunk]: ...


def answer_request(query: str, policy: str, depth: int) -> dict[str, Any]:
    """The ``lookup_knowledge`` request an answer policy makes, in process and over HTTP alike.

    >>> answer_request("ERR_TIMEOUT", "answer:hybrid", 100)
    {'query': 'ERR_TIMEOUT', 'policy': 'hybrid', 'top_k': 50, 'budget_chars': 100000}
    """
    return {
        "query": query,
        "policy": policy.removeprefix(ANSWER_PREFIX),
        "top_k": min(depth, ANSWER_TOP_K),
        "budget_chars": ANSWER_BUDGET_CHARS,
    }


@dataclass(frozen=True, slots=True)
class LabelledChunk:
    """A chunk of an answer as the judgment mapper reads it, with the relevance level the answer gave it."""

    source_path: str
    heading_path: tuple[str, ...]
    level: str | None = None


class AnswerChunks(list[LabelledChunk]):
    """An answer's chunks, best first, and ``chars``: what a default request hands the agent (None: unknown)."""

    chars: int | None = None


def default_request(query: str, policy: str) -> dict[str, Any]:
    """The request an agent makes by default: what ``chars`` measures."""
    return {"query": query, "policy": policy.removeprefix(ANSWER_PREFIX)}


def answer_chunks(indexes: Indexes, answer: Answer) -> AnswerChunks:
    """An answer as the ranked chunks it stands for (see the module docstring)."""
    chunks = AnswerChunks()
    for entry in answer.documents:
        if entry.pieces:
            for p in entry.pieces:
                chunk = indexes.chunks[p.chunk_ids[0]]
                chunks.append(LabelledChunk(chunk.source_path, chunk.heading_path, p.level))
        elif entry.form == "compact_summary" and indexes.documents[entry.document.id].chunk_ids:
            chunk = indexes.chunks[indexes.documents[entry.document.id].chunk_ids[0]]
            chunks.append(LabelledChunk(chunk.source_path, chunk.heading_path, entry.level))
    return chunks


class ToolRetriever:
    """The lookup tool in process: recall policies read its recall, answer policies call it (and it records the
    call when it has a recorder, as any call)."""

    def __init__(self, tool: LookupTool) -> None:
        self.tool = tool

    def __call__(self, query: Query, policy: str, depth: int) -> list[Chunk] | AnswerChunks:
        tool = self.tool
        if not is_answer_policy(policy):
            recalled = tool.recall(query.text, top_k=depth, policy=policy, category=None, only=None, config=tool.config)
            return [hit.chunk for hit in recalled.hits]
        chunks = answer_chunks(tool.indexes, tool(answer_request(query.text, policy, depth)).answer)
        chunks.chars = tool(default_request(query.text, policy)).answer.chars
        return chunks
