"""kbseek: knowledge retrieval for AI agents that diagnose production incidents.

The public API a library user can live on::

    from kbseek import KnowledgeBase, Settings

    with KnowledgeBase.open(Settings(home="/srv/kb")) as kb:
        kb.ingest([Path("runbooks")])                      # -> IngestReport (one FileReport per file)
        answer = kb.lookup_knowledge({"query": "ERR_TIMEOUT 支付超时", "session_id": "diag-1"})
        answer.to_dict()                                   # -> the JSON an agent reads (LookupResponse)

Names are loaded lazily, so ``import kbseek`` (and ``import kbseek.core``) stays free of the database, model and
web stacks until one is used. Every error kbseek raises on purpose is a ``KbseekError`` with a stable ``code``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "KnowledgeBase": "kbseek.service",
    "Settings": "kbseek.settings",
    "LookupRequest": "kbseek.lookup.types",
    "LookupResponse": "kbseek.lookup.types",
    "RecallResult": "kbseek.core.results",
    "SearchResult": "kbseek.core.results",
    "LookupResult": "kbseek.core.results",
    "IngestReport": "kbseek.home.ingest",
    "FileReport": "kbseek.home.ingest",
    **{
        name: "kbseek.errors"
        for name in (
            "KbseekError",
            "ConfigError",
            "DocumentError",
            "FrontmatterError",
            "TooLargeError",
            "UnsafePathError",
            "NotFoundError",
            "StorageError",
            "StorageFullError",
            "WriteConflictError",
            "InvalidRequest",
            "QueryError",
            "EmbeddingError",
            "HomeInUse",
            "ReadOnlyError",
            "SchemaNotCurrent",
            "DatasetError",
        )
    },
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads each name on first use
    from kbseek.core.results import LookupResult, RecallResult, SearchResult
    from kbseek.errors import (
        ConfigError,
        DatasetError,
        DocumentError,
        EmbeddingError,
        FrontmatterError,
        HomeInUse,
        InvalidRequest,
        KbseekError,
        NotFoundError,
        QueryError,
        ReadOnlyError,
        SchemaNotCurrent,
        StorageError,
        StorageFullError,
        TooLargeError,
        UnsafePathError,
        WriteConflictError,
    )
    from kbseek.home.ingest import FileReport, IngestReport
    from kbseek.lookup.types import LookupRequest, LookupResponse
    from kbseek.service import KnowledgeBase
    from kbseek.settings import Settings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kbseek' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
