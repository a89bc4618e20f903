"""One bilingual analyser for indexing and queries: Chinese words, English stems, identifiers.

Pipeline: NFKC → noise removed (IPs, UUIDs, timestamps, long hex ids, ``{placeholder}`` and
``{{ $labels.x }}`` templates) → identifiers kept whole *and* split (``ERR_TIMEOUT`` → ``err_timeout``,
``err``, ``timeout``; ``HighCPUUsage`` → ``highcpuusage``, ``high``, ``cpu``, ``usage``) → a word and
an adjacent number also make a pair token (``HTTP 502`` → ``http_502``) → Chinese runs segmented
by jieba (search mode) with a user dictionary of the knowledge base's keywords and titles →
user-dictionary phrases that mix scripts or hold spaces (``CPU使用率``, ``Too many connections``)
matched whole → stopwords dropped, English words stemmed (Snowball), all lower-case.

``version`` names the rules and the dictionary: text analysed under another version must be
analysed again.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import threading
import unicodedata
from collections.abc import Iterable

import jieba
import Stemmer

from kbseek.core import stopwords
from kbseek.core.alertline import strip_noise

RULES_VERSION = "a3"
jieba.setLogLevel(logging.WARNING)

_SEGMENTS = re.compile(
    r"(?P<id>[A-Za-z0-9](?:[A-Za-z0-9_.\-:/]*[A-Za-z0-9])?)"
    r"|(?P<cjk>[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)"
)
_ID_SPLIT = re.compile(r"[_.\-:/]+")
_CAMEL = re.compile(r"[A-Z0-9]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")
_PAIR = re.compile(r"\b([A-Za-z]{2,12})\s+(\d{2,5})\b")
_HASHLIKE = re.compile(r"^(?=(?:.*\d){3})(?=(?:.*[a-z]){2})[a-z0-9]{8,}$")
_CJK_CHAR = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def _is_noise(chunk: str) -> bool:
    """Hash-like pieces of identifiers: ``7d9f8b6c5d``, ``x2x4z`` (but not ``k8s``, ``v1beta1``)."""
    lowered = chunk.lower()
    if _HASHLIKE.match(lowered):
        return True
    switches = sum(1 for a, b in zip(lowered, lowered[1:]) if a.isdigit() != b.isdigit())
    return len(lowered) >= 5 and switches >= 4


def normalize(text: str) -> str:
    """NFKC and lower-case: full-width letters and digits become ASCII (``ＥＲＲ`` → ``err``)."""
    return unicodedata.normalize("NFKC", text).lower()


def contains_term(text: str, term: str) -> bool:
    """``term`` in ``text``, on identifier boundaries where the term has an ASCII letter or digit at its edge: an
    identifier is not found inside a longer one, Chinese terms are found anywhere.

    >>> contains_term("oom killed the pod", "oom"), contains_term("room 12", "oom")
    (True, False)
    >>> contains_term("err_timeout_x", "err_timeout")
    False
    >>> contains_term("支付超时怎么办", "超时")
    True
    """
    start = text.find(term)
    while start >= 0:
        end = start + len(term)
        left_ok = not _ascii_word(term[0]) or start == 0 or not _identifier_char(text[start - 1])
        right_ok = not _ascii_word(term[-1]) or end == len(text) or not _identifier_char(text[end])
        if left_ok and right_ok:
            return True
        start = text.find(term, start + 1)
    return False


def _ascii_word(char: str) -> bool:
    return char.isascii() and char.isalnum()


def _identifier_char(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char == "_")


def identifier_tokens(raw: str) -> list[str]:
    """Whole identifier (lower-case) when it has parts, then its parts; hash-like parts dropped.

    >>> identifier_tokens("HighCPUUsage"), identifier_tokens("max.poll.interval.ms")
    (['highcpuusage', 'high', 'cpu', 'usage'], ['max.poll.interval.ms', 'max', 'poll', 'interval', 'ms'])
    >>> identifier_tokens("ORA-00600"), identifier_tokens("pod-7d9f8b6c5d4")
    (['ora-00600', 'ora', '00600'], ['pod'])
    """
    whole, parts = _identifier(raw)
    return [whole, *parts] if whole else parts


_ASCII_WORD = re.compile(r"(?<![A-Za-z0-9])[A-Za-z][A-Za-z0-9]+(?![A-Za-z0-9])")
SPELLED_PARTS = 3  # a CamelCase name of this many parts or more is spelled out


def spell_out(text: str) -> str:
    """Each CamelCase name of three or more parts followed by its words, so a model that reads it in sub-word pieces
    also reads what it says; anything else unchanged.

    >>> spell_out("KubeQuotaAlmostFull > Meaning")
    'KubeQuotaAlmostFull (Kube Quota Almost Full) > Meaning'
    >>> spell_out("告警HighCPUUsage处理 > OOMKilled, etcd")
    '告警HighCPUUsage (High CPU Usage)处理 > OOMKilled, etcd'
    """

    def spelled(match: re.Match[str]) -> str:
        word = match.group(0)
        parts = _CAMEL.findall(word)
        camel = any(c.islower() for c in word) and any(c.isupper() for c in word[1:])
        return f"{word} ({' '.join(parts)})" if camel and len(parts) >= SPELLED_PARTS else word

    return _ASCII_WORD.sub(spelled, text)


def _identifier(raw: str) -> tuple[str | None, list[str]]:
    chunks = [c for c in _ID_SPLIT.split(raw) if c]
    kept = [c for c in chunks if not _is_noise(c)]
    parts = [p.lower() for chunk in kept for p in _CAMEL.findall(chunk)]
    if len(kept) < len(chunks) or len(parts) < 2:  # a pod/trace suffix makes the whole noise
        return None, parts
    return raw.lower(), parts


class Analyzer:
    """Text → tokens, the same way for documents and queries; thread-safe.

    >>> Analyzer().tokens("ERR_TIMEOUT 支付超时了怎么办")
    ['err_timeout', 'err', 'timeout', '支付', '超时']
    """

    def __init__(self, words: Iterable[str] = (), *, stem: bool = True) -> None:
        self._lock = threading.RLock()
        self._jieba = _new_tokenizer()
        self._stemmer = Stemmer.Stemmer("english") if stem else None
        self._stem_cache: dict[str, str] = {}
        self._words: set[str] = set()
        self._phrases: re.Pattern[str] | None = None
        self._version = ""
        self.set_words(words)

    @property
    def version(self) -> str:
        """Rules version + a digest of the user dictionary."""
        return self._version

    @property
    def words(self) -> frozenset[str]:
        return frozenset(self._words)

    def set_words(self, words: Iterable[str]) -> set[str]:
        """Replace the user dictionary; returns the words added or removed (changed texts need
        re-analysis only where they contain one of those)."""
        new = {w for w in (normalize(" ".join(str(x).split())) for x in words) if len(w) >= 2}
        with self._lock:
            changed = new ^ self._words
            for word in self._words - new:
                if _CJK_CHAR.search(word) and not _is_phrase(word):
                    self._jieba.del_word(word)
            for word in new - self._words:
                if _CJK_CHAR.search(word) and not _is_phrase(word):
                    self._jieba.add_word(word, freq=None)
            self._words = new
            phrases = sorted((w for w in new if _is_phrase(w)), key=len, reverse=True)
            self._phrases = re.compile("|".join(_phrase_pattern(p) for p in phrases)) if phrases else None
            digest = hashlib.sha256("\n".join(sorted(new)).encode("utf-8")).hexdigest()[:12]
            self._version = f"{RULES_VERSION}-{digest}"
            return changed

    def tokens(self, text: str) -> list[str]:
        """Analysed tokens in text order (duplicates kept: they are term frequencies), interned: a word recurs in
        thousands of chunks, and the indexes and a refresh's token lists then hold one string for it."""
        text = strip_noise(unicodedata.normalize("NFKC", text))
        lowered = text.lower()
        out: list[str] = []
        with self._lock:
            for match in _SEGMENTS.finditer(text):
                raw = match.group("id")
                if raw is not None:
                    out.extend(self._word_tokens(*_identifier(raw)))
                else:
                    out.extend(w for w in self._jieba.cut_for_search(match.group("cjk")) if w not in stopwords.CHINESE)
            out.extend(f"{a.lower()}_{b}" for a, b in _PAIR.findall(text))
            if self._phrases is not None:
                out.extend(m.group(0) for m in self._phrases.finditer(lowered))
        return list(map(sys.intern, out))

    def _word_tokens(self, whole: str | None, parts: list[str]) -> list[str]:
        # identifiers: the whole stays exact; parts are stemmed like words
        stemmed = [self._stem(p) for p in parts if p not in stopwords.ENGLISH]
        return [whole, *stemmed] if whole else stemmed

    def _stem(self, word: str) -> str:
        if self._stemmer is None or not word.isalpha() or len(word) <= 3:
            return word
        stemmed = self._stem_cache.get(word)
        if stemmed is None:
            stemmed = self._stemmer.stemWord(word)
            if len(self._stem_cache) < 200_000:
                self._stem_cache[word] = stemmed
        return stemmed


_BASE: jieba.Tokenizer | None = None
_BASE_LOCK = threading.Lock()


def _new_tokenizer() -> jieba.Tokenizer:
    """A jieba tokenizer with its own copy of the main dictionary, loaded once per process."""
    global _BASE
    with _BASE_LOCK:
        if _BASE is None:
            _BASE = jieba.Tokenizer()
            _BASE.initialize()
    tokenizer = jieba.Tokenizer()
    tokenizer.FREQ, tokenizer.total = dict(_BASE.FREQ), _BASE.total
    tokenizer.initialized = True
    return tokenizer


def _is_phrase(word: str) -> bool:
    """A dictionary entry that segmentation would split: spaces, or CJK next to ASCII."""
    return " " in word or (bool(_CJK_CHAR.search(word)) and bool(re.search(r"[a-z0-9]", word)))


def _phrase_pattern(phrase: str) -> str:
    escaped = re.escape(phrase)
    left = r"(?<![a-z0-9_])" if phrase[0].isascii() and phrase[0].isalnum() else ""
    right = r"(?![a-z0-9_])" if phrase[-1].isascii() and phrase[-1].isalnum() else ""
    return left + escaped + right
