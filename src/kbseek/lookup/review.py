"""Staleness in answers and in the review list: each piece of evidence carries its document's age, and is labelled
``stale`` when past review (never hidden: the agent decides, told so); ``kbseek docs stale`` lists what needs a
review, per owner, with the "outdated" reports agents and people sent (``kbseek.core.staleness`` decides)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from kbseek.core.answer import Answer
from kbseek.core.staleness import Staleness, staleness

MAX_NAMED = 3  # stale documents named in the completeness sentence


def today() -> dt.date:
    """The day staleness is judged on: UTC, so two servers in different zones agree."""
    return dt.datetime.now(dt.UTC).date()


def document_staleness(fields: dict[str, Any], updated_at: str, *, on: dt.date, default_every: int | None) -> Staleness:
    """A document's staleness; one never stored (no ``updated_at``: built in memory) counts from ``on``."""
    return staleness(fields, updated_at or on, today=on, default_every=default_every)


def label_reviews(answer: Answer, *, default_every: int | None, on: dt.date | None = None) -> Answer:
    """``answer`` with every document's age and staleness, and a sentence telling the agent which evidence is past
    its review. Nothing is removed or reordered: stale evidence is still evidence."""
    if not answer.documents:
        return answer
    on = on or today()
    ages = {
        e.document.id: document_staleness(e.document.fields, e.document.updated_at, on=on, default_every=default_every)
        for e in answer.documents
    }
    entries = tuple(replace(e, review=ages[e.document.id]) for e in answer.documents)
    stale = [e for e in entries if e.review is not None and e.review.stale]
    if not stale:
        return replace(answer, documents=entries)
    named = []
    for entry in stale[:MAX_NAMED]:
        review = entry.review
        assert review is not None  # set just above, for every entry
        since = "last reviewed" if review.basis == "last_reviewed" else "last changed"
        owner = f", owner {review.owner}" if review.owner else ""
        named.append(f"{entry.document.path} ({since} {review.since.isoformat()}, {review.age_days} days ago{owner})")
    more = f" and {len(stale) - MAX_NAMED} more" if len(stale) > MAX_NAMED else ""
    note = (
        f"{len(stale)} of {len(entries)} document(s) are past their review date (stale: true): {'; '.join(named)}"
        f"{more}; the text may be outdated, so check it against the live system or its owner before acting on it."
    )
    return replace(answer, documents=entries, completeness=f"{answer.completeness} {note}")


def review_view(review: Staleness | None) -> dict[str, Any]:
    """The staleness fields an evidence entry and each of its pieces carry (empty without a review)."""
    return {} if review is None else {"age_days": review.age_days, "stale": review.stale}


def stale_report(
    documents: Iterable[Any],
    *,
    default_every: int | None,
    outdated: dict[str, list[dict[str, Any]]] | None = None,
    owner: str | None = None,
    on: dt.date | None = None,
    everything: bool = False,
) -> list[dict[str, Any]]:
    """What needs review: documents past their review date, and documents readers reported outdated (``outdated``:
    path -> those reports), oldest first within each owner; ``owner`` keeps one owner's (``-`` for none);
    ``everything`` lists fresh documents too."""
    on = on or today()
    outdated = outdated or {}
    rows = []
    for doc in documents:
        review = document_staleness(doc.frontmatter, doc.updated_at, on=on, default_every=default_every)
        reports = outdated.get(doc.path, [])
        if not (everything or review.stale or reports):
            continue
        if owner is not None and (review.owner or "-") != owner:
            continue
        reasons = ["past review"] if review.stale else []
        reasons += [f"{len(reports)} outdated report(s)"] if reports else []
        rows.append(
            {
                "path": doc.path,
                "title": doc.title,
                **review.view(),
                "outdated_reports": len(reports),
                "last_report": max((r["created_at"] for r in reports), default=None),
                "reasons": reasons,
            }
        )
    rows.sort(key=lambda r: (r["owner"] is None, r["owner"] or "", -r["age_days"], r["path"]))
    return rows


def count_stale(cards: Iterable[Any], *, default_every: int | None, on: dt.date | None = None) -> int:
    """Documents (index cards) past their review date: the ``kbseek_stale_documents`` gauge."""
    on = on or today()
    return sum(document_staleness(c.fields, c.updated_at, on=on, default_every=default_every).stale for c in cards)


def owners(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many listed documents need review, per owner (``-``: no owner named), by name."""
    counts: dict[str, int] = {}
    for row in rows:
        if row["reasons"]:
            counts[row["owner"] or "-"] = counts.get(row["owner"] or "-", 0) + 1
    return dict(sorted(counts.items()))
