"""What was asked and what was changed: ``kbseek trace`` and ``verify-summary`` (one session's lookups), ``audit``
(the writes), ``invocations list|prune`` and ``metrics`` (every recorded call).

``audit``, ``invocations`` and ``metrics`` read the records straight from the database (``kbseek.maintenance.records``:
no embedder, no vector store, so they are quick on a busy data home); ``trace`` and ``verify-summary`` open the
knowledge base read-only for the documents' paths. All read beside the data home's owner, except ``invocations
prune``, which holds the home or refuses, naming its owner.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kbseek.core.relevance import LEVELS as ANSWER_LEVELS
from kbseek.core.relevance import NO_CONFIDENT_MATCH
from kbseek.core.spans import parse_since
from kbseek.errors import InvalidOption
from kbseek.interfaces.cli.common import HELP, JsonFlag, emit, exit_on_error, load_settings, open_reading, owning, say
from kbseek.observability.trace_summary import summarize
from kbseek.settings import Settings

if TYPE_CHECKING:
    from kbseek.maintenance.records import Records

invocations_app = typer.Typer(help="List and prune recorded lookup_knowledge calls.", **HELP)
LEVELS = (*ANSWER_LEVELS, NO_CONFIDENT_MATCH, "ERROR")
AUDIT_ACTIONS = ("added", "updated", "deleted", "rejected")


def _records(settings: Settings, *, writable: bool = False) -> Records:
    from kbseek.maintenance.records import Records  # imported here: start-up cost (see common)

    return Records.open(settings, writable=writable)


def _since(text: str | None) -> dt.datetime | None:
    return parse_since(text, dt.datetime.now(dt.UTC)) if text else None


def trace(
    session_id: Annotated[str, typer.Argument(help="The session id the agent passed to lookup_knowledge.")],
    as_json: JsonFlag = False,
) -> None:
    """A session's diagnosis trace: its lookups in order, their evidence, what was deduplicated, documents seen."""
    with exit_on_error(as_json):
        with open_reading(vectors=False) as kb:
            data = kb.trace(session_id)
        emit(data, as_json, _print_trace)


def _print_trace(data: dict[str, Any]) -> None:
    say(
        f"[bold]session {data['session_id']}[/bold]: {len(data['calls'])} call(s), "
        f"{len(data['documents_seen'])} document(s) seen"
    )
    for c in data["calls"]:
        state = c["relevance_level"] if c["success"] else f"FAILED: {c['error']}"
        say(
            f"{c['call'] or '-':>3}. {c['query'][:70]}  → {state} ({c['evidence_status'] or '-'}, "
            f"{c['duration_ms']:.0f} ms)",
            markup=False,
        )
        for e in c["evidence"]:
            say(f"       {e['relevance']:<15} {e['path']}  {', '.join(e['anchors'])}", markup=False)
        for d in c["deduplicated"]:
            say(
                f"       DEDUPED         {d['path']}#{d['anchor'] or ''} (given in call {d['first_call']})",
                markup=False,
            )
        for f in c.get("feedback", ()):
            note = f": {f['note']}" if f["note"] else ""
            meant = ", ".join(f["chunk_ids"]) or "the answer"
            say(f"       FEEDBACK        {f['verdict']} {meant}{note}", markup=False)
    say(
        "documents seen: " + ", ".join(f"{d['path']} (call {d['first_call']})" for d in data["documents_seen"]),
        markup=False,
    )


def verify_summary(
    session_id: Annotated[str, typer.Argument(help="The session id the agent passed to lookup_knowledge.")],
    limit: Annotated[int, typer.Option(min=200, max=20_000, help="Characters of the text summary.")] = 2000,
    as_json: JsonFlag = False,
) -> None:
    """The tool-trace summary for a verifier: questions, strongest level, evidence status and sources, bounded."""
    with exit_on_error(as_json):
        with open_reading(vectors=False) as kb:
            summary = summarize(kb.trace(session_id), limit=limit)
        emit(summary, as_json, lambda s: say(s["text"], markup=False))


