"""YAML frontmatter: safe loading, validation, and the stand-ins for missing title and summary."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import yaml

from kbseek.core.markdown import first_heading, lines_outside_fences
from kbseek.core.models import Frontmatter
from kbseek.core.staleness import review_fields
from kbseek.errors import FrontmatterError

REQUIRED = ("title", "keywords", "summary")
OPTIONAL = ("category", "version", "author", "owner", "last_reviewed", "review_every")
SUMMARY_MAX_CHARS = 200
# Metadata is a few hundred characters; YAML is parsed in pure Python (about 10 µs a character, holding the
# interpreter), so a frontmatter of megabytes would cost every other request seconds.
MAX_FRONTMATTER_CHARS = 32_768

_OPEN = re.compile(r"\A---[ \t]*\r?\n")
_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$", re.MULTILINE)
_KEYWORD_SPLIT = re.compile(r"[,，、;；]")
_MARKUP = re.compile(r"(\*\*|__|`|~~|^\s*(?:[-*+]|\d+[.)])\s+|^\s*>\s?)")


def parse_frontmatter(
    text: str, *, source: str, file_name: str, max_keywords: int | None = None, max_values: int | None = None
) -> Frontmatter:
    """Split off and validate the frontmatter of ``text`` (the whole file, BOM removed).

    Missing required fields are reported in ``missing`` (the caller turns them into warnings);
    malformed YAML raises :class:`FrontmatterError` naming ``source`` and the file line, and so do more than
    ``max_keywords`` keywords or ``max_values`` fields and list items (all levels) when those are given.

    >>> text = "---\\ntitle: T\\nkeywords: a, b\\nsummary: S\\n---\\nbody"
    >>> fm = parse_frontmatter(text, source="x.md", file_name="x.md")
    >>> fm.title, fm.keywords, fm.body_line
    ('T', ('a', 'b'), 6)
    """
    fields, body_offset, body_line = _split(text, source)
    if max_values is not None and (count := _count_values(fields)) > max_values:
        raise FrontmatterError(
            f"frontmatter has {count:,} fields and list items, over the limit of {max_values:,}",
            source=source,
            line=2,
            hint="keep metadata short, or raise KBSEEK_MAX_FRONTMATTER_VALUES",
        )
    body = text[body_offset:]
    missing = tuple(name for name in REQUIRED if _is_blank(fields.get(name)))

    lines = _field_lines(text[:body_offset])
    title = _text_field(fields, "title", source, lines)
    title_source = "frontmatter"
    if not title:
        title, title_source = _first_h1(body), "h1"
        if not title:
            title, title_source = _stem(file_name), "filename"

    summary = _text_field(fields, "summary", source, lines)
    summary_source = "frontmatter"
    if not summary:
        summary = first_meaningful_line(body)
        summary_source = "first_line" if summary else "none"

    category = _text_field(fields, "category", source, lines) or None
    keywords = _keywords(fields.get("keywords"), source, lines.get("keywords"))
    if max_keywords is not None and len(keywords) > max_keywords:
        raise FrontmatterError(
            f"frontmatter has {len(keywords):,} keywords, over the limit of {max_keywords:,}",
            source=source,
            line=lines.get("keywords"),
            hint="keep the terms an alert or a question would name, or raise KBSEEK_MAX_KEYWORDS_PER_DOCUMENT",
        )
    review_fields(fields, source=source, lines=lines)  # owner, last_reviewed, review_every: refused when unreadable
    for name in ("version", "author"):
        if name in fields and fields[name] is not None:
            fields[name] = str(fields[name])
    return Frontmatter(
        title=title,
        summary=summary,
        keywords=keywords,
        category=category,
        fields=fields,
        title_source=title_source,
        summary_source=summary_source,
        missing=missing,
        body_offset=body_offset,
        body_line=body_line,
    )


def first_meaningful_line(body: str) -> str:
    """The first line of prose: not blank, not a heading, fence, table rule, comment or HTML."""
    lines = list(lines_outside_fences(body))
    for number, raw in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith(("#", "<", "|", "---", "===", "***", "![")):
            continue
        following = lines[number + 1].strip() if number + 1 < len(lines) else ""
        if following and set(following) <= {"="} | {"-"} and len(set(following)) == 1:
            continue  # a setext heading's text
        cleaned = _MARKUP.sub("", line).strip()
        if cleaned:
            return cleaned[:SUMMARY_MAX_CHARS]
    return ""


def _split(text: str, source: str) -> tuple[dict[str, Any], int, int]:
    opening = _OPEN.match(text)
    if not opening:
        return {}, 0, 1
    closing = _CLOSE.search(text, opening.end())
    if not closing:
        raise FrontmatterError(
            "frontmatter opened with '---' on line 1 is never closed",
            source=source,
            line=1,
            hint="end the frontmatter with a line holding only '---'",
        )
    block = text[opening.end() : closing.start()]
    if len(block) > MAX_FRONTMATTER_CHARS:
        raise FrontmatterError(
            f"frontmatter is {len(block):,} characters, over the limit of {MAX_FRONTMATTER_CHARS:,}",
            source=source,
            line=1,
            hint="keep metadata short; the document's text goes below it",
        )
    try:
        loaded = yaml.load(block, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, source) from exc
    except (ValueError, LookupError, AttributeError, TypeError, OverflowError, RecursionError) as exc:
        # PyYAML's own constructors fail so on values like 'updated: 2023-02-29' or '!!int x'
        raise FrontmatterError(
            f"frontmatter has a value YAML cannot read: {type(exc).__name__}: {str(exc)[:200]}",
            source=source,
            line=2,
            hint="quote dates and numbers that are not valid ('updated: \"2023-02-29\"')",
        ) from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise FrontmatterError(
            f"frontmatter must be a mapping of fields, got a {type(loaded).__name__}",
            source=source,
            line=2,
            hint="write 'title: ...', 'keywords: [...]', 'summary: ...' lines",
        )
    body_offset = closing.end()
    if text[body_offset : body_offset + 2] == "\r\n":
        body_offset += 2
    elif text[body_offset : body_offset + 1] == "\n":
        body_offset += 1
    body_line = text.count("\n", 0, body_offset) + 1
    try:
        fields = {_checked_text(str(k)): _jsonable(v) for k, v in loaded.items()}
    except (ValueError, RecursionError) as exc:
        raise FrontmatterError(
            f"frontmatter {exc}" if isinstance(exc, ValueError) else "frontmatter nests too deep",
            source=source,
            line=2,
            hint="keep fields to text, numbers, dates and flat lists",
        ) from None
    return fields, body_offset, body_line


def _yaml_error(exc: yaml.YAMLError, source: str) -> FrontmatterError:
    # Lines are counted in the file: +1 for 1-based, +1 for the opening '---'.
    problem_mark = getattr(exc, "problem_mark", None)
    context_mark = getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    detail = problem
    line = problem_mark.line + 2 if problem_mark is not None else 1
    if context and context_mark is not None and context_mark.line != getattr(problem_mark, "line", None):
        # the construct left open (an unclosed '[' or quote) is where the fix belongs
        detail = f"{context} opened on line {context_mark.line + 2}: {problem} on line {line}"
        line = context_mark.line + 2
    return FrontmatterError(
        f"malformed YAML frontmatter: {detail}",
        source=source,
        line=line,
        hint="check quoting, brackets and indentation on that line",
    )


def _field_lines(block: str) -> dict[str, int]:
    """1-based file line of each top-level field in the frontmatter block."""
    lines: dict[str, int] = {}
    for number, line in enumerate(block.splitlines(), 1):
        match = re.match(r"^([^\s#:][^:]*):", line)
        if match and number > 1:
            lines.setdefault(match.group(1).strip().strip("'\""), number)
    return lines


def _text_field(fields: dict[str, Any], name: str, source: str, lines: dict[str, int]) -> str:
    value = fields.get(name)
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        raise FrontmatterError(
            f"field '{name}' must be text, got a {'mapping' if isinstance(value, dict) else 'list'}",
            source=source,
            line=lines.get(name),
            hint=f"write '{name}: some text'",
        )
    return " ".join(str(value).split())


def _keywords(value: Any, source: str, line: int | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[Any] = _KEYWORD_SPLIT.split(value)
    elif isinstance(value, list):
        items = value
    else:
        raise FrontmatterError(
            f"field 'keywords' must be a list or a comma-separated string, got {type(value).__name__} {value!r}",
            source=source,
            line=line,
            hint="write 'keywords: [ERR_TIMEOUT, 超时]' or 'keywords: ERR_TIMEOUT, 超时'",
        )
    seen: dict[str, str] = {}
    for item in items:
        if isinstance(item, (dict, list)):
            raise FrontmatterError(f"every keyword must be plain text, got {item!r}", source=source, line=line)
        word = " ".join(str(item).split()) if item is not None else ""
        if word and word.casefold() not in seen:
            seen[word.casefold()] = word
    return tuple(seen.values())


class _Loader(yaml.SafeLoader):
    """SafeLoader without anchors and aliases: a 300-byte 'billion laughs' frontmatter expands to millions of
    values, and runbook metadata never needs them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in frontmatter", mark)
        return super().compose_node(parent, index)


