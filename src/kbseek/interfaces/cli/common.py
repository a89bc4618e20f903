"""What every command shares: the ``kbseek`` app and its global options, the settings they make, errors as one
line and exit code 2, opening the knowledge base (read-only beside the data home's owner, or holding the home to
write), and printing a result as JSON or as text.

The knowledge base, the evaluation and the maintenance modules are imported by the command that needs them, not
here: ``kbseek --help`` and a typo's usage line should not wait for the retrieval stack to load.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from kbseek import __version__
from kbseek.errors import KbseekError
from kbseek.maintenance.home import holding, owner_of
from kbseek.observability.logs import configure_logging, set_process_actor
from kbseek.settings import Settings

if TYPE_CHECKING:
    from kbseek.service import KnowledgeBase

T = TypeVar("T")

# Plain help (click's): typer's rich panels show every flag as taking a value ("--json <bool>", "-v <int>")
HELP: dict[str, Any] = {
    "no_args_is_help": True,
    "rich_markup_mode": None,
    "context_settings": {"max_content_width": 120},
}
app = typer.Typer(add_completion=False, help="kbseek: knowledge retrieval for AIOps agents.", **HELP)

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (see schemas/).")]


class GlobalOptions:
    """The options given before the command (``kbseek --home PATH -v COMMAND``), for this process."""

    home: Path | None = None
    verbose: int = 0
    log_json: bool = False


def _print_version(value: bool) -> None:
    if value:
        print(f"kbseek {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    home: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Data home (default: KBSEEK_HOME or ./.kbseek).")
    ] = None,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="-v info, -vv debug logs.")] = 0,
    log_json: Annotated[bool, typer.Option("--log-json", help="Logs as JSON lines (KBSEEK_LOG_FORMAT=json).")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    GlobalOptions.home, GlobalOptions.verbose, GlobalOptions.log_json = home, verbose, log_json
    set_process_actor(f"cli:{_user()}")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def load_settings() -> Settings:
    """The settings (environment, ``kbseek.toml``) with the global options over them; logging configured by them."""
    overrides: dict[str, Any] = {"home": GlobalOptions.home} if GlobalOptions.home else {}
    if GlobalOptions.verbose:
        overrides["log_level"] = "DEBUG" if GlobalOptions.verbose > 1 else "INFO"
    if GlobalOptions.log_json:
        overrides["log_format"] = "json"
    settings = Settings(**overrides)
    configure_logging(settings.log_level, settings.log_format)
    return settings


@contextmanager
def exit_on_error(as_json: bool) -> Iterator[None]:
    """Map kbseek errors to a message with a hint (or a JSON error) and exit code 2."""
    try:
        yield
    except KbseekError as exc:
        if as_json:
            print(
                json.dumps({"error": {"code": exc.code, "message": exc.message, "hint": exc.hint}}, ensure_ascii=False)
            )
        else:
            err.print(
                f"[red]error:[/red] {exc.message}" + (f"\n[dim]hint: {exc.hint}[/dim]" if exc.hint else ""),
                highlight=False,
            )
        raise typer.Exit(2) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        message = f"setting {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        if as_json:
            print(json.dumps({"error": {"code": "config_error", "message": message, "hint": None}}, ensure_ascii=False))
        else:
            err.print(f"[red]error:[/red] {message}", highlight=False)
        raise typer.Exit(2) from exc


def open_reading(*, vectors: bool = True) -> KnowledgeBase:
    """The knowledge base, read-only: reading commands never migrate, repair or write the data home, so they run
    beside the process that owns it (``kbseek serve``), and say so once. Their vectors come from the database's
    embedding cache (the owner's Milvus Lite is its own); ``vectors=False`` skips the dense lane altogether."""
    from kbseek.service import KnowledgeBase  # imported here: start-up cost (see the module's docstring)

    settings = load_settings()
    owner = owner_of(settings.home)
    if owner is not None:
        err.print(
            f"note: {owner.describe()} owns {settings.home}; reading beside it"
            + (" (vectors from the database's embedding cache)" if vectors and settings.embedder != "none" else ""),
            highlight=False,
        )
    if not vectors:
        settings = settings.model_copy(update={"embedder": "none"})
    return KnowledgeBase.open(settings, read_only=True)


@contextmanager
def owning(command: str) -> Iterator[Settings]:
    """Hold the data home while a writing command runs; refuse, naming the owner, if another process holds it."""
    with holding(load_settings(), command) as settings:
        yield settings


def open_owned(settings: Settings) -> KnowledgeBase:
    """The knowledge base opened to write (migrated, repaired), by a command inside :func:`owning`."""
    from kbseek.service import KnowledgeBase  # imported here: start-up cost (see the module's docstring)

    return KnowledgeBase.open(settings)


def say(text: str, *, markup: bool = True) -> None:
    """Text to stdout, unhighlighted; ``[dim]``-style markup applies unless ``markup`` is off (text from the data)."""
    out.print(text, highlight=False, markup=markup)


def print_json(data: Any) -> None:
    """``data`` as indented JSON, non-ASCII as itself, times in ISO 8601."""
    print(json.dumps(data, ensure_ascii=False, indent=2, default=_iso_time))


def _iso_time(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def emit(result: T, as_json: bool, text: Callable[[T], None], view: Callable[[T], Any] | None = None) -> None:
    """Print a command's result: as JSON (``view`` makes its JSON shape, default the result itself) with
    ``--json``, else as ``text`` prints it for a person."""
    if as_json:
        print_json(result if view is None else view(result))
    else:
        text(result)


FILE_STYLES = {"failed": "red", "added": "green", "updated": "yellow"}


def print_file_reports(files: Any, *, chunks: bool = False) -> None:
    """One line per file an ingest or a sync changed or failed (unchanged ones are quiet), its reason and its
    warnings below it; names and reasons are printed as text, never as console markup."""
    for f in files:
        if f.status == "unchanged":
            continue
        style = FILE_STYLES.get(f.status, "white")
        detail = f" ({f.chunks} chunks)" if chunks and f.status != "failed" else ""
        say(f"[{style}]{f.status:8}[/{style}] {escape(f.path or f.source)}{detail}")
        if f.reason:
            say(f"         [red]{escape(f.reason)}[/red]")
        for warning in f.warnings:
            say(f"         [yellow]warning:[/yellow] {escape(warning)}")
