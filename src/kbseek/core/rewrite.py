"""Rule-based query transformation, optional, always with the original query kept.

* **Identifiers**: words the user split (``err timeout``, ``high cpu usage``) that spell a known
  identifier (``ERR_TIMEOUT``, ``HighCPUUsage``) add that identifier.
* **Synonyms and abbreviations** from a file: one group per line, ``OOM = 内存溢出, OutOfMemoryError``
  or ``502, Bad Gateway, 网关错误``; ``#`` starts a comment. A term found in the query adds the others.

``expand`` asks one query holding the additions; ``multi`` asks the original plus one variant per
rule that fired, and the caller fuses their rankings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kbseek.core.analysis import contains_term, identifier_tokens, normalize
from kbseek.core.modes import REWRITE_MODES
from kbseek.errors import ConfigError

MODES = REWRITE_MODES
MAX_VARIANTS = 4
_SPLIT = re.compile(r"[\s_\-./:]+")


@dataclass(frozen=True, slots=True)
class Rewrite:
    original: str
    additions: tuple[str, ...]  # terms added, in the order the rules found them
    variants: tuple[str, ...]  # original first

    @property
    def expanded(self) -> str:
        return " ".join((self.original, *self.additions)) if self.additions else self.original


def load_synonyms(path: Path) -> list[tuple[str, ...]]:
    """Parse a synonyms file into groups; errors name the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"synonyms file {path}: {exc}") from exc
    groups = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        terms = [t.strip() for t in re.split(r"[=,，、]", line) if t.strip()]
        if len(terms) < 2:
            raise ConfigError(f"{path}:{number}: a synonym group needs at least two terms, got {line!r}")
        groups.append(tuple(dict.fromkeys(terms)))
    return groups


class QueryRewriter:
    """Knows the identifiers of the knowledge base and the synonym groups.

    >>> rw = QueryRewriter(["ERR_TIMEOUT", "HighCPUUsage"], [("OOM", "内存溢出")])
    >>> rw.rewrite("支付 err timeout 怎么办").additions
    ('ERR_TIMEOUT',)
    >>> rw.rewrite("服务 OOM 了").variants
    ('服务 OOM 了', '服务 OOM 了 内存溢出')
    >>> rw.rewrite("ROOM 101").additions
    ()
    """

    def __init__(self, identifiers: list[str], synonyms: list[tuple[str, ...]]) -> None:
        self._identifiers: dict[tuple[str, ...], str] = {}
        for ident in identifiers:
            tokens = identifier_tokens(ident)
            parts = tuple(tokens[1:] if tokens and tokens[0] == ident.lower() else tokens)
            if len(parts) >= 2:
                self._identifiers.setdefault(parts, ident)
        self._synonyms = [tuple(normalize(t) for t in group) for group in synonyms]
        self._originals = synonyms

    def rewrite(self, query: str) -> Rewrite:
        folded = normalize(query)
        words = [w for w in _SPLIT.split(folded) if w]
        additions: list[str] = []
        variants: list[str] = []
        for parts, ident in self._identifiers.items():
            n = len(parts)
            if normalize(ident) in folded:
                continue
            if any(tuple(words[i : i + n]) == parts for i in range(len(words) - n + 1)):
                additions.append(ident)
                variants.append(f"{query} {ident}")
        for group, original in zip(self._synonyms, self._originals):
            present = [i for i, term in enumerate(group) if contains_term(folded, term)]
            if not present:
                continue
            others = [original[i] for i in range(len(group)) if i not in present]
            additions += others
            if others:
                variants.append(" ".join((query, *others)))
        additions = list(dict.fromkeys(additions))
        return Rewrite(query, tuple(additions), tuple(dict.fromkeys((query, *variants)))[:MAX_VARIANTS])
