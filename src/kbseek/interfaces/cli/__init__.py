"""The ``kbseek`` command line: verbs for people, ``--json`` for machines."""

from __future__ import annotations

import getpass
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from kbseek import __version__
from kbseek.errors import HomeInUse, InvalidRequest, KbseekError
from kbseek.lookup.render import FORMATS, legacy_view, render_text, response_view
from kbseek.lookup.views import document_view, hit_view, search_view
from kbseek.observability.logs import configure_logging, set_process_actor
from kbseek.home.ownership import HomeLock, busy_message, owner_of
from kbseek.settings import Settings

# Plain help (click's): typer's rich panels show every flag as taking a value ("--json <bool>", "-v <int>")
HELP: dict[str, Any] = {"no_args_is_help": True, "rich_markup_mode": None,
                        "context_settings": {"max_content_width": 120}}
app = typer.Typer(add_completion=False, help="kbseek: knowledge retrieval for AIOps agents.", **HELP)
docs_app = typer.Typer(help="List, show, delete and lint stored documents.", **HELP)
db_app = typer.Typer(help="Database schema migrations.", **HELP)
eval_app = typer.Typer(help="Measure retrieval quality on a dataset.", **HELP)
app.add_typer(docs_app, name="docs")
app.add_typer(db_app, name="db")
app.add_typer(eval_app, name="eval")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (see schemas/).")]


class _State:
    home: Optional[Path] = None
    verbose: int = 0
    log_json: bool = False


