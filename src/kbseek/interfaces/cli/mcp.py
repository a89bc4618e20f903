"""``kbseek mcp`` (the MCP server on stdio) and ``kbseek tool-schema`` (the agent tools' definitions)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Annotated

import typer

from kbseek.errors import InvalidRequest
from kbseek.interfaces.cli.common import err, exit_on_error, load_settings, open_reading, print_json
from kbseek.lookup.schema import LOOKUP, TOOLS, mcp_tool_definition, openai_tool_schema

SCHEMA_FORMATS = ("openai", "mcp")


def mcp() -> None:
    """Serve the knowledge base to an agent over MCP on stdin/stdout (logs go to stderr).

    Its tools only read, so it opens the data home read-only and runs beside whatever owns it (a kbseek serve,
    a kbseek ingest): documents written there reach it through the database."""
    from kbseek.interfaces.mcp_server import run_stdio  # imported here: start-up cost (see common)

    with exit_on_error(False):  # errors go to stderr as for every verb; stdout carries only the protocol
        with _stdout_to_stderr():
            if load_settings().scan_dirs:
                err.print(
                    "note: kbseek mcp does not sync scan_dirs (it only reads); kbseek serve or kbseek ingest does",
                    highlight=False,
                )
            kb = open_reading()
    try:
        run_stdio(kb)
    except KeyboardInterrupt:  # Ctrl-C in a terminal: a normal way to stop
        pass
    finally:
        kb.close()


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Anything printed while the knowledge base opens (a library's progress line, C code writing to fd 1)
    goes to stderr: stdout is the protocol, and the client reads its first line as JSON-RPC."""
    sys.stdout.flush()
    try:
        saved: int | None = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no usable fd 1 or 2: Python-level redirection still applies
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def tool_schema(
    fmt: Annotated[str, typer.Option("--format", help="openai (function calling) | mcp (tools/list entry)")] = "openai",
    tool: Annotated[str, typer.Option(help=f"The tool: {' | '.join(TOOLS)}.")] = LOOKUP,
    all_tools: Annotated[bool, typer.Option("--all", help="Every tool, as a JSON list.")] = False,
) -> None:
    """Print the agent tool's definition as JSON, generated from the same model that validates its calls."""
    with exit_on_error(True):
        if fmt not in SCHEMA_FORMATS:
            raise InvalidRequest(f"--format {fmt!r} is not one of {', '.join(SCHEMA_FORMATS)}")
        if tool not in TOOLS:
            raise InvalidRequest(f"--tool {tool!r} is not one of {', '.join(TOOLS)}")
        render = openai_tool_schema if fmt == "openai" else mcp_tool_definition
        print_json([render(name) for name in TOOLS] if all_tools else render(tool))
