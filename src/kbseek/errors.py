"""One error tree for every edge: messages say what was wrong, where, and how to fix it."""

from __future__ import annotations

from typing import Any

BY_CODE: dict[str, type[KbseekError]] = {}  # every error class by its stable code (the first class to use it)


class KbseekError(Exception):
    """Base of every error kbseek raises on purpose.

    ``code`` is stable and machine-readable (the REST API and ``--json`` outputs carry it);
    ``hint`` tells a person what to do next.

    >>> str(KbseekError("boom", hint="try again"))
    'boom (hint: try again)'
    """

    code = "kbseek_error"
    http_status = 400  # what the REST API answers; the MCP server and the CLI carry ``code`` instead

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        BY_CODE.setdefault(cls.code, cls)

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class ConfigError(KbseekError):
    """A setting has a bad value."""

    code = "config_error"
    http_status = 500


class DocumentError(KbseekError):
    """A document cannot be ingested: bad encoding, size, frontmatter or path.

    ``source`` names the file (or upload name); ``line`` is 1-based when known.
    """

    code = "document_error"
    http_status = 422

    def __init__(self, message: str, *, source: str, line: int | None = None, hint: str | None = None) -> None:
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {message}", hint=hint)
        self.source = source
        self.line = line


class FrontmatterError(DocumentError):
    """The YAML frontmatter is malformed or of the wrong shape."""

    code = "frontmatter_error"
    http_status = 422


class TooLargeError(DocumentError):
    """A document over ``max_file_bytes``."""

    code = "too_large"
    http_status = 413


class UnsafePathError(KbseekError):
    """A document path or category could escape the knowledge base or is not printable."""

    code = "unsafe_path"
    http_status = 400


class NotFoundError(KbseekError):
    """The named document (or other object) does not exist."""

    code = "not_found"
    http_status = 404


class StorageError(KbseekError):
    """The database or the file store failed; nothing half-written was kept."""

    code = "storage_error"
    http_status = 503


class StorageFullError(StorageError):
    """The disk under the data home is full: the write was refused whole."""

    code = "storage_full"
    http_status = 507


class WriteConflictError(KbseekError):
    """Another write to the same document, or a repair, held it for too long: nothing was changed; retry."""

    code = "conflict"
    http_status = 409


class InvalidRequest(KbseekError):
    """A ``lookup_knowledge`` (or other tool) request with a wrong field: the message names it."""

    code = "invalid_request"
    http_status = 422


class QueryError(KbseekError):
    """A query parameter is out of range."""

    code = "invalid_query"
    http_status = 422


class InvalidOption(KbseekError):
    """A command-line or API option with a value that cannot be used (``--since 99999999d``)."""

    code = "invalid_option"
    http_status = 422


class EmbeddingError(KbseekError):
    """The embedding model or server failed; lookups fall back to the lexical lanes."""

    code = "embedding_error"
    http_status = 503


class EmbeddingStopped(EmbeddingError):
    """Document embedding was asked to stop (shutdown); what was embedded so far is kept."""

    code = "embedding_stopped"


class RerankError(KbseekError):
    """The reranker endpoint failed or is resting after a failure; recall keeps its own ranking."""

    code = "rerank_error"
    http_status = 503


class Unavailable(KbseekError):
    """The knowledge base cannot be had (yet): a host that opens it in the background is still loading it."""

    code = "unavailable"
    http_status = 503


class HomeInUse(KbseekError):
    """A command that writes found the data home owned by another process (``owner`` names it)."""

    code = "home_in_use"
    http_status = 409

    def __init__(self, message: str, *, owner: Any, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.owner = owner


class ReadOnlyError(KbseekError):
    """Something tried to write through a knowledge base opened read-only."""

    code = "read_only"
    http_status = 409


class SchemaNotCurrent(KbseekError):
    """The database is missing or at an older schema, and this opening may not migrate it."""

    code = "schema_not_current"
    http_status = 503


class OperationError(KbseekError):
    """A maintenance operation (backup, restore, doctor) cannot be done as asked."""

    code = "operation_error"


class SourceError(KbseekError):
    """A source of documents (a Git repository) could not be read: git failed, timed out or is not installed."""

    code = "source_error"
    http_status = 502


class DatasetError(KbseekError):
    """An evaluation dataset or golden-case file is missing or malformed: the file and the case are named."""

    code = "dataset_error"


class LiveEvalError(KbseekError):
    """A live evaluation against a server failed (unreachable, or an answer that is not a lookup)."""

    code = "live_eval_error"


def http_status(code: str | None, default: int = 422) -> int:
    """The HTTP status of an error ``code`` (a report carries the code, not the exception).

    >>> http_status("not_found"), http_status("too_large"), http_status(None)
    (404, 413, 422)
    """
    cls = BY_CODE.get(code or "")
    return cls.http_status if cls is not None else default


# Hints written for the command line, as each other interface says them: (hint, REST, MCP)
_EDGE_HINTS = (("see 'kbseek docs list'", "see GET /api/documents", "resources/list names every document"),)
# What failed inside the server, said without its internals (SQL text, file paths, URLs stay in the log)
INTERNAL_FAILURES = {
    "storage_error": "the knowledge base could not store or read the data; nothing half-written was kept",
    "storage_full": "the disk under the data home is full; the write was refused whole",
    "embedding_error": "the embedding server failed",
    "config_error": "the server's configuration is not valid",
}


def edge_hint(hint: str | None, edge: str) -> str | None:
    """A hint as the ``edge`` ("rest" or "mcp") says it: a command-line command becomes that interface's route.

    >>> edge_hint("see 'kbseek docs list'", "rest"), edge_hint("try again", "mcp")
    ('see GET /api/documents', 'try again')
    """
    if hint is None:
        return None
    for cli, rest, mcp in _EDGE_HINTS:
        hint = hint.replace(cli, rest if edge == "rest" else mcp)
    return hint


def public_message(code: str, message: str, reference: str) -> str:
    """What a client is told of an error: the message, or for a failure inside the server (``INTERNAL_FAILURES``)
    a clean sentence pointing at the log line (``reference``, e.g. the request id) that has the details.

    >>> print(public_message("storage_error", "could not store a.md: IntegrityError [SQL: INSERT ...]", "a1b2c3d4"))
    ... # doctest: +NORMALIZE_WHITESPACE
    the knowledge base could not store or read the data; nothing half-written was kept
    (details in the server log, request a1b2c3d4)
    >>> public_message("not_found", "no document 'a.md'", "a1b2c3d4")
    "no document 'a.md'"
    """
    if code not in INTERNAL_FAILURES:
        return message
    return f"{INTERNAL_FAILURES[code]} (details in the server log, request {reference})"
