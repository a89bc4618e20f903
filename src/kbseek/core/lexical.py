"""BM25 over analysed chunk tokens: our own index, because it updates in place.

Scoring is Lucene's BM25 (as bm25s ``method="lucene"``): ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``
and ``tf / (tf + k1 * (1 - b + b * len / avgdl))``, summed over the query's tokens (repeats count).
Postings are per-term ``array('i')`` pairs (slot, tf), appended on add and viewed as numpy arrays
without copying at query time; a removal only marks its slot dead and corrects document
frequencies, and dead slots are compacted away once they reach a third of the index. bm25s builds a
static sparse matrix and must be rebuilt on every change; ``docs/benchmarks.md`` compares them.
"""

from __future__ import annotations

import math
import sys
import threading
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class LexicalHit:
    chunk_id: str
    score: float


class BM25Index:
    """An incremental BM25 index of chunks, each with a group (its category) for filtering.

    >>> index = BM25Index()
    >>> index.add("c1", ["err_timeout", "err", "timeout"], group="api")
    >>> index.add("c2", ["disk", "full"], group="ops")
    >>> [hit.chunk_id for hit in index.search(["timeout"], k=5)]
    ['c1']
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1, self.b = k1, b
        self._lock = threading.RLock()
        self._clear()

    def _clear(self) -> None:
        self._ids: list[str | None] = []
        self._slot: dict[str, int] = {}
        self._terms: list[tuple[str, ...]] = []
        self._lengths = array("f")
        self._groups = array("i")
        self._alive = array("b")
        self._group_codes: dict[str, int] = {}
        self._postings: dict[str, tuple[array, array]] = {}
        self._df: Counter[str] = Counter()
        self._total_length = 0.0
        self._dead = 0

    def __len__(self) -> int:
        return len(self._slot)

    def add(self, chunk_id: str, tokens: Sequence[str], *, group: str = "") -> None:
        """Index (or re-index) one chunk."""
        with self._lock:
            if chunk_id in self._slot:
                self.remove([chunk_id])
            slot = len(self._ids)
            # one string object per distinct term, whatever list the tokens came in (a JSON-decoded token list
            # holds its own copy of every word): the per-chunk term tuples then hold pointers, not strings
            counts = Counter(map(sys.intern, tokens))
            self._ids.append(chunk_id)
            self._slot[chunk_id] = slot
            self._terms.append(tuple(counts))
            self._lengths.append(float(len(tokens)))
            self._groups.append(self._group_codes.setdefault(group, len(self._group_codes)))
            self._alive.append(1)
            self._total_length += len(tokens)
            for term, tf in counts.items():
                postings = self._postings.get(term)
                if postings is None:
                    postings = self._postings[term] = (array("i"), array("i"))
                postings[0].append(slot)
                postings[1].append(tf)
                self._df[term] += 1

    def remove(self, chunk_ids: Iterable[str]) -> int:
        """Forget chunks; unknown ids are ignored. Returns how many were removed."""
        removed = 0
        with self._lock:
            for chunk_id in chunk_ids:
                slot = self._slot.pop(chunk_id, None)
                if slot is None:
                    continue
                self._alive[slot] = 0
                self._ids[slot] = None
                self._total_length -= self._lengths[slot]
                for term in self._terms[slot]:
                    self._df[term] -= 1
                    if not self._df[term]:
                        del self._df[term]
                        del self._postings[term]
                self._terms[slot] = ()
                self._dead += 1
                removed += 1
            if self._dead > 1000 and self._dead * 3 > len(self._ids):
                self._compact()
        return removed

    def _compact(self) -> None:
        survivors = [(cid, self._slot[cid]) for cid in self._ids if cid is not None]
        old_terms, old_lengths, old_groups = self._terms, self._lengths, self._groups
        postings = {t: dict(zip(p[0], p[1])) for t, p in self._postings.items()}
        codes = dict(self._group_codes)
        self._clear()
        self._group_codes = codes
        names = {code: name for name, code in codes.items()}
        for chunk_id, old in survivors:
            tokens = [t for t in old_terms[old] for _ in range(postings[t][old])]
            self.add(chunk_id, tokens, group=names[old_groups[old]])
        del old_lengths

    def search(
        self,
        tokens: Sequence[str],
        *,
        k: int = 10,
        groups: Iterable[str] | None = None,
        only: Iterable[str] | None = None,
        extra: Mapping[str, float] | None = None,
    ) -> list[LexicalHit]:
        """The ``k`` best chunks with a positive score, best first; ``groups`` and ``only`` (chunk ids)
        restrict them, ``extra`` adds terms at a weight of their own (``scores``)."""
        with self._lock:
            scores = self.scores(tokens, extra=extra)
            if scores is None:
                return []
            if only is not None:
                mask = np.zeros(len(scores), dtype=bool)
                mask[[self._slot[c] for c in only if c in self._slot]] = True
                scores = np.where(mask, scores, 0.0)
            if groups is not None:
                codes = [self._group_codes[g] for g in groups if g in self._group_codes]
                groups_array = np.frombuffer(self._groups, dtype=np.int32)
                scores = np.where(np.isin(groups_array, codes), scores, 0.0)
            candidates = np.flatnonzero(scores > 0)
            if candidates.size > k:
                top = np.argpartition(-scores[candidates], k - 1)[:k]
                candidates = candidates[top]
            order = sorted(candidates.tolist(), key=lambda s: (-scores[s], self._ids[s]))
            return [LexicalHit(self._ids[s], float(scores[s])) for s in order]  # type: ignore[arg-type]

    def scores(self, tokens: Sequence[str], *, extra: Mapping[str, float] | None = None) -> np.ndarray | None:
        """BM25 score of every slot (dead slots score 0), or ``None`` when nothing matches. ``extra`` terms count
        their weight each (a query token counts 1 per repeat): the expansions of ``core.lexicon``."""
        with self._lock:
            alive = len(self._slot)
            if not alive or not tokens:
                return None
            avgdl = self._total_length / alive or 1.0
            lengths = np.frombuffer(self._lengths, dtype=np.float32)
            norm = None
            scores = np.zeros(len(self._ids), dtype=np.float32)
            matched = False
            weights: dict[str, float] = dict(Counter(tokens))
            for term, weight in (extra or {}).items():
                weights.setdefault(term, weight)
            for term, repeats in weights.items():
                postings = self._postings.get(term)
                if postings is None:
                    continue
                if norm is None:
                    norm = self.k1 * (1 - self.b + self.b * lengths / avgdl)
                matched = True
                df = self._df[term]
                idf = math.log(1 + (alive - df + 0.5) / (df + 0.5))
                slots = np.frombuffer(postings[0], dtype=np.int32)
                tf = np.frombuffer(postings[1], dtype=np.int32).astype(np.float32)
                scores[slots] += repeats * idf * tf / (tf + norm[slots])
            if not matched:
                return None
            scores *= np.frombuffer(self._alive, dtype=np.int8)
            return scores

    def idf(self, term: str) -> float:
        """Lucene's IDF of a term over the live chunks (a term never seen weighs as the rarest).

        >>> index = BM25Index()
        >>> index.add("c1", ["kafka"]); index.add("c2", ["disk"])
        >>> index.idf("kafka") < index.idf("unseen")
        True
        """
        alive = max(1, len(self._slot))
        df = self._df.get(term, 0)
        return math.log(1 + (alive - df + 0.5) / (df + 0.5))

    def knows(self, term: str) -> bool:
        """Whether some live chunk holds the term."""
        return term in self._df

    def coverage(self, tokens: Sequence[str], chunk_ids: Iterable[str]) -> dict[str, float]:
        """Share of the query's IDF weight each chunk contains, in [0, 1].

        A query word the index has never seen weighs as much as the rarest word: asking for
        something the knowledge base does not hold lowers every chunk's coverage.

        >>> index = BM25Index()
        >>> index.add("c1", ["kafka", "lag"]); index.add("c2", ["disk", "full"])
        >>> index.coverage(["kafka", "lag"], ["c1", "c2"])
        {'c1': 1.0, 'c2': 0.0}
        """
        with self._lock:
            alive = max(1, len(self._slot))
            weights = {
                t: math.log(1 + (alive - self._df.get(t, 0) + 0.5) / (self._df.get(t, 0) + 0.5))
                for t in dict.fromkeys(tokens)  # in query order: a set's order would vary the sums between processes
            }
            total = sum(weights.values()) or 1.0
            out = {}
            for chunk_id in chunk_ids:
                slot = self._slot.get(chunk_id)
                terms = set(self._terms[slot]) if slot is not None else set()
                out[chunk_id] = round(sum(w for t, w in weights.items() if t in terms) / total, 4)
            return out

    def order_within(
        self, tokens: Sequence[str], chunk_ids: Sequence[str], *, scores: np.ndarray | None = None
    ) -> list[str]:
        """``chunk_ids`` by their BM25 score for ``tokens``, best first (given order breaks ties).

        Pass ``scores`` (from ``scores(tokens)``) when ordering several documents for one query:
        computing them is the cost."""
        if scores is None:
            scores = self.scores(tokens)
        if scores is None:
            return list(chunk_ids)
        position = {cid: i for i, cid in enumerate(chunk_ids)}
        slot = self._slot
        return sorted(chunk_ids, key=lambda c: (-float(scores[slot[c]]) if c in slot else 0.0, position[c]))
