"""A floor under the lexical gate's cut, placed on this knowledge base by questions no knowledge base answers.

The lexical gate's weights and cut were fitted across knowledge bases of five to twenty thousand sections, and
where a question falls on its probability scale depends on the corpus: over a large docs tree BM25 always finds
some section holding a third of an off-topic question's words, so the bundled cut, right for a handful of
runbooks, answered four in five off-topic questions there. With ``off_topic_floor`` set, the tool asks the bundled
bank of off-topic questions (``banks/off-topic.txt``) of the knowledge base and raises the cut to the bank's
``quantile`` probability when that is higher: at 0.5, at least half of the bank is refused, on any corpus. It is
off by default: on the test splits it refused more answerable questions than it gained unanswerable ones
(``docs/evaluation.md``). The bank is asked again only when the number of chunks has moved by a tenth (the floor
follows the corpus's statistics, which move slowly), so a stream of small writes does not re-ask it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

BANK = Path(__file__).with_name("banks") / "off-topic.txt"
RECOMPUTE_AT = 0.1  # the chunk count's relative change that asks the bank again


def off_topic_bank() -> list[str]:
    lines = BANK.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


class OffTopicFloor:
    """The floor of one knowledge base's indexes, remembered with the chunk count it was placed at."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._placed: tuple[int, float, float] | None = None  # (chunks, quantile, floor)

    def floor(self, chunks: int, quantile: float, probability: Callable[[str], float]) -> float:
        """The bank's ``quantile`` probability under ``probability`` (the lexical gate over this knowledge base)."""
        with self._lock:
            placed = self._placed
            if placed is not None and placed[1] == quantile and abs(chunks - placed[0]) <= RECOMPUTE_AT * placed[0]:
                return placed[2]
            value = float(np.quantile([probability(q) for q in off_topic_bank()], quantile))
            self._placed = (chunks, quantile, value)
            return value
