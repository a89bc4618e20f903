"""Looking after the whole data home: ``kbseek doctor``, ``reindex``, ``backup``, ``restore`` and ``db
upgrade|current`` (the work itself is in ``kbseek.maintenance``).

``doctor`` without ``--fix``, ``backup`` and ``db current`` write nothing and run beside a server; ``doctor --fix``,
``reindex``, ``restore`` and ``db upgrade`` hold the data home or refuse, naming its owner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kbseek.interfaces.cli.common import HELP, JsonFlag, emit, exit_on_error, load_settings, open_owned, owning, say

db_app = typer.Typer(help="Database schema migrations.", **HELP)


def doctor(
    fix: Annotated[
        bool, typer.Option("--fix", help="Repair what drifted (default: only report, writing nothing).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Check the schema, stored originals, indexes and vectors against the database; --fix repairs them.

    Without --fix it writes nothing and runs beside a server; with --fix it needs the data home to itself."""
    from kbseek.maintenance import doctor as checks  # imported here: start-up cost (see common)

    with exit_on_error(as_json):
        if fix:
            with owning("doctor --fix") as settings, open_owned(settings) as kb:
                result = checks.doctor(kb, fix=True)
        else:
            result = checks.check_home(load_settings())
        emit(result, as_json, lambda result: _print_doctor(result, fix))
        if not result["ok"] and not fix:
            raise typer.Exit(1)


def _print_doctor(result: dict[str, Any], fix: bool) -> None:
    owner = result.get("owner")
    if owner:
        say(
            f"checked beside {owner['describe']}, which owns the data home: a write in flight can show as drift for "
            "a moment",
            markup=False,
        )
    for name, check in result["checks"].items():
        state = {True: "ok ", False: "BAD", None: "-- "}[check["ok"]]
        detail = ", ".join(f"{k}={v}" for k, v in check.items() if k != "ok")
        say(f"{state} {name:<8} {detail}", markup=False)
    at_open = {k: v for k, v in result["repaired_at_open"].items() if v}
    if at_open:
        say(f"opening the knowledge base repaired: {at_open}")
    if result["ok"]:
        verdict = "healthy"
    elif fix:
        verdict = "repaired"
    elif owner and owner["url"]:
        verdict = (
            f"drift found: check again, then repair through the server (POST {owner['url']}/api/reindex) "
            "or stop it and run 'kbseek doctor --fix'"
        )
    elif owner:
        verdict = f"not everything checked while {owner['describe']} writes: run it again when that is done"
    else:
        verdict = "drift found: run 'kbseek doctor --fix'"
    say(verdict, markup=False)


def reindex(as_json: JsonFlag = False) -> None:
    """Rebuild originals, indexes and every vector from the database (cached embeddings are reused)."""
    from kbseek.maintenance.reindex import reindex as rebuild  # imported here: start-up cost (see common)

    with exit_on_error(as_json), owning("reindex") as settings, open_owned(settings) as kb:
        emit(
            rebuild(kb),
            as_json,
            lambda r: say(
                f"reindexed {r['documents']} documents, {r['chunks']} chunks, {r['vectors']} vectors in "
                f"{r['duration_ms']:.0f} ms (repaired: {r['repaired']})"
            ),
        )


def backup(
    out_file: Annotated[Path, typer.Argument(help="The archive to write (.tar.gz).")],
    as_json: JsonFlag = False,
) -> None:
    """A consistent snapshot of the data home (its SQLite database), safe while a server runs."""
    from kbseek.maintenance import backup as backups  # imported here: start-up cost (see common)

    with exit_on_error(as_json):
        emit(
            backups.backup(load_settings(), out_file),
            as_json,
            lambda r: say(f"backed up {r['documents']} documents to {r['file']} ({r['bytes']:,} bytes)"),
        )


def restore(
    archive: Annotated[Path, typer.Argument(help="An archive written by 'kbseek backup'.")],
    force: Annotated[bool, typer.Option("--force", help="Replace the knowledge base already in the home.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Restore a backup into the data home; originals, indexes and vectors are rebuilt from it."""
    from kbseek.maintenance import backup as backups  # imported here: start-up cost (see common)

    with exit_on_error(as_json), owning("restore") as settings:
        emit(
            backups.restore(archive, settings, force=force),
            as_json,
            lambda r: say(f"restored {r['documents']} documents (backup of {r['manifest']['created_at']})"),
        )


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations up to REVISION (default: the newest)."""
    from kbseek.maintenance import schema  # imported here: start-up cost (see common)

    with exit_on_error(False), owning("db upgrade") as settings:
        say(f"database at revision {schema.upgrade(settings, revision)}")


@db_app.command("current")
def db_current(as_json: JsonFlag = False) -> None:
    """Show the schema revision of the database and the newest one known."""
    from kbseek.maintenance import schema  # imported here: start-up cost (see common)

    with exit_on_error(as_json):
        emit(schema.status(load_settings()), as_json, _print_schema)


def _print_schema(info: dict[str, Any]) -> None:
    state = "up to date" if info["up_to_date"] else "needs 'kbseek db upgrade'"
    say(f"{info['database_url']}: revision {info['current']} (head {info['head']}, {state})")
