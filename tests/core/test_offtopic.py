"""The off-topic floor under the lexical gate's cut (``kbseek.lookup.offtopic``)."""

from __future__ import annotations

from kbseek.lookup.offtopic import OffTopicFloor, off_topic_bank


def test_the_floor_is_the_bank_s_quantile_and_is_placed_again_only_when_the_corpus_moves():
    bank = off_topic_bank()
    assert len(bank) >= 40 and all(not q.startswith("#") for q in bank)
    asked: list[str] = []
    probabilities = {q: i / len(bank) for i, q in enumerate(bank)}

    def probability(question: str) -> float:
        asked.append(question)
        return probabilities[question]

    floor = OffTopicFloor()
    median = floor.floor(1000, 0.5, probability)
    assert abs(median - 0.5) < 0.05 and len(asked) == len(bank)
    assert floor.floor(1090, 0.5, probability) == median and len(asked) == len(bank)  # a tenth or less: kept
    assert floor.floor(1200, 0.5, probability) == median and len(asked) == 2 * len(bank)  # moved: asked again
    assert floor.floor(1200, 0.9, probability) > median  # another quantile is another floor
