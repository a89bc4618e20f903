"""What each in-process structure of a knowledge base holds, in MiB, for ``scaling.py``.

Sizes are deep sizes of the object graph (``sys.getsizeof`` of every object reached through ``gc.get_referents``,
numpy arrays and ``array.array`` with their buffers), each object counted once: the structures are walked in the
order below, so an object two of them share (a chunk both index copies hold, an interned term) counts under the
first. Classes, modules and functions are not walked (they are the program, not the data). RSS is also given
by the caller (``rss_mib``), since allocator slack and freed-but-kept arenas are invisible to a graph walk.
"""

from __future__ import annotations

import gc
import os
import sys
import types
from typing import Any

import numpy as np

SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType, types.MethodType)


def deep_size(root: Any, seen: set[int]) -> int:
    total, stack = 0, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, SKIP):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, np.ndarray) and obj.base is not None:  # a view: its buffer belongs to the base
            stack.append(obj.base)
            continue
        stack.extend(gc.get_referents(obj))
    return total


def structure_sizes(kb: Any, *, vectors: bool = True) -> dict[str, float]:
    """MiB per structure: the vector store answering queries (when in process), then the active copy's BM25,
    analyser, L0 index, chunks and document cards, then what the standby copy adds."""
    indexes = kb.indexes
    copies = indexes._copies  # both copies of the lexical indexes (``rwlock.TwoCopies``)
    active = copies.active
    standby = next(c for c in copies.both if c is not active)
    parts: list[tuple[str, Any]] = []
    if vectors and indexes.dense is not None:
        parts.append(("vector_store", indexes.dense.query_store))
    parts += [
        ("bm25_postings", active.bm25),
        ("analyser_and_jieba_dictionary", active.analyzer),
        ("l0_keywords", active.keywords),
        ("chunks", active.chunks),
        ("document_cards", active.documents),
        ("standby_copy_extra", standby),
    ]
    seen: set[int] = set()
    gc.collect()
    sizes = {name: round(deep_size(obj, seen) / 2**20, 1) for name, obj in parts}
    sizes["stem_cache_words"] = len(active.analyzer._stem_cache)
    return sizes


def rss_mib(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def group_rss_mib(pgid: int) -> float:
    """The RSS of every process in a process group (a Milvus server: the wrapper and its binary)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                total += rss_mib(entry)
        except (OSError, IndexError, ValueError):
            continue
    return round(total, 1)
