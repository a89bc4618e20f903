"""Documents: ``kbseek ingest`` and ``kbseek docs list|show|delete|lint|history|diff|rollback``.

Ingesting, deleting and rolling back hold the data home (they refuse beside a server, naming it); listing, showing,
linting and reading a document's history read beside whoever owns it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from kbseek.interfaces.cli.common import (
    HELP,
    JsonFlag,
    emit,
    err,
    exit_on_error,
    open_owned,
    open_reading,
    out,
    owning,
    print_file_reports,
    say,
)
from kbseek.lookup.review import owners
from kbseek.lookup.views import document_view

docs_app = typer.Typer(help="List, show, delete and lint stored documents; their history and rollback.", **HELP)
Version = Annotated[int, typer.Argument(min=1, help="A version number (see 'kbseek docs history').")]


def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Markdown files and folders.")],
    category: Annotated[str | None, typer.Option(help="Category for every document (overrides frontmatter).")] = None,
    prune: Annotated[
        bool, typer.Option(help="Delete documents whose files vanished from the ingested folders.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Ingest Markdown files and folders; unchanged files are skipped by content hash."""
    with exit_on_error(as_json), owning("ingest") as settings, open_owned(settings) as kb:
        show_progress = not as_json and err.is_terminal
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=err,
            disable=not show_progress,
            transient=True,
        ) as progress:
            task = progress.add_task("ingesting", total=None)

            def on_file(report: Any, done: int, total: int) -> None:
                progress.update(
                    task, completed=done, total=total, description=f"{report.status:9} {report.path or report.source}"
                )

            report = kb.ingest(paths, category=category, prune=prune, on_file=on_file)
        emit(report, as_json, _print_ingest, view=lambda r: r.to_dict())
    if not report.ok:
        raise typer.Exit(1)


def _print_ingest(report: Any) -> None:
    print_file_reports(report.files, chunks=True)
    for path in report.pruned:
        say(f"[yellow]deleted[/yellow] {path} (file vanished)")
    for why in report.prune_skipped:
        say(f"[red]prune skipped[/red] {why}: the folder was not read completely")
    for lint in report.lint:
        say(f"[yellow]lint:[/yellow] {lint['message']}")
    counts = ", ".join(f"{n} {status}" for status, n in report.counts.items())
    say(f"{counts} in {report.duration_ms / 1000:.2f}s")


