"""Document identity inside the knowledge base: safe relative paths and categories."""

from __future__ import annotations

import re
import unicodedata

from kbseek.errors import UnsafePathError

DEFAULT_CATEGORY = "general"
MARKDOWN_SUFFIXES = (".md", ".markdown")
MAX_PATH_CHARS = 512
MAX_SEGMENT_CHARS = 200
MAX_SEGMENT_BYTES = 240  # file systems allow 255 bytes a name; the temp file adds a prefix and suffix
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")


def _check_segment(segment: str, *, what: str, raw: str) -> None:
    if segment in ("", ".", ".."):
        raise UnsafePathError(
            f"{what} {raw!r} has an empty, '.' or '..' part",
            hint="use a plain relative path such as 'api/payment-errors.md'",
        )
    if len(segment) > MAX_SEGMENT_CHARS or len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
        raise UnsafePathError(
            f"{what} {raw[:300]!r} has a part longer than {MAX_SEGMENT_CHARS} characters or "
            f"{MAX_SEGMENT_BYTES} bytes (a file system limit; Chinese takes 3 bytes a character)"
        )
    for char in segment:
        if char == "\0" or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            raise UnsafePathError(
                f"{what} {raw!r} contains a control character {char!r}",
                hint="rename the file with printable characters only",
            )
    if segment != segment.strip():
        raise UnsafePathError(f"{what} {raw!r} has a part with leading or trailing spaces")


def safe_document_path(raw: str) -> str:
    """Validate a document path (its identity) and return it in POSIX form.

    >>> safe_document_path("alertmanager/AlertmanagerFailedReload.md")
    'alertmanager/AlertmanagerFailedReload.md'
    >>> safe_document_path("../etc/passwd")
    Traceback (most recent call last):
    kbseek.errors.UnsafePathError: document path '../etc/passwd' has an empty, '.' or '..' part (hint: use a plain relative path such as 'api/payment-errors.md')
    """  # noqa: E501 - the doctest shows the whole message
    if not isinstance(raw, str) or not raw:
        raise UnsafePathError("document path is empty")
    if len(raw) > MAX_PATH_CHARS:
        raise UnsafePathError(f"document path is longer than {MAX_PATH_CHARS} characters")
    if raw.startswith(("/", "\\")) or _WINDOWS_DRIVE.match(raw):
        raise UnsafePathError(f"document path {raw!r} is absolute", hint="give a path relative to the knowledge base")
    if "\\" in raw:
        raise UnsafePathError(f"document path {raw!r} contains a backslash", hint="use '/'")
    for segment in raw.split("/"):
        _check_segment(segment, what="document path", raw=raw)
    if not raw.lower().endswith(MARKDOWN_SUFFIXES):
        raise UnsafePathError(f"document path {raw!r} is not a Markdown file", hint="name it *.md or *.markdown")
    return raw


def safe_category(raw: str) -> str:
    """Validate a category: one path segment, printable.

    >>> safe_category("api")
    'api'
    """
    if not isinstance(raw, str) or not raw.strip():
        raise UnsafePathError("category is empty")
    if "/" in raw or "\\" in raw:
        raise UnsafePathError(f"category {raw!r} contains a path separator", hint="use one word")
    _check_segment(raw, what="category", raw=raw)
    return raw


def category_for(path: str, frontmatter_category: str | None, override: str | None = None) -> str:
    """Category precedence: an explicit override, the frontmatter's, the first folder, ``general``.

    >>> category_for("alertmanager/X.md", None), category_for("X.md", None), category_for("a/X.md", "api")
    ('alertmanager', 'general', 'api')
    """
    for candidate in (override, frontmatter_category):
        if candidate:
            return safe_category(candidate)
    folder, _, rest = path.partition("/")
    return folder if rest else DEFAULT_CATEGORY


def upload_path(file_name: str, category: str) -> str:
    """The identity of a single uploaded file: ``{category}/{filename}``.

    >>> upload_path("payment-errors.md", "api")
    'api/payment-errors.md'
    """
    if not isinstance(file_name, str) or "/" in file_name or "\\" in file_name:
        raise UnsafePathError(
            f"file name {file_name!r} must be a bare name without folders",
            hint="send 'payment-errors.md' and the category separately",
        )
    _check_segment(file_name, what="file name", raw=file_name)
    return safe_document_path(f"{safe_category(category)}/{file_name}")
