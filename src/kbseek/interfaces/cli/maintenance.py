"""Operations verbs: ``audit``, ``invocations list|prune`` and ``metrics`` read the records only (no embedder,
no vector store, so they are quick on a busy data home); ``doctor``, ``reindex``, ``backup`` and ``restore``
look after the whole data home. Reading verbs run beside the data home's owner; writing ones (``invocations
prune``, ``doctor --fix``, ``reindex``, ``restore``) hold the home or refuse, naming its owner.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kbseek.adapters.sql import migrate
from kbseek.adapters.sql.audit import AuditStore
from kbseek.adapters.sql.engine import make_engine
from kbseek.adapters.sql.invocations import InvocationStore
from kbseek.adapters.sql.repository import SqlRepository
from kbseek.adapters.sql.tables import utcnow
from kbseek.core.relevance import LEVELS as ANSWER_LEVELS
from kbseek.core.relevance import NO_CONFIDENT_MATCH
from kbseek.core.spans import parse_since
from kbseek.errors import InvalidOption, KbseekError
from kbseek.interfaces.cli import JsonFlag, _errors, _open_owned, _print_json, _settings, app, out, owning
from kbseek.home.readonly import require_current_schema, require_database
from kbseek.lookup.views import jsonable

invocations_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                              help="List and prune recorded lookup_knowledge calls.")
app.add_typer(invocations_app, name="invocations")
LEVELS = (*ANSWER_LEVELS, NO_CONFIDENT_MATCH, "ERROR")


def _engine() -> Any:
    """The records' database, for reading: never created or migrated here (the data home's owner does that)."""
    settings = _settings()
    require_database(settings.database_url, settings.home)
    engine = make_engine(settings.database_url)
    require_current_schema(engine, settings.home)
    return engine


@app.command("audit")
def audit(
    path: Annotated[Optional[str], typer.Option(help="Only this document path.")] = None,
    since: Annotated[Optional[str], typer.Option(help="Only after this: 24h, 7d or an ISO date.")] = None,
    action: Annotated[Optional[str], typer.Option(help="added | updated | deleted | rejected")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """Who changed which document and when: every upload, update, delete and refused write."""
    with _errors(as_json):
        if action is not None and action not in ("added", "updated", "deleted", "rejected"):
            raise InvalidOption(f"--action {action!r}: one of added, updated, deleted, rejected")
        rows = AuditStore(_engine()).list(path=path, since=parse_since(since, utcnow()) if since else None,
                                          action=action, limit=limit)
        if as_json:
            _print_json({"entries": [jsonable(r) for r in rows]})
            return
        for r in rows:
            hashes = f"{(r['old_hash'] or '-')[:12]} → {(r['new_hash'] or '-')[:12]}"
            who = r["actor"] + (f" ({r['key_id']})" if r["key_id"] else "")
            line = f"{r['created_at']:%Y-%m-%d %H:%M:%S} {r['action']:<8} {r['path']}  {hashes}  {who}  [{r['request_id']}]"
            out.print(line + (f"\n    {r['detail']}" if r["detail"] else ""), highlight=False, markup=False)
        if not rows:
            out.print("no audit entries match", highlight=False)


@invocations_app.command("list")
def invocations_list(
    session: Annotated[Optional[str], typer.Option(help="Only this session.")] = None,
    since: Annotated[Optional[str], typer.Option(help="Only after this: 24h, 7d or an ISO date.")] = None,
    level: Annotated[Optional[str], typer.Option(help="Strongest level: " + " | ".join(LEVELS))] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Only failed calls.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """Recorded lookup_knowledge calls, newest last."""
    with _errors(as_json):
        if level is not None and level not in LEVELS:
            raise InvalidOption(f"--level {level!r}: one of {', '.join(LEVELS)}")
        rows = InvocationStore(_engine()).list(session_id=session,
                                               since=parse_since(since, utcnow()) if since else None,
                                               level=level, success=False if failed else None, limit=limit)
        if as_json:
            _print_json({"invocations": [jsonable(r) for r in rows]})
            return
        for r in rows:
            where = f"{r['session_id']}#{r['call']}" if r["session_id"] else "-"
            state = r["relevance_level"] if r["success"] else f"FAILED {r['error']}"
            out.print(f"{r['created_at']:%Y-%m-%d %H:%M:%S} [{r['request_id']}] {where:<16} {r['policy']:<7} "
                      f"{r['duration_ms']:7.1f} ms  {state:<15} {r['query'][:60]}", highlight=False, markup=False)
        if not rows:
            out.print("no invocations match", highlight=False)


@invocations_app.command("prune")
def invocations_prune(
    older_than: Annotated[Optional[str], typer.Option(help="Delete calls older than this: 30d, 12h or a date.")] = None,
    keep: Annotated[Optional[int], typer.Option(min=0, help="Keep only the newest N calls.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Retention: delete old tool invocation records (session dedup state is kept)."""
    with _errors(as_json):
        if older_than is None and keep is None:
            raise InvalidOption("say what to prune: --older-than 30d and/or --keep N")
        before = parse_since(older_than, utcnow()) if older_than else None
    with _errors(as_json), owning("invocations prune") as settings:
        engine = make_engine(settings.database_url)
        migrate.upgrade(engine)
        store = InvocationStore(engine)
        removed = store.prune(before=before, keep=keep)
        result = {"removed": removed, "remaining": store.count()}
        if as_json:
            _print_json(result)
        else:
            out.print(f"removed {removed} invocation(s); {result['remaining']} remain", highlight=False)


