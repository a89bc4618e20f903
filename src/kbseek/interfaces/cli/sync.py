"""Sources: ``kbseek sync git REPO`` (Markdown from a Git repository at a ref; holds the data home to write)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from kbseek.interfaces.cli.common import (
    HELP,
    JsonFlag,
    emit,
    exit_on_error,
    open_owned,
    owning,
    print_file_reports,
    say,
)

sync_app = typer.Typer(help="Bring documents in from a source (a Git repository).", **HELP)


@sync_app.command("git")
def sync_git(
    repo: Annotated[str, typer.Argument(help="A clone's path, or a URL (credentials in it are never shown).")],
    ref: Annotated[str, typer.Option(help="Branch, tag or commit to read.")] = "HEAD",
    path: Annotated[str, typer.Option("--path", help="Only this folder of the repository.")] = "",
    prune: Annotated[
        bool, typer.Option(help="Delete documents whose files are gone upstream (only when every file was stored).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Ingest the Markdown files of a Git repository at a ref; a re-sync reads only what changed since the last."""
    with exit_on_error(as_json), owning("sync git") as settings, open_owned(settings) as kb:
        report = kb.sync_git(repo, ref=ref, path=path, prune=prune)
        emit(report, as_json, _print_sync, view=lambda r: r.to_dict())
    if not report.ok:
        raise typer.Exit(1)


def _print_sync(report: Any) -> None:
    print_file_reports(report.files)
    for move in report.moved:
        say(f"[yellow]moved[/yellow]    {escape(move['from'])} → {escape(move['to'])}")
    for path in report.deleted:
        say(f"[yellow]deleted[/yellow]  {escape(path)} (gone upstream)")
    for path in report.kept:
        say(f"[dim]kept     {escape(path)} (gone upstream; --prune deletes it)[/dim]")
    if report.prune_skipped:
        say(f"[red]prune skipped[/red] {escape(report.prune_skipped)}")
    counts = ", ".join(f"{n} {status}" for status, n in report.counts.items() if n)
    why = f" ({report.reason})" if report.reason else ""
    say(f"{escape(report.repo)} at {report.commit[:12]}: {report.mode}{why}: {counts or 'nothing to do'}")
    if not report.recorded:
        say("[red]not recorded as synced[/red]: the next sync retries from the previous commit")