@docs_app.command("list")
def docs_list(
    category: Annotated[str | None, typer.Option(help="Only this category.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many.")] = None,
    offset: Annotated[int, typer.Option(min=0, help="Skip this many.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """List stored documents."""
    with exit_on_error(as_json):
        with open_reading(vectors=False) as kb:
            docs = kb.list_documents(category=category, limit=limit, offset=offset)
        emit(docs, as_json, _print_documents, view=lambda docs: [document_view(d) for d in docs])


@docs_app.command("stale")
def docs_stale(
    owner: Annotated[str | None, typer.Option(help="Only this owner's documents ('-': documents with none).")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="List fresh documents too, with their age.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """List what needs review, per owner: documents past their review date (frontmatter last_reviewed and
    review_every, or the review_every_default setting) and documents readers reported outdated."""
    with exit_on_error(as_json):
        with open_reading(vectors=False) as kb:
            rows = kb.reviews.stale(owner, everything=show_all)
        emit(rows, as_json, _print_stale, view=lambda rows: {"owners": owners(rows), "documents": rows})


def _print_stale(rows: list[dict[str, Any]]) -> None:
    table = Table(box=None, highlight=False)
    for column in ("owner", "path", "age", "since", "due", "why"):
        table.add_column(column, no_wrap=column != "why", overflow="ellipsis")
    for r in rows:
        why = ", ".join(r["reasons"]) or "fresh"
        since = f"{r['since']} ({'reviewed' if r['basis'] == 'last_reviewed' else 'changed'})"
        shown = (r["owner"] or "-", r["path"], f"{r['age_days']}d", since, r["review_due"] or "never", why)
        table.add_row(*(Text(value) for value in shown))  # the data's text is never read as markup
    out.print(table)
    needing = sum(1 for r in rows if r["reasons"])
    say(f"{needing} document(s) need review" + (f" of {len(rows)} listed" if needing != len(rows) else ""))


def _print_documents(docs: list[Any]) -> None:
    table = Table(box=None, highlight=False)
    table.add_column("path", no_wrap=True, min_width=max((len(d.path) + 2 for d in docs), default=4))
    table.add_column("category", no_wrap=True, min_width=max((len(d.category) for d in docs), default=8))
    table.add_column("chunks", justify="right", min_width=6)
    table.add_column("title", overflow="ellipsis", no_wrap=True, max_width=30)
    wide = out.width >= 120
    if wide:
        table.add_column("keywords", overflow="ellipsis", no_wrap=True, max_width=40)
    for d in docs:
        warn = " [yellow]![/yellow]" if d.warnings else ""
        row = [d.path + warn, d.category, str(d.chunk_count), d.title]
        table.add_row(*row, *([", ".join(d.keywords)] if wide else []))
    out.print(table)
    say(f"{len(docs)} document(s)")


@docs_app.command("show")
def docs_show(
    path: Annotated[str, typer.Argument(help="Document path (or id).")],
    version: Annotated[
        int | None, typer.Option("--version", min=1, help="That version's stored Markdown (see 'docs history').")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show one document: metadata, warnings, sections and chunks with breadcrumbs; or one version of it."""
    with exit_on_error(as_json):
        if version is not None:
            with open_reading(vectors=False) as kb:
                shown = kb.document_history(path, version)
            emit(shown, as_json, _print_version)
            return
        with open_reading(vectors=False) as kb:
            doc = kb.get_document(path)
        emit(doc, as_json, _print_document, view=lambda doc: document_view(doc, with_chunks=True))


def _print_document(doc: Any) -> None:
    say(f"[bold]{doc.title}[/bold]  ({doc.path}, {doc.category}, id {doc.id})")
    say(f"summary: {doc.summary}\nkeywords: {', '.join(doc.keywords) or '-'}")
    for warning in doc.warnings:
        say(f"[yellow]warning:[/yellow] {warning}")
    for c in doc.chunks:
        preview = " ".join(c.text.split())[:80]
        say(f"[cyan]#{c.index}[/cyan] L{c.line_start}-{c.line_end} [dim]{c.breadcrumb}[/dim]\n    {preview}")


@docs_app.command("delete")
def docs_delete(
    path: Annotated[str, typer.Argument(help="Document path.")],
    as_json: JsonFlag = False,
) -> None:
    """Delete a document: rows, indexes and its stored original."""
    with exit_on_error(as_json), owning("docs delete") as settings, open_owned(settings) as kb:
        kb.delete(path)
        emit({"deleted": path}, as_json, lambda _: say(f"deleted {path}"))


@docs_app.command("lint")
def docs_lint(as_json: JsonFlag = False) -> None:
    """Report keywords that several documents share."""
    with exit_on_error(as_json):
        with open_reading(vectors=False) as kb:
            lint = kb.lint()
        emit(lint, as_json, _print_lint)


def _print_lint(lint: list[dict[str, Any]]) -> None:
    for item in lint:
        say(f"[yellow]lint:[/yellow] {item['message']}")
    say(f"{len(lint)} shared keyword(s)")


@docs_app.command("history")
def docs_history(
    path: Annotated[str, typer.Argument(help="Document path (also of a deleted document).")],
    as_json: JsonFlag = False,
) -> None:
    """List a document's kept versions: when, what changed it (upload, ingest, rollback…) and who."""
    with exit_on_error(as_json):
        with open_reading(vectors=False) as kb:
            history = kb.document_history(path)
        emit(history, as_json, _print_history)


def _print_history(history: dict[str, Any]) -> None:
    table = Table(box=None, highlight=False)
    for column in ("version", "when", "action", "via", "who", "title"):
        table.add_column(column, no_wrap=column != "title", overflow="ellipsis")
    for v in history["versions"]:
        action = v["action"] + (f" from {v['restored_from']}" if v["restored_from"] else "")
        who = v["actor"] + (f" ({v['key_id']})" if v["key_id"] else "")
        current = " [green]*[/green]" if v["version"] == history["current"] else ""
        shown = [Text(value) for value in (v["created_at"][:19], action, v["via"], who, v["title"] or "")]
        table.add_row(f"{v['version']}{current}", *shown)  # the data's text is never read as markup
    out.print(table)
    state = "deleted" if history["deleted"] else f"current: version {history['current']}"
    say(f"{len(history['versions'])} version(s) of {history['path']}; {state}", markup=False)


def _print_version(version: dict[str, Any]) -> None:
    head = f"{version['path']} version {version['version']}: {version['action']} via {version['via']}"
    say(f"{head}, by {version['actor']} at {version['created_at']} (request {version['request_id']})", markup=False)
    if version["content"] is None:
        say("the document was deleted here: no text")
    else:  # the Markdown as stored: no wrapping, markup or emoji codes from the console
        typer.echo(version["content"], nl=False)


@docs_app.command("diff")
def docs_diff(
    path: Annotated[str, typer.Argument(help="Document path.")],
    a: Version,
    b: Version,
    as_json: JsonFlag = False,
) -> None:
    """Show the unified diff of two versions' stored Markdown (frontmatter included)."""
    with exit_on_error(as_json):
        with open_reading(vectors=False) as kb:
            diff = kb.document_diff(path, a, b)
        emit(diff, as_json, lambda d: typer.echo(d["diff"] or "no difference\n", nl=False))


@docs_app.command("rollback")
def docs_rollback(
    path: Annotated[str, typer.Argument(help="Document path.")],
    to: Annotated[int, typer.Option("--to", min=1, help="The version to bring back (see 'kbseek docs history').")],
    as_json: JsonFlag = False,
) -> None:
    """Bring back an earlier version of a document as its newest version (indexes and vectors follow)."""
    with exit_on_error(as_json), owning("docs rollback") as settings, open_owned(settings) as kb:
        shown = kb.rollback(path, to)
        emit(shown, as_json, _print_rollback)


def _print_rollback(shown: dict[str, Any]) -> None:
    if shown["status"] == "unchanged":
        say(f"{shown['path']} already has the text of version {shown['restored_from']}: nothing changed", markup=False)
    else:
        say(f"{shown['path']}: version {shown['restored_from']} restored as version {shown['version']}", markup=False)