MAX_DEPTH = 20


def _checked_text(value: str) -> str:
    """Text the databases can store: no lone surrogates (from YAML escapes like '\\ud800'), no NUL."""
    if "\0" in value:
        raise ValueError("has a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("has an invalid character (a lone surrogate)") from None
    return value


def _jsonable(value: Any, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise ValueError(f"nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {_checked_text(str(k)): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").replace("\0", "\ufffd")
    if isinstance(value, str):
        return _checked_text(value)
    if isinstance(value, float) and not math.isfinite(value):  # NaN and ±Infinity are not JSON
        return None
    return value


def _count_values(value: Any) -> int:
    """Fields and list items at every level.

    >>> _count_values({"a": 1, "b": [1, 2, {"c": 3}]})
    6
    """
    if isinstance(value, dict):
        return sum(1 + _count_values(v) for v in value.values())
    if isinstance(value, list):
        return sum(1 + _count_values(v) for v in value)
    return 0


def _is_blank(value: Any) -> bool:
    return value is None or (
        isinstance(value, (str, list, tuple))
        and not any(str(v).strip() for v in ([value] if isinstance(value, str) else value))
    )


def _first_h1(body: str) -> str:
    """The first level-1 heading, ATX or setext, outside code fences."""
    return first_heading(body, 1)


def _stem(file_name: str) -> str:
    stem = file_name.rsplit("/", 1)[-1]
    return stem.rsplit(".", 1)[0] if "." in stem else stem
