"""The ``kbseek`` command line: verbs for people, ``--json`` for machines.

``common`` holds the app, its global options, error handling, opening the knowledge base and printing; each other
module holds one group of commands (``documents``, ``retrieval``, ``records``, ``evaluation``, ``maintenance``,
``serve``, ``mcp``, ``sync``) as plain functions and sub-apps. This module only puts them together, in the order
``kbseek --help`` lists them, and gives the console script its ``main``.
"""

from __future__ import annotations

from kbseek.interfaces.cli import documents, evaluation, maintenance, mcp, records, retrieval, serve, sync
from kbseek.interfaces.cli.common import app

__all__ = ["app", "main"]

# (name, function) in the order of ``kbseek --help``; the groups are listed after the commands
COMMANDS = (
    ("ingest", documents.ingest),
    ("search", retrieval.search),
    ("lookup", retrieval.lookup),
    ("trace", records.trace),
    ("verify-summary", records.verify_summary),
    ("mcp", mcp.mcp),
    ("tool-schema", mcp.tool_schema),
    ("serve", serve.serve),
    ("watch", sync.watch),
    ("audit", records.audit),
    ("metrics", records.metrics),
    ("doctor", maintenance.doctor),
    ("reindex", maintenance.reindex),
    ("backup", maintenance.backup),
    ("restore", maintenance.restore),
)
GROUPS = (
    ("docs", documents.docs_app),
    ("sync", sync.sync_app),
    ("db", maintenance.db_app),
    ("eval", evaluation.eval_app),
    ("invocations", records.invocations_app),
)


def _assemble() -> None:
    for name, command in COMMANDS:
        app.command(name)(command)
    for name, group in GROUPS:
        app.add_typer(group, name=name)


_assemble()


def main() -> None:
    app()
