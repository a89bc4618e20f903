"""Deterministic identities: the same content always gets the same ids.

* document id  = first 16 hex digits of sha256("doc\\0" + document path)
* chunk id     = first 16 hex digits of sha256("chunk\\0" + path + "\\0" + index + "\\0" + chunk hash)
* content hash = sha256 of the UTF-8 bytes, hex (documents: of the original file bytes)
* section anchor = GitHub's heading slug (lower-case; letters, digits, marks, ``-`` and ``_`` kept;
  spaces become ``-``), made unique in the document with ``-1``, ``-2`` ...; the preamble's is ``""``.
"""

from __future__ import annotations

import hashlib
import unicodedata


def sha256_hex(data: bytes | str) -> str:
    """Hex sha256 of text (UTF-8) or bytes.

    >>> sha256_hex("a")[:8]
    'ca978112'
    """
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def document_id(path: str) -> str:
    """The id of the document stored at ``path`` in the knowledge base.

    >>> document_id("api/payment-errors.md")
    '44993dafe63ed002'
    """
    return sha256_hex(f"doc\0{path}")[:16]


def chunk_id(path: str, index: int, chunk_hash: str) -> str:
    return sha256_hex(f"chunk\0{path}\0{index}\0{chunk_hash}")[:16]


def slugify(heading: str) -> str:
    """GitHub-style anchor slug of one heading.

    >>> slugify("步骤2: 查询系统日志"), slugify("ERR_TIMEOUT 超时"), slugify("立即操作（5分钟内）")
    ('步骤2-查询系统日志', 'err_timeout-超时', '立即操作5分钟内')
    """
    kept = []
    for char in heading.strip().lower():
        if char == " ":
            kept.append("-")
        elif char in "-_" or unicodedata.category(char)[0] in "LNM":
            kept.append(char)
    return "".join(kept)


class AnchorAllocator:
    """Hands out unique anchors within one document, GitHub's way (``x``, ``x-1``, ``x-2``)."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}

    def allocate(self, heading: str) -> str:
        base = slugify(heading) or "section"
        slug = base
        while slug in self._used:
            self._used[base] += 1
            slug = f"{base}-{self._used[base]}"
        self._used.setdefault(slug, 0)
        return slug
