"""Documents: ``kbseek ingest`` and ``kbseek docs list|show|delete|lint``.

Ingesting and deleting hold the data home (they refuse beside a server, naming it); listing, showing and linting
read beside whoever owns it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

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
    say,
)
from kbseek.lookup.views import document_view

docs_app = typer.Typer(help="List, show, delete and lint stored documents.", **HELP)


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
    styles = {"failed": "red", "added": "green", "updated": "yellow"}
    for f in report.files:
        if f.status == "unchanged":
            continue
        style = styles.get(f.status, "white")
        detail = f" ({f.chunks} chunks)" if f.status != "failed" else ""
        say(f"[{style}]{f.status:8}[/{style}] {f.path or f.source}{detail}")
        if f.reason:
            say(f"         [red]{f.reason}[/red]")
        for warning in f.warnings:
            say(f"         [yellow]warning:[/yellow] {warning}")
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
    as_json: JsonFlag = False,
) -> None:
    """Show one document: metadata, warnings, sections and chunks with breadcrumbs."""
    with exit_on_error(as_json):
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
