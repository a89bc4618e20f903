"""Asking the knowledge base: ``kbseek search`` (ranked chunks) and ``kbseek lookup`` (the agent tool's answer).

Both read beside whoever owns the data home.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kbseek.errors import InvalidRequest
from kbseek.interfaces.cli.common import JsonFlag, emit, exit_on_error, open_reading, say
from kbseek.lookup.render import FORMATS, legacy_view, render_text, response_view
from kbseek.lookup.views import hit_view, search_view


def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=1000, help="How many chunks.")] = 10,
    category: Annotated[str | None, typer.Option(help="Only this category.")] = None,
    policy: Annotated[str | None, typer.Option(help="hybrid | dense | lexical (default: the setting).")] = None,
    threshold: Annotated[float | None, typer.Option(help="Minimum cosine similarity for the dense lane.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Ranked chunks with their document, breadcrumb and scores."""
    with exit_on_error(as_json):
        with open_reading() as kb:
            result = kb.search(query, top_k=top_k, category=category, policy=policy, threshold=threshold)
        emit(result, as_json, _print_search, view=search_view)


def _print_search(result: Any) -> None:
    for note in result.notes:
        say(f"[yellow]note:[/yellow] {note}")
    _print_hits(result.hits)
    say(f"[dim]{len(result.hits)} hit(s) in {result.timings_ms['total']:.1f} ms[/dim]")


def _print_hits(hits: Any) -> None:
    for hit in hits:
        c = hit.chunk
        say(
            f"[cyan]{hit.rank:>2}[/cyan] {hit.score:7.3f}  [bold]{c.source_path}[/bold]:{c.line_start}-{c.line_end}"
            f"  [dim]{c.breadcrumb}[/dim]"
        )
        say("      " + " ".join(c.text.split())[:160])


def lookup(
    query: Annotated[str, typer.Argument(help="The agent's question, alert text or error code.")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=50, help="At most this many evidence pieces.")] = 5,
    policy: Annotated[
        str | None, typer.Option(help="hybrid | dense | lexical | legacy (default: the setting).")
    ] = None,
    category: Annotated[str | None, typer.Option(help="Only this category.")] = None,
    filter_: Annotated[list[str] | None, typer.Option("--filter", help="FIELD=VALUE on frontmatter; repeat.")] = None,
    session: Annotated[str | None, typer.Option(help="Session id: evidence given earlier comes back DEDUPED.")] = None,
    expand: Annotated[str, typer.Option(help="none | section | neighbors")] = "none",
    section: Annotated[str | None, typer.Option(help="One section: PATH#ANCHOR or '#heading path'.")] = None,
    dedup: Annotated[str, typer.Option(help="section | document")] = "section",
    budget: Annotated[int | None, typer.Option(help="Characters of evidence (default: the setting).")] = None,
    rewrite: Annotated[str | None, typer.Option(help="off | expand | multi (default: the setting).")] = None,
    output: Annotated[str, typer.Option("--format", help="text | json | legacy")] = "text",
    explain: Annotated[bool, typer.Option(help="Also show the L0 hint and the fused recall before levels.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """lookup_knowledge: levelled evidence grouped by document, as an agent receives it."""
    fmt = "json" if as_json else output
    with exit_on_error(fmt != "text"):
        if fmt not in FORMATS:
            raise InvalidRequest(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
        request = {
            "query": query,
            "top_k": top_k,
            "policy": policy,
            "category": category,
            "session_id": session,
            "filters": _filters(filter_ or []) or None,
            "expand": expand,
            "section": section,
            "dedup": dedup,
            "budget_chars": budget,
            "rewrite": rewrite,
        }
        with open_reading() as kb:
            response = kb.lookup_knowledge({k: v for k, v in request.items() if v is not None})
        emit(response, fmt != "text", lambda r: _print_answer(r, explain), view=lambda r: _answer_view(r, fmt, explain))


def _filters(items: list[str]) -> dict[str, list[str]]:
    """``--filter FIELD=VALUE`` options, values of one field together.

    >>> _filters(["team=payments", " env = prod", "team=core"])
    {'team': ['payments', 'core'], 'env': ['prod']}
    """
    filters: dict[str, list[str]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InvalidRequest(f"--filter {item!r}: expected FIELD=VALUE")
        filters.setdefault(name.strip(), []).append(value.strip())
    return filters


def _answer_view(response: Any, fmt: str, explain: bool) -> Any:
    if fmt == "legacy":
        return legacy_view(response)
    view = response_view(response)
    if explain:
        view["ranked"] = [hit_view(h) for h in response.ranked]
    return view


def _print_answer(response: Any, explain: bool) -> None:
    if explain:
        _print_hint(response)
    say(render_text(response), markup=False)
    timings = ", ".join(f"{k} {v:.1f}" for k, v in response.timings_ms.items())
    say(f"[dim]ms: {timings}[/dim]")


def _print_hint(response: Any) -> None:
    hint = response.hint
    say(
        f"[bold]L0 hint[/bold]: {len(hint.matches)} match(es); keywords: {', '.join(hint.matched_keywords) or '-'};"
        f" domains: {', '.join(hint.domains) or '-'}; single domain: {hint.single_domain or '-'}"
    )
    for m in hint.matches:
        kind = ("exact " if m.exact else "partial ") + m.field
        say(f"   {m.score:5.2f} {kind:16} {m.path}  {', '.join(m.matched_keywords)}")
    f = response.filter
    if f.category:
        state = " (relaxed: it matched nothing)" if f.relaxed else ""
        say(f"filter: category={f.category} from {f.source}{state}")
    for note in response.notes:
        say(f"[yellow]note:[/yellow] {note}")
    say("[bold]fused recall[/bold] (before relevance levels):")
    _print_hits(response.ranked[:10])
