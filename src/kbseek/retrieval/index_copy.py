"""One copy of the in-memory lexical indexes (L0 keywords, BM25, the document cards and chunks), and the change a
refresh computes once and applies to each copy (``rwlock.TwoCopies`` keeps two; ``indexes`` drives them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kbseek.core.analysis import Analyzer
from kbseek.core.keywords import KeywordIndex
from kbseek.core.lexical import BM25Index
from kbseek.core.models import Chunk, DocumentCard, StoredDocument

MAX_TERM_CHARS = 40


def dictionary_words(doc: StoredDocument | DocumentCard) -> list[str]:
    """User-dictionary terms a document contributes: its keywords, and its title when the title
    is one term (no spaces, at most 20 characters, e.g. ``支付网关``); sentences are not terms."""
    terms = [k for k in doc.keywords if len(k) <= MAX_TERM_CHARS]
    title = doc.title.strip()
    if title and len(title) <= 20 and not any(ch.isspace() for ch in title):
        terms.append(title)
    return terms


def lexical_text(chunk: Chunk) -> str:
    """What BM25 indexes for a chunk: its breadcrumb, path stem and text."""
    stem = chunk.source_path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return f"{chunk.breadcrumb}\n{stem}\n{chunk.text}"


@dataclass(slots=True)
class Change:
    """One refresh, computed once and applied to each copy of the indexes."""

    version: int
    gone: list[str]  # document ids
    loaded: list[StoredDocument]  # added or changed
    removed_chunks: list[str]  # of the documents gone or changed
    words: list[str]  # the whole user dictionary
    tokens: dict[str, list[str]]  # chunk id -> tokens, for every chunk of ``loaded``
    chinese: dict[str, float] = field(default_factory=dict)  # chunk id -> its share of Chinese letters, as tokens
    retokenised: dict[str, list[str]] = field(default_factory=dict)  # kept chunks the dictionary change affects
    reentries: list[str] = field(default_factory=list)  # kept documents whose L0 entry contains a changed word
    retag_from: str | None = None  # the analyser version whose cached tokens stay valid under the new one


class IndexCopy:
    """One complete copy of the in-memory indexes."""

    def __init__(self, k1: float, b: float) -> None:
        self.analyzer = Analyzer()
        self.keywords = KeywordIndex(self.analyzer)
        self.bm25 = BM25Index(k1=k1, b=b)
        self.documents: dict[str, DocumentCard] = {}
        self.chunks: dict[str, Chunk] = {}
        self.version = -1
        self.chunk_chinese: dict[str, float] = {}  # each chunk's share of Chinese letters (``cjk_share``)
        self.chinese_share = 0.0  # their mean: which script the knowledge base is mostly written in
        self.chinese_chunks = 0.0  # the share of chunks written mostly in Chinese (half their letters or more)

    def apply(self, change: Change) -> None:
        for doc_id in [*change.gone, *(d.id for d in change.loaded)]:
            self._remove(doc_id)
        self.analyzer.set_words(change.words)
        for doc_id in change.reentries:
            self.keywords.upsert(self.documents[doc_id])
        for chunk_id, tokens in change.retokenised.items():
            self.bm25.add(chunk_id, tokens, group=self.chunks[chunk_id].category)
        for doc in change.loaded:
            card = self.documents[doc.id] = DocumentCard(
                id=doc.id,
                path=doc.path,
                title=doc.title,
                summary=doc.summary,
                keywords=doc.keywords,
                category=doc.category,
                outline=doc.outline,
                fields=doc.frontmatter,
                content_hash=doc.content_hash,
                chunk_ids=tuple(c.id for c in doc.chunks),
                updated_at=doc.updated_at,
                origin=doc.origin,
            )
            self.keywords.upsert(card)
            for chunk in doc.chunks:
                self.chunks[chunk.id] = chunk
                self.chunk_chinese[chunk.id] = change.chinese[chunk.id]
                self.bm25.add(chunk.id, change.tokens[chunk.id], group=doc.category)
        # fsum is exact, so the mean does not depend on the order documents were applied in
        shares = self.chunk_chinese.values()
        self.chinese_share = math.fsum(shares) / len(shares) if shares else 0.0
        self.chinese_chunks = sum(share >= 0.5 for share in shares) / len(shares) if shares else 0.0
        self.version = change.version

    def _remove(self, doc_id: str) -> None:
        doc = self.documents.pop(doc_id, None)
        if doc is None:
            return
        self.keywords.remove(doc_id)
        self.bm25.remove(doc.chunk_ids)
        for chunk_id in doc.chunk_ids:
            self.chunks.pop(chunk_id, None)
            self.chunk_chinese.pop(chunk_id, None)
