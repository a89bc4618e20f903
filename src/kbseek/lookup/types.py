"""``lookup_knowledge``'s request and response: what every interface (CLI, REST, MCP) and a library user pass
and get back.

>>> request = LookupRequest.parse({"query": "ERR_TIMEOUT 怎么排查", "top_k": 3})
>>> request.top_k, request.dedup, request.expand
(3, 'section', 'none')
>>> LookupRequest.parse({"query": "x", "top_k": "3"})
Traceback (most recent call last):
...
kbseek.errors.InvalidRequest: invalid lookup_knowledge request: top_k: Input should be a valid integer
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kbseek.core.answer import Answer
from kbseek.core.keywords import KeywordHint
from kbseek.core.modes import Dedup, Expand, Policy, Rewrite
from kbseek.core.relevance import Thresholds
from kbseek.core.results import CategoryFilter, Hit
from kbseek.core.rewrite import Rewrite as RewriteResult
from kbseek.errors import InvalidRequest
from kbseek.lookup.render import response_view
from kbseek.retrieval.recall import MAX_QUERY_CHARS

TOOL_NAME = "lookup_knowledge"
MAX_FILTER_VALUES = 20


class LookupRequest(BaseModel):
    """The tool's parameters; strict, so a wrong type over an API is an error naming the field."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        description="The question, alert text, error code or identifier to look up.",
    )
    session_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        pattern=r"^[\w.:@\-]+$",
        description="The agent's diagnosis session; enables dedup across calls.",
    )
    category: str | None = Field(None, min_length=1, max_length=200, description="Only this category.")
    filters: dict[str, str | list[str]] | None = Field(
        None, description='Frontmatter fields that must match, e.g. {"service": "payment", "tags": ["db"]}.'
    )
    top_k: int = Field(5, ge=1, le=50, description="At most this many evidence pieces.")
    policy: Policy | None = Field(None, description="Retrieval policy; default from the settings (hybrid).")
    expand: Expand = Field("none", description="Give each hit's whole section, or its neighbouring chunks.")
    section: str | None = Field(
        None,
        min_length=1,
        max_length=600,
        description="One section: 'path/to/doc.md#anchor' or '#heading path' within the best document for the query.",
    )
    dedup: Dedup = Field("section", description="What a session remembers as given.")
    budget_chars: int | None = Field(None, ge=200, le=100_000, description="Total characters of evidence.")
    rewrite: Rewrite | None = Field(None, description="Rule-based query rewriting.")

    @classmethod
    def parse(cls, data: dict[str, Any]) -> LookupRequest:
        try:
            request = cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
            raise InvalidRequest(f"invalid lookup_knowledge request: {problems}") from None
        if request.filters:
            for name, value in request.filters.items():
                values = value if isinstance(value, list) else [value]
                if not name or len(name) > 100 or len(values) > MAX_FILTER_VALUES or any(len(v) > 200 for v in values):
                    raise InvalidRequest(
                        f"filters.{name[:100]}: a field name up to 100 characters and up to "
                        f"{MAX_FILTER_VALUES} values of up to 200 characters"
                    )
        if not request.query.strip():
            raise InvalidRequest("query: is blank")
        return request


@dataclass(frozen=True, slots=True, kw_only=True)
class LookupResponse:
    """One answer of ``lookup_knowledge``: the evidence (``answer``) and how it was reached.

    :meth:`to_dict` is the JSON every interface sends (``schemas/lookup-answer.schema.json``)."""

    query: str
    request_id: str
    policy: str
    session_id: str | None
    call: int | None  # the call's number within its session
    hint: KeywordHint
    filter: CategoryFilter
    filters: dict[str, Any]
    answer: Answer
    thresholds: Thresholds
    index_version: str
    embedding_model: str | None
    timings_ms: dict[str, float]
    notes: tuple[str, ...] = ()
    rewrite: RewriteResult | None = None
    legacy: dict[str, Any] = field(default_factory=dict)  # the matrix row taken (policy legacy)
    ranked: tuple[Hit, ...] = ()  # the fused recall before levels, for explain views and traces

    def to_dict(self) -> dict[str, Any]:
        """The response as plain JSON: what ``POST /api/lookup`` and ``kbseek lookup --json`` give."""
        return response_view(self)