@app.command("metrics")
def metrics(
    since: Annotated[str, typer.Option(help="Rebuild the metrics of records after this: 24h, 7d or a date.")] = "24h",
) -> None:
    """Prometheus metrics (text format) rebuilt from the recorded calls and writes of a period."""
    from kbseek.observability.metrics import from_records

    with _errors(False):
        engine = _engine()
        start = parse_since(since, utcnow())
        repository = SqlRepository(engine)
        telemetry = from_records(InvocationStore(engine).list(since=start, limit=10_000_000),
                                 AuditStore(engine).list(since=start, limit=10_000_000),
                                 slow_lookup_ms=_settings().slow_lookup_ms, documents=repository.count(),
                                 chunks=repository.chunk_count())
        sys.stdout.write(telemetry.exposition().decode("utf-8"))


@app.command("doctor")
def doctor_command(
    fix: Annotated[bool, typer.Option("--fix", help="Repair what drifted (default: only report, writing nothing).")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Check the schema, stored originals, indexes and vectors against the database; --fix repairs them.

    Without --fix it writes nothing and runs beside a server; with --fix it needs the data home to itself."""
    from kbseek.maintenance.operations import check_home, doctor

    with _errors(as_json):
        if fix:
            with owning("doctor --fix") as settings, _open_owned(settings) as kb:
                result = doctor(kb, fix=True)
        else:
            result = check_home(_settings())
        if as_json:
            _print_json(result)
        else:
            _print_doctor(result, fix)
        if not result["ok"] and not fix:
            raise typer.Exit(1)


def _print_doctor(result: dict[str, Any], fix: bool) -> None:
    owner = result.get("owner")
    if owner:
        out.print(f"checked beside {owner['describe']}, which owns the data home: a write in flight can show as "
                  "drift for a moment", highlight=False, markup=False)
    for name, check in result["checks"].items():
        state = {True: "ok ", False: "BAD", None: "-- "}[check["ok"]]
        detail = ", ".join(f"{k}={v}" for k, v in check.items() if k != "ok")
        out.print(f"{state} {name:<8} {detail}", highlight=False, markup=False)
    at_open = {k: v for k, v in result["repaired_at_open"].items() if v}
    if at_open:
        out.print(f"opening the knowledge base repaired: {at_open}", highlight=False)
    if result["ok"]:
        verdict = "healthy"
    elif fix:
        verdict = "repaired"
    elif owner and owner["url"]:
        verdict = (f"drift found: check again, then repair through the server (POST {owner['url']}/api/reindex) "
                   "or stop it and run 'kbseek doctor --fix'")
    elif owner:
        verdict = f"not everything checked while {owner['describe']} writes: run it again when that is done"
    else:
        verdict = "drift found: run 'kbseek doctor --fix'"
    out.print(verdict, highlight=False, markup=False)


@app.command("reindex")
def reindex_command(as_json: JsonFlag = False) -> None:
    """Rebuild originals, indexes and every vector from the database (cached embeddings are reused)."""
    from kbseek.maintenance.operations import reindex

    with _errors(as_json), owning("reindex") as settings, _open_owned(settings) as kb:
        result = reindex(kb)
        if as_json:
            _print_json(result)
        else:
            out.print(f"reindexed {result['documents']} documents, {result['chunks']} chunks, {result['vectors']} "
                      f"vectors in {result['duration_ms']:.0f} ms (repaired: {result['repaired']})", highlight=False)


@app.command("backup")
def backup_command(
    out_file: Annotated[Path, typer.Argument(help="The archive to write (.tar.gz).")],
    as_json: JsonFlag = False,
) -> None:
    """A consistent snapshot of the data home (its SQLite database), safe while a server runs."""
    from kbseek.maintenance.operations import backup

    with _errors(as_json):
        result = backup(_settings(), out_file)
        if as_json:
            _print_json(result)
        else:
            out.print(f"backed up {result['documents']} documents to {result['file']} ({result['bytes']:,} bytes)",
                      highlight=False)


@app.command("restore")
def restore_command(
    archive: Annotated[Path, typer.Argument(help="An archive written by 'kbseek backup'.")],
    force: Annotated[bool, typer.Option("--force", help="Replace the knowledge base already in the home.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Restore a backup into the data home; originals, indexes and vectors are rebuilt from it."""
    from kbseek.maintenance.operations import restore

    with _errors(as_json), owning("restore") as settings:
        result = restore(archive, settings, force=force)
        if as_json:
            _print_json(result)
        else:
            out.print(f"restored {result['documents']} documents (backup of {result['manifest']['created_at']})",
                      highlight=False)