def _print_version(value: bool) -> None:
    if value:
        print(f"kbseek {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    home: Annotated[Optional[Path], typer.Option(metavar="PATH", help="Data home (default: KBSEEK_HOME or ./.kbseek).")] = None,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="-v info, -vv debug logs.")] = 0,
    log_json: Annotated[bool, typer.Option("--log-json", help="Logs as JSON lines (KBSEEK_LOG_FORMAT=json).")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    _State.home, _State.verbose, _State.log_json = home, verbose, log_json
    set_process_actor(f"cli:{_user()}")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def _settings() -> Settings:
    overrides: dict[str, Any] = {"home": _State.home} if _State.home else {}
    if _State.verbose:
        overrides["log_level"] = "DEBUG" if _State.verbose > 1 else "INFO"
    if _State.log_json:
        overrides["log_format"] = "json"
    settings = Settings(**overrides)
    configure_logging(settings.log_level, settings.log_format)
    return settings


@contextmanager
def _errors(as_json: bool) -> Iterator[None]:
    """Map kbseek errors to a message with a hint (or a JSON error) and exit code 2."""
    try:
        yield
    except KbseekError as exc:
        if as_json:
            print(json.dumps({"error": {"code": exc.code, "message": exc.message, "hint": exc.hint}}, ensure_ascii=False))
        else:
            err.print(f"[red]error:[/red] {exc.message}" + (f"\n[dim]hint: {exc.hint}[/dim]" if exc.hint else ""), highlight=False)
        raise typer.Exit(2) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        message = f"setting {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        if as_json:
            print(json.dumps({"error": {"code": "config_error", "message": message, "hint": None}}, ensure_ascii=False))
        else:
            err.print(f"[red]error:[/red] {message}", highlight=False)
        raise typer.Exit(2) from exc


def _open(*, vectors: bool = True) -> Any:
    """The knowledge base, read-only: reading commands never migrate, repair or write the data home, so they run
    beside the process that owns it (``kbseek serve``), and say so once. Their vectors come from the database's
    embedding cache (the owner's Milvus Lite is its own); ``vectors=False`` skips the dense lane altogether."""
    from kbseek.service import KnowledgeBase

    settings = _settings()
    owner = owner_of(settings.home)
    if owner is not None:
        err.print(f"note: {owner.describe()} owns {settings.home}; reading beside it"
                  + (" (vectors from the database's embedding cache)" if vectors and settings.embedder != "none" else ""),
                  highlight=False)
    if not vectors:
        settings = settings.model_copy(update={"embedder": "none"})
    return KnowledgeBase.open(settings, read_only=True)


@contextmanager
def owning(command: str) -> Iterator[Settings]:
    """Hold the data home while a writing command runs; refuse, naming the owner, if another process holds it."""
    settings = _settings()
    lock = HomeLock(settings.home)
    try:
        lock.acquire(f"kbseek {command}")
    except HomeInUse as exc:
        raise HomeInUse(busy_message(exc.owner, settings.home, command), owner=exc.owner) from None
    try:
        yield settings
    finally:
        lock.release()


def _open_owned(settings: Settings) -> Any:
    from kbseek.service import KnowledgeBase

    return KnowledgeBase.open(settings)


def _print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Markdown files and folders.")],
    category: Annotated[Optional[str], typer.Option(help="Category for every document (overrides frontmatter).")] = None,
    prune: Annotated[bool, typer.Option(help="Delete documents whose files vanished from the ingested folders.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Ingest Markdown files and folders; unchanged files are skipped by content hash."""
    with _errors(as_json), owning("ingest") as settings, _open_owned(settings) as kb:
        show_progress = not as_json and err.is_terminal
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=err, disable=not show_progress, transient=True) as progress:
            task = progress.add_task("ingesting", total=None)

            def on_file(report: Any, done: int, total: int) -> None:
                progress.update(task, completed=done, total=total, description=f"{report.status:9} {report.path or report.source}")

            report = kb.ingest(paths, category=category, prune=prune, on_file=on_file)
        if as_json:
            _print_json(report.to_dict())
        else:
            _print_ingest(report)
    if not report.ok:
        raise typer.Exit(1)


def _print_ingest(report: Any) -> None:
    styles = {"failed": "red", "added": "green", "updated": "yellow"}
    for f in report.files:
        if f.status == "unchanged":
            continue
        style = styles.get(f.status, "white")
        detail = f" ({f.chunks} chunks)" if f.status != "failed" else ""
        out.print(f"[{style}]{f.status:8}[/{style}] {f.path or f.source}{detail}", highlight=False)
        if f.reason:
            out.print(f"         [red]{f.reason}[/red]", highlight=False)
        for warning in f.warnings:
            out.print(f"         [yellow]warning:[/yellow] {warning}", highlight=False)
    for path in report.pruned:
        out.print(f"[yellow]deleted[/yellow] {path} (file vanished)", highlight=False)
    for why in report.prune_skipped:
        out.print(f"[red]prune skipped[/red] {why}: the folder was not read completely", highlight=False)
    for lint in report.lint:
        out.print(f"[yellow]lint:[/yellow] {lint['message']}", highlight=False)
    counts = ", ".join(f"{n} {status}" for status, n in report.counts.items())
    out.print(f"{counts} in {report.duration_ms / 1000:.2f}s", highlight=False)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=1000, help="How many chunks.")] = 10,
    category: Annotated[Optional[str], typer.Option(help="Only this category.")] = None,
    policy: Annotated[Optional[str], typer.Option(help="hybrid | dense | lexical (default: the setting).")] = None,
    threshold: Annotated[Optional[float], typer.Option(help="Minimum cosine similarity for the dense lane.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Ranked chunks with their document, breadcrumb and scores."""
    with _errors(as_json):
        with _open() as kb:
            result = kb.search(query, top_k=top_k, category=category, policy=policy, threshold=threshold)
        if as_json:
            _print_json(search_view(result))
            return
        for note in result.notes:
            out.print(f"[yellow]note:[/yellow] {note}", highlight=False)
        _print_hits(result.hits)
        out.print(f"[dim]{len(result.hits)} hit(s) in {result.timings_ms['total']:.1f} ms[/dim]", highlight=False)


def _print_hits(hits: Any) -> None:
    for hit in hits:
        c = hit.chunk
        out.print(f"[cyan]{hit.rank:>2}[/cyan] {hit.score:7.3f}  [bold]{c.source_path}[/bold]:{c.line_start}-{c.line_end}"
                  f"  [dim]{c.breadcrumb}[/dim]", highlight=False)
        out.print("      " + " ".join(c.text.split())[:160], highlight=False)


@app.command()
def lookup(
    query: Annotated[str, typer.Argument(help="The agent's question, alert text or error code.")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=50, help="At most this many evidence pieces.")] = 5,
    policy: Annotated[Optional[str], typer.Option(help="hybrid | dense | lexical | legacy (default: the setting).")] = None,
    category: Annotated[Optional[str], typer.Option(help="Only this category.")] = None,
    filter_: Annotated[Optional[list[str]], typer.Option("--filter", help="FIELD=VALUE on frontmatter; repeat.")] = None,
    session: Annotated[Optional[str], typer.Option(help="Session id: evidence given earlier comes back DEDUPED.")] = None,
    expand: Annotated[str, typer.Option(help="none | section | neighbors")] = "none",
    section: Annotated[Optional[str], typer.Option(help="One section: PATH#ANCHOR or '#heading path'.")] = None,
    dedup: Annotated[str, typer.Option(help="section | document")] = "section",
    budget: Annotated[Optional[int], typer.Option(help="Characters of evidence (default: the setting).")] = None,
    rewrite: Annotated[Optional[str], typer.Option(help="off | expand | multi (default: the setting).")] = None,
    output: Annotated[str, typer.Option("--format", help="text | json | legacy")] = "text",
    explain: Annotated[bool, typer.Option(help="Also show the L0 hint and the fused recall before levels.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """lookup_knowledge: levelled evidence grouped by document, as an agent receives it."""
    fmt = "json" if as_json else output
    with _errors(fmt != "text"):
        if fmt not in FORMATS:
            raise InvalidRequest(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
        filters: dict[str, Any] = {}
        for item in filter_ or []:
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise InvalidRequest(f"--filter {item!r}: expected FIELD=VALUE")
            filters.setdefault(name.strip(), []).append(value.strip())
        request = {"query": query, "top_k": top_k, "policy": policy, "category": category, "session_id": session,
                   "filters": filters or None, "expand": expand, "section": section, "dedup": dedup,
                   "budget_chars": budget, "rewrite": rewrite}
        with _open() as kb:
            response = kb.lookup_knowledge({k: v for k, v in request.items() if v is not None})
        if fmt == "legacy":
            _print_json(legacy_view(response))
        elif fmt == "json":
            view = response_view(response)
            if explain:
                view["ranked"] = [hit_view(h) for h in response.ranked]
            _print_json(view)
        else:
            if explain:
                _print_hint(response)
            out.print(render_text(response), highlight=False, markup=False)
            timings = ", ".join(f"{k} {v:.1f}" for k, v in response.timings_ms.items())
            out.print(f"[dim]ms: {timings}[/dim]", highlight=False)


def _print_hint(response: Any) -> None:
    hint = response.hint
    out.print(f"[bold]L0 hint[/bold]: {len(hint.matches)} match(es); keywords: {', '.join(hint.matched_keywords) or '-'};"
              f" domains: {', '.join(hint.domains) or '-'}; single domain: {hint.single_domain or '-'}", highlight=False)
    for m in hint.matches:
        kind = ("exact " if m.exact else "partial ") + m.field
        out.print(f"   {m.score:5.2f} {kind:16} {m.path}  {', '.join(m.matched_keywords)}", highlight=False)
    f = response.filter
    if f.category:
        state = " (relaxed: it matched nothing)" if f.relaxed else ""
        out.print(f"filter: category={f.category} from {f.source}{state}", highlight=False)
    for note in response.notes:
        out.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    out.print("[bold]fused recall[/bold] (before relevance levels):", highlight=False)
    _print_hits(response.ranked[:10])


@docs_app.command("list")
def docs_list(
    category: Annotated[Optional[str], typer.Option(help="Only this category.")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="At most this many.")] = None,
    offset: Annotated[int, typer.Option(min=0, help="Skip this many.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """List stored documents."""
    with _errors(as_json):
        with _open(vectors=False) as kb:
            docs = kb.list_documents(category=category, limit=limit, offset=offset)
        if as_json:
            _print_json([document_view(d) for d in docs])
            return
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
        out.print(f"{len(docs)} document(s)", highlight=False)


@docs_app.command("show")
def docs_show(
    path: Annotated[str, typer.Argument(help="Document path (or id).")],
    as_json: JsonFlag = False,
) -> None:
    """Show one document: metadata, warnings, sections and chunks with breadcrumbs."""
    with _errors(as_json):
        with _open(vectors=False) as kb:
            doc = kb.get_document(path)
        if as_json:
            _print_json(document_view(doc, with_chunks=True))
            return
        out.print(f"[bold]{doc.title}[/bold]  ({doc.path}, {doc.category}, id {doc.id})", highlight=False)
        out.print(f"summary: {doc.summary}\nkeywords: {', '.join(doc.keywords) or '-'}", highlight=False)
        for warning in doc.warnings:
            out.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
        for c in doc.chunks:
            preview = " ".join(c.text.split())[:80]
            out.print(f"[cyan]#{c.index}[/cyan] L{c.line_start}-{c.line_end} [dim]{c.breadcrumb}[/dim]\n    {preview}", highlight=False)


@docs_app.command("delete")
def docs_delete(
    path: Annotated[str, typer.Argument(help="Document path.")],
    as_json: JsonFlag = False,
) -> None:
    """Delete a document: rows, indexes and its stored original."""
    with _errors(as_json), owning("docs delete") as settings, _open_owned(settings) as kb:
        kb.delete(path)
        if as_json:
            _print_json({"deleted": path})
        else:
            out.print(f"deleted {path}", highlight=False)


@docs_app.command("lint")
def docs_lint(as_json: JsonFlag = False) -> None:
    """Report keywords that several documents share."""
    with _errors(as_json):
        with _open(vectors=False) as kb:
            lint = kb.lint()
        if as_json:
            _print_json(lint)
            return
        for item in lint:
            out.print(f"[yellow]lint:[/yellow] {item['message']}", highlight=False)
        out.print(f"{len(lint)} shared keyword(s)", highlight=False)


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations up to REVISION (default: the newest)."""
    from kbseek.adapters.sql import migrate
    from kbseek.adapters.sql.engine import make_engine

    with _errors(False), owning("db upgrade") as settings:
        now = migrate.upgrade(make_engine(settings.database_url), revision)
        out.print(f"database at revision {now}", highlight=False)


@db_app.command("current")
def db_current(as_json: JsonFlag = False) -> None:
    """Show the schema revision of the database and the newest one known."""
    from kbseek.adapters.sql import migrate
    from kbseek.adapters.sql.engine import make_engine

    from kbseek.home.readonly import require_database

    with _errors(as_json):
        settings = _settings()
        require_database(settings.database_url, settings.home)  # a look creates no database
        info = {
            "current": migrate.current(make_engine(settings.database_url)),
            "head": migrate.head(),
            "database_url": settings.describe()["database_url"],
        }
        info["up_to_date"] = info["current"] == info["head"]
        if as_json:
            _print_json(info)
        else:
            state = "up to date" if info["up_to_date"] else "needs 'kbseek db upgrade'"
            out.print(f"{info['database_url']}: revision {info['current']} (head {info['head']}, {state})", highlight=False)


from kbseek.interfaces.cli import evaluation  # noqa: E402,F401  (registers the eval verbs, trace)
from kbseek.interfaces.cli import mcp  # noqa: E402,F401  (mcp, tool-schema)
from kbseek.interfaces.cli import serve  # noqa: E402,F401  (serve)
from kbseek.interfaces.cli import maintenance  # noqa: E402,F401  (audit, invocations, metrics)


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
