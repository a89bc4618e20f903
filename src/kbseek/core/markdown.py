"""Heading-aware, fence-aware Markdown chunking with breadcrumbs and section anchors.

Every chunk is an exact slice of the file text, so offsets and line ranges point at the original.
Sections run from one heading to the next; a section holding nothing but its heading is merged
into the deeper section that follows (so no chunk is a bare heading when content exists). Long
sections are packed from blocks (paragraphs, fenced code, tables) up to ``chunk_size``
characters; a block larger than that is split at sentence ends (。！？；.!?; and newlines), code
and tables at line ends, and only as a last resort inside a line. Consecutive pieces of one
section share up to ``overlap`` characters of prose (never code), and no chunk exceeds
``chunk_size``. The union of the chunks' spans is the whole body, except a body that is
whitespace only, which yields no chunk.

The heading stack pops every heading of the same or a deeper level before pushing a new one,
which stays right when levels are skipped (H1 → H3 → H3), unlike a stack sized by heading level.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass

from kbseek.core.ids import AnchorAllocator, chunk_id, sha256_hex
from kbseek.core.models import Chunk, Section

BREADCRUMB_SEPARATOR = " > "

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_NOT_PARAGRAPH = re.compile(r"^(?: {4,}|\t| {0,3}(?:[>|<]|[-*+][ \t]|\d{1,9}[.)][ \t]))")
_TABLE_LINE = re.compile(r"^ {0,3}\|")
_INLINE_MARKUP = re.compile(r"\*\*|__|`|~~|<[^>]+>")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_NEWLINE = re.compile("\n")
_SENTENCE_END = re.compile(r"(?:[。！？；!?;][”’」』）)\]]*|\.(?=\s)|\n)")


@dataclass(frozen=True, slots=True)
class _Heading:
    level: int
    text: str
    start: int  # offset of the heading's first line


@dataclass(frozen=True, slots=True)
class _Block:
    start: int
    end: int
    kind: str  # "text" | "code" | "table"


MAX_HEADING_CHARS = 1000  # a longer line is text: the heading patterns backtrack quadratically on such lines


class LimitError(ValueError):
    """A document has more headings or chunks than allowed (``what``, ``count``: at least that many, ``limit``)."""

    def __init__(self, what: str, count: int, limit: int) -> None:
        super().__init__(f"more than {limit:,} {what}" if count > limit else f"{count:,} {what}")
        self.what, self.count, self.limit = what, count, limit


def _atx(line: str) -> re.Match[str] | None:
    return _ATX.match(line) if len(line) <= MAX_HEADING_CHARS else None


def normalize_heading(raw: str) -> str:
    """Heading text as breadcrumbs and judgments use it: markup removed, whitespace collapsed.

    >>> normalize_heading("  **步骤2**:  查询 `system` 日志  ")
    '步骤2: 查询 system 日志'
    """
    text = _LINK.sub(r"\1", raw[:MAX_HEADING_CHARS])
    text = _INLINE_MARKUP.sub("", text)
    return " ".join(text.split())


def make_breadcrumb(title: str, headings: tuple[tuple[int, str], ...]) -> str:
    """Heading path joined with `` > ``, led by the document title when no H1 is on the stack.

    >>> make_breadcrumb("T", ((1, "支付网关错误码定义"), (2, "超时类错误"), (3, "ERR_TIMEOUT")))
    '支付网关错误码定义 > 超时类错误 > ERR_TIMEOUT'
    >>> make_breadcrumb("Disk runbook", ((2, "Mitigation"),))
    'Disk runbook > Mitigation'
    """
    names = [heading for _, heading in headings]
    if not headings or headings[0][0] != 1:
        names.insert(0, title)
    return BREADCRUMB_SEPARATOR.join(names)


def find_sections(text: str, body_offset: int = 0, *, max_headings: int | None = None) -> list[Section]:
    """Split the body into sections, the preamble (level 0) first when it is not blank.

    More than ``max_headings`` headings raise :class:`LimitError` as soon as the scan finds one too many."""
    headings = _scan(text, body_offset, max_headings)[0]
    anchors = AnchorAllocator()
    sections: list[Section] = []
    first = headings[0].start if headings else len(text)
    if text[body_offset:first].strip() or not headings:
        sections.append(Section(0, "", (), "", body_offset, first))
    stack: list[tuple[int, str]] = []
    for i, heading in enumerate(headings):
        while stack and stack[-1][0] >= heading.level:
            stack.pop()
        stack.append((heading.level, heading.text))
        # a blank preamble is folded into the first section, so spans cover the whole body
        start = body_offset if i == 0 and not sections else heading.start
        end = headings[i + 1].start if i + 1 < len(headings) else len(text)
        sections.append(Section(heading.level, heading.text, tuple(stack), anchors.allocate(heading.text), start, end))
    return sections


def chunk_document(
    text: str,
    *,
    body_offset: int,
    path: str,
    document_id: str,
    title: str,
    category: str,
    chunk_size: int = 800,
    overlap: int = 100,
    max_headings: int | None = None,
    max_chunks: int | None = None,
) -> tuple[list[Section], list[Chunk]]:
    """Sections and chunks of one document; see the module docstring for the rules.

    Past ``max_headings`` headings or ``max_chunks`` chunks it raises :class:`LimitError` early, before the
    work that grows with them."""
    sections = find_sections(text, body_offset, max_headings=max_headings)
    if not text[body_offset:].strip():
        return sections, []
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    drafts: list[tuple[Section, int, int, int]] = []  # section, start, end, overlap
    for group_start, section in _merge_bare_headings(text, sections):
        pieces = _pack(text, _blocks(text, group_start, section.end), chunk_size)
        previous: tuple[int, int, str, int] | None = None
        for start, end, last_kind, last_start in pieces:
            lead = 0
            if previous is not None and previous[2] == "text":
                # repeat prose from the previous piece's last block only, never code before it
                lead = _overlap_start(text, previous[3], previous[1], min(overlap, chunk_size - (end - start)))
            drafts.append((section, start - lead, end, lead))
            previous = (start, end, last_kind, last_start)
        if max_chunks is not None and len(drafts) > max_chunks:
            raise LimitError("chunks", len(drafts), max_chunks)
    chunks = []
    for index, (section, start, end, lead) in enumerate(drafts):
        piece = text[start:end]
        digest = sha256_hex(piece)
        chunks.append(
            Chunk(
                id=chunk_id(path, index, digest),
                document_id=document_id,
                index=index,
                total=len(drafts),
                title=title,
                breadcrumb=make_breadcrumb(title, section.headings),
                headings=section.headings,
                anchor=section.anchor,
                category=category,
                source_path=path,
                text=piece,
                content_hash=digest,
                start=start,
                end=end,
                line_start=bisect.bisect_right(line_starts, start),
                line_end=bisect.bisect_right(line_starts, max(start, end - 1)),
                overlap=lead,
            )
        )
    return sections, chunks


def lines_outside_fences(text: str) -> Iterator[str]:
    """The lines of ``text`` that are not inside a fenced code block (fences excluded)."""
    fence: str | None = None
    for line in text.splitlines():
        if fence is not None:
            if _closes(line, fence):
                fence = None
            continue
        fence = _opens(line)
        if fence is None:
            yield line


def _opens(line: str) -> str | None:
    """The fence (```` ``` ```` or ``~~~``, three or more) a line opens, if it opens one: a backtick fence's info
    string may not itself hold a backtick (that line is inline code)."""
    opening = _FENCE_OPEN.match(line)
    if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
        return opening.group(1)
    return None


def _closes(line: str, fence: str) -> bool:
    return re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", line) is not None


def unclosed_fence_line(text: str, body_offset: int = 0) -> int | None:
    """1-based line of a code fence that is never closed (the rest of the file is then code)."""
    _, fence_start = _scan(text, body_offset)
    return None if fence_start is None else text.count("\n", 0, fence_start) + 1


def _find_headings(text: str, body_offset: int) -> list[_Heading]:
    return _scan(text, body_offset)[0]


def first_heading(text: str, level: int = 1) -> str:
    """The first heading of ``level`` outside code fences, ATX or setext; the scan stops there.

    >>> first_heading(chr(10).join(["```", "# not this", "```", "## two", "# One"]))
    'One'
    """
    found = _scan(text, 0, stop_at_level=level)[0]
    return found[-1].text if found and found[-1].level == level else ""


def _scan(
    text: str, body_offset: int, limit: int | None = None, stop_at_level: int | None = None
) -> tuple[list[_Heading], int | None]:
    """Headings outside code fences, and where a never-closed fence opened (if one did); past ``limit``
    headings, :class:`LimitError`; with ``stop_at_level``, up to the first heading of that level."""
    headings: list[_Heading] = []
    fence_start = 0
    fence: str | None = None
    paragraph_start: int | None = None  # offset of the first line of the open paragraph
    paragraph_lines: list[str] = []
    position = body_offset
    for line in text[body_offset:].splitlines(keepends=True):
        start, position = position, position + len(line)
        content = line.rstrip("\r\n")
        if fence is not None:
            if _closes(content, fence):
                fence = None
            continue
        fence = _opens(content)
        if fence is not None:
            paragraph_start, fence_start = None, start
            continue
        atx = _atx(content)
        if atx and atx.group(2) and normalize_heading(atx.group(2)):
            headings.append(_Heading(len(atx.group(1)), normalize_heading(atx.group(2)), start))
            if _enough(headings, limit, stop_at_level):
                break
            paragraph_start = None
            continue
        if paragraph_start is not None and _SETEXT.match(content):
            heading = normalize_heading(" ".join(paragraph_lines))
            if heading:
                level = 1 if content.strip()[0] == "=" else 2
                headings.append(_Heading(level, heading, paragraph_start))
                if _enough(headings, limit, stop_at_level):
                    break
            paragraph_start = None
            continue
        if not content.strip() or _NOT_PARAGRAPH.match(content):
            paragraph_start = None
        elif paragraph_start is None:
            paragraph_start, paragraph_lines = start, [content]
        else:
            paragraph_lines.append(content)
    return headings, (fence_start if fence is not None else None)


def _enough(headings: list[_Heading], limit: int | None, stop_at_level: int | None) -> bool:
    """Whether the scan may stop (the heading level looked for is found); past ``limit``, LimitError."""
    if limit is not None and len(headings) > limit:
        raise LimitError("headings", len(headings), limit)
    return headings[-1].level == stop_at_level


def _merge_bare_headings(text: str, sections: list[Section]) -> list[tuple[int, Section]]:
    """Pair each section with where its chunks start: bare headings before it join it."""
    groups: list[tuple[int, Section]] = []
    pending: int | None = None
    for i, section in enumerate(sections):
        start = section.start if pending is None else pending
        following = sections[i + 1] if i + 1 < len(sections) else None
        if following is not None and following.level > section.level and _is_bare(text, section):
            pending = start
            continue
        groups.append((start, section))
        pending = None
    return groups


def _is_bare(text: str, section: Section) -> bool:
    body = text[section.start : section.end]
    if section.level == 0:
        return not body.strip()
    lines = body.lstrip().splitlines()  # a folded blank preamble may precede the heading
    rest = lines[1:]
    if lines and _SETEXT.match(lines[1] if len(lines) > 1 else "") and not _atx(lines[0]):
        rest = lines[2:]
    return not "".join(rest).strip()


def _blocks(text: str, start: int, end: int) -> list[_Block]:
    """Contiguous blocks covering [start, end); blank lines stick to the block before them."""
    blocks: list[_Block] = []
    fence: str | None = None
    position = start
    for line in text[start:end].splitlines(keepends=True):
        line_start, position = position, position + len(line)
        content = line.rstrip("\r\n")
        if fence is not None:
            blocks[-1] = _Block(blocks[-1].start, position, "code")
            if _closes(content, fence):
                fence = None
            continue
        fence = _opens(content)
        if fence is not None:
            blocks.append(_Block(line_start, position, "code"))
            continue
        kind = "table" if _TABLE_LINE.match(content) else "text"
        if not content.strip():
            if blocks:
                blocks[-1] = _Block(blocks[-1].start, position, blocks[-1].kind)
            else:
                blocks.append(_Block(line_start, position, "text"))
            continue
        previous = blocks[-1] if blocks else None
        continues = (
            previous is not None
            and previous.kind == kind
            and not text[previous.start : previous.end].endswith(("\n\n", "\n\r\n"))
            and previous.kind != "code"
        )
        if continues and previous is not None:
            blocks[-1] = _Block(previous.start, position, kind)
        else:
            blocks.append(_Block(line_start, position, kind))
    if blocks and blocks[-1].end < end:  # no trailing newline handled by splitlines already
        blocks[-1] = _Block(blocks[-1].start, end, blocks[-1].kind)
    return blocks


def _pack(text: str, blocks: list[_Block], limit: int) -> list[tuple[int, int, str, int]]:
    """Greedy packing of blocks into pieces of at most ``limit`` characters.

    Each piece is ``(start, end, kind of its last unit, start of the block that unit came from)``.
    """
    pieces: list[tuple[int, int, str, int]] = []
    current: tuple[int, int, str, int] | None = None
    for block in blocks:
        units = [block] if block.end - block.start <= limit else _split_block(text, block, limit)
        for unit in units:
            if current is not None and unit.end - current[0] <= limit:
                current = (current[0], unit.end, unit.kind, block.start)
                continue
            if current is not None:
                pieces.append(current)
            current = (unit.start, unit.end, unit.kind, block.start)
    if current is not None:
        pieces.append(current)
    return pieces


def _split_block(text: str, block: _Block, limit: int) -> list[_Block]:
    """Sentences (prose) or lines (code, tables), then hard cuts for what is still too long."""
    if block.kind == "text":
        cuts = [m.end() for m in _SENTENCE_END.finditer(text, block.start, block.end)]
    else:
        cuts = [m.end() for m in _NEWLINE.finditer(text, block.start, block.end)]
    bounds = sorted({block.start, *[c for c in cuts if block.start < c < block.end], block.end})
    units: list[_Block] = []
    for left, right in zip(bounds, bounds[1:]):
        while right - left > limit:
            units.append(_Block(left, left + limit, block.kind))
            left += limit
        if right > left:
            units.append(_Block(left, right, block.kind))
    return units


def _overlap_start(text: str, start: int, end: int, budget: int) -> int:
    """How many trailing characters of ``text[start:end]`` to repeat: a whole sentence if one fits."""
    if budget <= 0:
        return 0
    window_start = max(start, end - budget)
    window = text[window_start:end]
    for match in _SENTENCE_END.finditer(window):
        if match.end() < len(window) and window[match.end() :].strip():
            return len(window) - match.end()
    space = window.find(" ")
    if 0 <= space < len(window) - 1:
        return len(window) - space - 1
    return len(window)
