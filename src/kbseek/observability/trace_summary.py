"""The tool-trace summary a verifier model checks an answer against .

Built from a session's trace: which questions were asked, the strongest relevance level each reached, its
evidence status (complete, partial, none) and sources, which found no confident match, which were asked again.
Bounded: the text never exceeds ``limit`` characters (later calls are summarised by count when it would).
"""

from __future__ import annotations

from typing import Any

from kbseek.core.relevance import STRONG_LEVELS

DEFAULT_LIMIT = 2000
# The evidence score of a session: the mean over its calls of level weight × evidence-status factor, in [0, 1].
# A DEDUPED answer pointed back at evidence already given, so it keeps the weight of that evidence's kind (0.8);
# so does a call whose strongest evidence for its own question is a section given earlier (a pointer it judged
# PRECISE or HIGHLY_RELEVANT), whatever the level of the new pieces beside it.
LEVEL_WEIGHT = {"PRECISE": 1.0, "HIGHLY_RELEVANT": 0.8, "DEDUPED": 0.8, "REFERENCE": 0.4}
STATUS_FACTOR = {"complete": 1.0, "partial": 0.7}


def evidence_score(queries: list[dict[str, Any]]) -> float:
    """How well the session's answers rest on retrieved evidence: 1 = every call precise and complete;
    a call with no confident match, no evidence or an error counts 0.

    >>> evidence_score([{"relevance": "PRECISE", "evidence_status": "complete"},
    ...                 {"relevance": "REFERENCE", "evidence_status": "partial"}])
    0.64
    >>> evidence_score([{"relevance": "REFERENCE", "evidence_status": "complete", "strong_given": True}])
    0.8
    """
    if not queries:
        return 0.0
    total = sum(
        max(LEVEL_WEIGHT.get(q["relevance"], 0.0), LEVEL_WEIGHT["DEDUPED"] if q.get("strong_given") else 0.0)
        * STATUS_FACTOR.get(q["evidence_status"], 0.0)
        for q in queries
    )
    return round(total / len(queries), 4)


def summarize(trace: dict[str, Any], *, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """JSON and text of a session's tool use; ``text`` is at most ``limit`` characters."""
    asked: dict[str, int] = {}
    queries = []
    for call in trace["calls"]:
        key = " ".join(call["query"].split()).casefold()
        asked[key] = asked.get(key, 0) + 1
        status = call["evidence_status"] or ("none" if call["success"] else "failed")
        queries.append(
            {
                "call": call["call"],
                "query": call["query"],
                "success": call["success"],
                "relevance": call["relevance_level"],
                "evidence_status": status,
                "sources": sorted({e["path"] for e in call["evidence"]}),
                "repeated": asked[key] > 1,
                # a section given earlier that this question judged strong evidence (a pointer to a whole document
                # never counts: that section itself may never have been given)
                "strong_given": any(
                    d.get("anchor") is not None and d.get("judged") in STRONG_LEVELS
                    for d in call.get("deduplicated", [])
                ),
            }
        )
    summary = {
        "session_id": trace["session_id"],
        "calls": len(queries),
        "queries": queries,
        "no_confident_match": [q["query"] for q in queries if q["relevance"] == "NO_CONFIDENT_MATCH"],
        "repeated": sorted({q["query"] for q in queries if q["repeated"]}),
        "sources": sorted({s for q in queries for s in q["sources"]}),
        "evidence_score": evidence_score(queries),
    }
    summary["text"] = _text(summary, limit)
    return summary


def _text(summary: dict[str, Any], limit: int) -> str:
    head = (
        f"Session {summary['session_id']}: {summary['calls']} lookup(s); "
        f"{len(summary['no_confident_match'])} without a confident match; "
        f"{len(summary['repeated'])} repeated question(s); evidence score {summary['evidence_score']:.2f}."
    )
    lines = [head]
    tail = "Sources: " + ", ".join(summary["sources"]) if summary["sources"] else "Sources: none"
    budget = limit - len(head) - len(tail) - 2
    for n, q in enumerate(summary["queries"]):
        sources = ", ".join(q["sources"][:3]) + (" …" if len(q["sources"]) > 3 else "")
        line = (
            f"{q['call'] or '-'}. {q['query'][:80]} → {q['relevance']}, evidence {q['evidence_status']}"
            + (f" [{sources}]" if sources else "")
            + (" (repeated)" if q["repeated"] else "")
        )
        if len(line) + 1 > budget:
            lines.append(f"… and {len(summary['queries']) - n} more call(s)")
            break
        lines.append(line)
        budget -= len(line) + 1
    if len(tail) > limit - sum(len(x) + 1 for x in lines):
        tail = tail[: max(0, limit - sum(len(x) + 1 for x in lines) - 1)].rstrip(", ") + "…"
    return "\n".join([*lines, tail])[:limit]
