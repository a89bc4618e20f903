"""kbseek: knowledge retrieval for AI agents that diagnose production incidents.

The public API (``from kbseek import KnowledgeBase, Settings``) is loaded lazily, so
``import kbseek.core`` stays free of the database and vector-store stacks.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KbseekError", "KnowledgeBase", "LookupResult", "SearchResult", "Settings"]
__version__ = "0.1.0"

_EXPORTS = {
    "KnowledgeBase": "kbseek.service",
    "Settings": "kbseek.settings",
    "KbseekError": "kbseek.errors",
    "LookupResult": "kbseek.core.results",
    "SearchResult": "kbseek.core.results",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kbseek' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