def audit(
    path: Annotated[str | None, typer.Option(help="Only this document path.")] = None,
    since: Annotated[str | None, typer.Option(help="Only after this: 24h, 7d or an ISO date.")] = None,
    action: Annotated[str | None, typer.Option(help="added | updated | deleted | rejected")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """Who changed which document and when: every upload, update, delete and refused write."""
    with exit_on_error(as_json):
        if action is not None and action not in AUDIT_ACTIONS:
            raise InvalidOption(f"--action {action!r}: one of {', '.join(AUDIT_ACTIONS)}")
        with _records(load_settings()) as records:
            rows = records.audit(path=path, since=_since(since), action=action, limit=limit)
        emit(rows, as_json, _print_audit, view=lambda rows: {"entries": rows})


def _print_audit(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        hashes = f"{(r['old_hash'] or '-')[:12]} → {(r['new_hash'] or '-')[:12]}"
        who = r["actor"] + (f" ({r['key_id']})" if r["key_id"] else "")
        line = f"{r['created_at']:%Y-%m-%d %H:%M:%S} {r['action']:<8} {r['path']}  {hashes}  {who}  [{r['request_id']}]"
        say(line + (f"\n    {r['detail']}" if r["detail"] else ""), markup=False)
    if not rows:
        say("no audit entries match")


@invocations_app.command("list")
def invocations_list(
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    since: Annotated[str | None, typer.Option(help="Only after this: 24h, 7d or an ISO date.")] = None,
    level: Annotated[str | None, typer.Option(help="Strongest level: " + " | ".join(LEVELS))] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Only failed calls.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """Recorded lookup_knowledge calls, newest last."""
    with exit_on_error(as_json):
        if level is not None and level not in LEVELS:
            raise InvalidOption(f"--level {level!r}: one of {', '.join(LEVELS)}")
        with _records(load_settings()) as records:
            rows = records.invocations(session_id=session, since=_since(since), level=level, failed=failed, limit=limit)
        emit(rows, as_json, _print_invocations, view=lambda rows: {"invocations": rows})


def _print_invocations(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        where = f"{r['session_id']}#{r['call']}" if r["session_id"] else "-"
        state = r["relevance_level"] if r["success"] else f"FAILED {r['error']}"
        say(
            f"{r['created_at']:%Y-%m-%d %H:%M:%S} [{r['request_id']}] {where:<16} {r['policy']:<7} "
            f"{r['duration_ms']:7.1f} ms  {state:<15} {r['query'][:60]}",
            markup=False,
        )
    if not rows:
        say("no invocations match")


@invocations_app.command("prune")
def invocations_prune(
    older_than: Annotated[str | None, typer.Option(help="Delete calls older than this: 30d, 12h or a date.")] = None,
    keep: Annotated[int | None, typer.Option(min=0, help="Keep only the newest N calls.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Retention: delete old tool invocation records (session dedup state is kept)."""
    with exit_on_error(as_json):
        if older_than is None and keep is None:
            raise InvalidOption("say what to prune: --older-than 30d and/or --keep N")
        before = _since(older_than)
    with exit_on_error(as_json), owning("invocations prune") as settings:
        with _records(settings, writable=True) as records:
            result = records.prune_invocations(before=before, keep=keep)
        emit(result, as_json, lambda r: say(f"removed {r['removed']} invocation(s); {r['remaining']} remain"))


def metrics(
    since: Annotated[str, typer.Option(help="Rebuild the metrics of records after this: 24h, 7d or a date.")] = "24h",
) -> None:
    """Prometheus metrics (text format) rebuilt from the recorded calls and writes of a period."""
    with exit_on_error(False), _records(load_settings()) as records:
        sys.stdout.write(records.metrics(parse_since(since, dt.datetime.now(dt.UTC))))
