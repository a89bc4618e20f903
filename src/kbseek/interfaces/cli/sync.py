"""Sources: ``kbseek sync git REPO`` (Markdown from a Git repository at a ref) and ``kbseek watch DIR`` (a folder
kept in step while it runs); both hold the data home to write."""

from __future__ import annotations

import json
import signal
from pathlib import Path
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
from kbseek.maintenance.live import WatchReport, watch_folders

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


def watch(
    folders: Annotated[
        list[Path], typer.Argument(metavar="DIR...", help="Folders of Markdown files (their subfolders too).")
    ],
    prune: Annotated[
        bool, typer.Option(help="Delete the document of a file deleted from the folder (only documents from it).")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a line per change.")] = False,
) -> None:
    """Keep folders in step with their documents until stopped: a saved file is searchable within about a second,
    a deleted one is removed. Beside a running server use 'kbseek serve --watch DIR' instead."""
    for folder in folders:
        if not folder.is_dir():
            say(f"[red]error:[/red] cannot watch {escape(str(folder))}: no such folder")
            raise typer.Exit(2)
    with exit_on_error(as_json), owning("watch") as settings, open_owned(settings) as kb:
        watching = watch_folders(kb, folders, prune=prune, on_report=lambda r: _print_watch(r, as_json))

        def stop(_signum: int, _frame: Any) -> None:
            watching.stop()

        signal.signal(signal.SIGTERM, stop)
        shown = ", ".join(str(w.root) for w in watching.watchers)
        if not as_json:
            say(f"watching {escape(shown)} for {escape(str(settings.home))} (Ctrl-C stops)")
        try:
            watching.run()
        except KeyboardInterrupt:
            pass


def _print_watch(report: WatchReport, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.to_dict(), ensure_ascii=False), flush=True)
        return
    print_file_reports(report.files)
    for path in report.deleted:
        say(f"[yellow]deleted[/yellow]  {escape(path)} (its file is gone)")
