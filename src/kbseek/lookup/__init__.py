"""The agent tool ``lookup_knowledge``: its request and response types (``types``), the query-time configuration
(``config``), the tool that turns a recall into levelled, grouped, deduplicated evidence in named steps (``tool``,
``answering``), the invocation records it writes (``records``), its function-calling schema (``schema``) and the
renderings an agent or a person reads (``render``, ``views``)."""

from kbseek.lookup.types import LookupRequest, LookupResponse

__all__ = ["LookupRequest", "LookupResponse"]
