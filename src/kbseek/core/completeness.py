"""The completeness sentence of an answer: how far an agent may trust it, what limited it and how to get more,
and which evidence given earlier in the session is this question's strongest.

Pure: it reads the pieces, pointers and budget that ``core.answer.assemble`` built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbseek.core.relevance import LEVEL_ORDER, PRECISE, REFERENCE, strongest  # noqa: F401 (PRECISE: the doctests)

if TYPE_CHECKING:
    from kbseek.core.answer import Budget, Deduplicated, DocumentEvidence

MAX_NAMED_ANCHORS = 3  # per capped document in the completeness sentence


def strongest_given(entries: list[DocumentEvidence], deduplicated: list[Deduplicated]) -> Deduplicated | None:
    """The piece given earlier in the session that is this question's strongest evidence: judged strong, and
    stronger than all the evidence handed over now (``None`` when there is no such piece)."""
    # a document-level pointer (dedup by document, a compact summary) does not say this section was given
    given = min((d for d in deduplicated if d.anchor is not None), key=lambda d: LEVEL_ORDER[d.judged], default=None)
    if given is None or given.judged == REFERENCE:
        return None
    if entries and LEVEL_ORDER[given.judged] >= LEVEL_ORDER[strongest([e.level for e in entries])]:
        return None
    return given


def completeness(
    entries: list[DocumentEvidence], deduplicated: list[Deduplicated], budget: Budget, truncated: bool
) -> str:
    """One sentence telling the agent how far to trust this answer, what limited it and how to get more.

    What limited it is named as it was: the character budget (pieces left out or shortened: the evidence is
    ``partial``), the per-document cap (further matching pieces of a document already given, named by
    ``path#anchor`` so one ``section`` call fetches them), or nothing. The cap alone does not make the evidence
    partial: every matching document is in the answer with its best pieces, and the rest is named here. A
    session's follow-up whose strongest evidence was given in an earlier call is told which piece that is: its
    pointer keeps the level this question gave it, so a follow-up is not read as weakly supported.

    >>> from kbseek.core.answer import Budget, Deduplicated
    >>> given = Deduplicated("d1", "ops/kafka.md", "Kafka", "lag", "Kafka > 确认积压", 1, "given", PRECISE)
    >>> for part in completeness([], [given], Budget(6000, 3), False).split("; "):
    ...     print(part)
    1 item(s) already given earlier in this session (call 1)
    not repeated. The strongest evidence for this question (PRECISE) is one of them: Kafka > 确认积压 (call 1).
    >>> b = Budget(6000, 3)
    >>> b.cap("ops/cpu.md", "steps"); b.cap("ops/cpu.md", "")
    >>> for part in completeness([], [], b, False).split("; "):  # nothing given: no confident match
    ...     print(part)
    No confident match in the knowledge base: do not cite it for this question
    rephrase with an error code, alert name or component, or treat the topic as not documented.
    """
    if not entries and not deduplicated:
        return (
            "No confident match in the knowledge base: do not cite it for this question; rephrase with an "
            "error code, alert name or component, or treat the topic as not documented."
        )
    notes = []
    best = strongest([e.level for e in entries]) if entries else None
    given = strongest_given(entries, deduplicated)
    if best is not None:
        notes.append(f"{len(entries)} document(s); strongest evidence {best}.")
        if best == REFERENCE and given is None:
            notes.append("Only reference-level evidence: related, not a confirmed answer.")
    if deduplicated:
        calls = sorted({d.first_call for d in deduplicated})
        notes.append(
            f"{len(deduplicated)} item(s) already given earlier in this session (call "
            f"{', '.join(map(str, calls))}); not repeated."
        )
    if given is not None:
        notes.append(
            f"The strongest evidence for this question ({given.judged}) is one of them: {given.heading} "
            f"(call {given.first_call})."
        )
    if budget.omitted or truncated:
        cut_note = []
        if budget.omitted:
            cut_note.append(f"{budget.omitted} item(s) left out")
        if truncated:
            cut_note.append("pieces shortened")
        notes.append(
            f"Cut to the {budget.limit}-character budget ({', '.join(cut_note)}); ask for a document "
            "section (section=PATH#ANCHOR), a larger budget_chars or expand=section for the full text."
        )
    if budget.capped:
        named = []
        for path, anchors in budget.capped.items():
            unique = list(dict.fromkeys(anchors))
            shown = ", ".join(f"{path}#{a}" if a else path for a in unique[:MAX_NAMED_ANCHORS])
            more = f" and {len(unique) - MAX_NAMED_ANCHORS} more" if len(unique) > MAX_NAMED_ANCHORS else ""
            named.append(shown + more)
        notes.append(
            f"At most {budget.per_document} piece(s) per document: {budget.capped_pieces} more matching "
            f"piece(s) not shown ({'; '.join(named)}); get one with section=PATH#ANCHOR."
        )
    sections = sum(1 for e in entries for s in e.document.outline) - sum(len(e.pieces) for e in entries)
    if sections > 0 and not (budget.omitted or truncated or budget.capped):
        notes.append("Other sections of these documents are listed in available_sections.")
    if not (budget.omitted or truncated or budget.capped) and entries:
        notes.append("Nothing was held back by the budget or the per-document cap.")
    return " ".join(notes)
