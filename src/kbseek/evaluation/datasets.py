"""Datasets: a folder of corpus, queries and judgments, or a golden-case file (``cases``), in one shape.

A dataset folder (see ``shared/data/README.md``) holds ``corpus.jsonl`` (BEIR) or ``docs/`` of Markdown,
``queries.jsonl`` and ``qrels.tsv``. A query with ``"answerable": false`` in its metadata and no judgments is a
question the corpus does not answer: kept for the no-answer metrics (right answer: no confident match). Judged ids
are a corpus id, a Markdown path, or a path and heading path (``file.md#H1/H2``): a retrieved chunk matches the
latter when its file is the same and its heading path starts with the judged one, segment by segment, headings
normalised as the chunker normalises them (:class:`JudgmentMapper`). A dataset's corpus is ingested once into a
cached data home keyed by its files and the settings that shape chunks (:func:`cache_home`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kbseek.core import metrics as m
from kbseek.core.analysis import normalize
from kbseek.core.markdown import normalize_heading
from kbseek.errors import DatasetError
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

CACHE_ENV = "KBSEEK_EVAL_CACHE"


@dataclass(frozen=True, slots=True)
class Query:
    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Dataset:
    name: str
    root: Path
    corpus: Path  # corpus.jsonl or docs/
    queries_file: Path
    qrels_file: Path
    queries: list[Query]
    qrels: m.Qrels
    unanswerable: list[Query] = field(default_factory=list)  # cases whose right answer is no confident match

    @property
    def is_markdown(self) -> bool:
        return self.corpus.is_dir()

    def files(self) -> dict[str, str]:
        return {"corpus": str(self.corpus), "queries": str(self.queries_file), "qrels": str(self.qrels_file)}


def load_dataset(
    root: Path,
    *,
    corpus: str | None = None,
    queries: str | None = None,
    qrels: str | None = None,
    split: str | None = None,
) -> Dataset:
    """Read a dataset folder; ``corpus``/``queries``/``qrels`` name other files inside it."""
    if not root.is_dir():
        raise DatasetError(f"dataset folder {root} does not exist")
    corpus_path = root / corpus if corpus else (root / "docs" if (root / "docs").is_dir() else root / "corpus.jsonl")
    queries_path, qrels_path = root / (queries or "queries.jsonl"), root / (qrels or "qrels.tsv")
    for path in (corpus_path, queries_path, qrels_path):
        if not path.exists():
            raise DatasetError(f"{path} does not exist", hint="see shared/data/README.md for the layout")
    grades: m.Qrels = {}
    with qrels_path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            parts = line.rstrip("\n").split("\t")
            if (number == 1 and parts[0] == "query-id") or not line.strip():
                continue
            if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
                raise DatasetError(f"{qrels_path}:{number}: expected 'query-id<TAB>corpus-id<TAB>score'")
            grades.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    chosen = []
    for number, row in enumerate(_jsonl(queries_path), 1):
        if "_id" not in row or "text" not in row:
            raise DatasetError(f"{queries_path}:{number}: a query needs '_id' and 'text'")
        query = Query(str(row["_id"]), str(row["text"]), row.get("metadata") or {})
        if split is None or query.metadata.get("split") == split:
            chosen.append(query)
    judged = [q for q in chosen if q.id in grades and q.metadata.get("answerable", True) is not False]
    if not judged:
        raise DatasetError(f"no query of {queries_path.name} has judgments in {qrels_path.name}")
    unanswerable = [q for q in chosen if q.metadata.get("answerable", True) is False]
    if contradicted := [q.id for q in unanswerable if any(g > 0 for g in grades.get(q.id, {}).values())]:
        raise DatasetError(
            f"{queries_path.name}: {', '.join(contradicted[:5])} marked answerable: false but judged relevant "
            f"evidence in {qrels_path.name}"
        )
    return Dataset(
        root.name,
        root,
        corpus_path,
        queries_path,
        qrels_path,
        judged,
        {q.id: grades[q.id] for q in judged},
        unanswerable=unanswerable,
    )


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def corpus_documents(path: Path) -> Iterator[tuple[str, bytes]]:
    """BEIR passages as Markdown: ``<_id>.md`` holding ``# title`` and the text."""
    for row in _jsonl(path):
        title = " ".join(str(row.get("title") or "").split())
        body = f"# {title}\n\n{row.get('text', '')}\n" if title else f"{row.get('text', '')}\n"
        yield f"{row['_id']}.md", body.encode("utf-8")


class JudgedChunk(Protocol):
    """What the judgment mapper reads of a retrieved chunk."""

    @property
    def source_path(self) -> str: ...

    @property
    def heading_path(self) -> tuple[str, ...]: ...


def _fold(heading: str) -> str:
    return normalize(normalize_heading(heading))


class JudgmentMapper:
    """Maps a retrieved chunk to the judged ids it satisfies, or to its own unjudged id."""

    def __init__(self, qrels: m.Qrels, *, markdown: bool) -> None:
        self.markdown = markdown
        self._by_file: dict[str, list[tuple[str, str]]] = {}
        for grades in qrels.values():
            for judged in grades:
                file, _, headings = judged.partition("#") if markdown else (judged, "", "")
                folded = "/".join(_fold(h) for h in headings.split("/")) if headings else ""
                entry = (folded, judged)
                if entry not in self._by_file.setdefault(file, []):
                    self._by_file[file].append(entry)

    def ids(self, chunk: JudgedChunk) -> list[str]:
        file = chunk.source_path if self.markdown else chunk.source_path.removesuffix(".md")
        path = "/".join(_fold(h) for h in chunk.heading_path)
        matched = [
            judged
            for prefix, judged in self._by_file.get(file, ())
            if not prefix or path == prefix or path.startswith(prefix + "/")
        ]
        if matched:
            return matched
        return [f"{file}#{path}" if self.markdown else file]


def cache_home(dataset: Dataset, settings: Settings, cache_root: Path) -> Path:
    """A data home keyed by the corpus files and everything that shapes chunks."""
    stats = []
    paths = sorted(dataset.corpus.rglob("*")) if dataset.is_markdown else [dataset.corpus]
    for path in paths:
        if path.is_file():
            info = path.stat()
            stats.append(f"{path.resolve()}:{info.st_size}:{info.st_mtime_ns}")  # one home however the path is spelt
    key = "\n".join([*stats, str(settings.chunk_size), str(settings.chunk_overlap), str(settings.max_file_bytes)])
    return cache_root / f"{dataset.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def cached_settings(dataset: Dataset, settings: Settings, cache_root: Path) -> Settings:
    """``settings`` for the dataset's own knowledge base in the evaluation cache: its home there (``cache_home``),
    SQLite in it, no folders scanned."""
    home = cache_home(dataset, settings, cache_root)
    return Settings(**{**settings.model_dump(), "home": home, "database_url": "", "scan_dirs": []})


def default_cache_root() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "kbseek", "eval"
    )
    return Path(base)


def open_dataset_kb(dataset: Dataset, settings: Settings) -> KnowledgeBase:
    """Ingest the corpus into ``settings.home`` (unchanged documents are skipped)."""
    kb = KnowledgeBase.open(settings)
    if dataset.is_markdown:
        report = kb.ingest([dataset.corpus], prune=True)
    else:
        report = kb.ingest_documents(corpus_documents(dataset.corpus), origin=str(dataset.corpus))
    failed = [f.reason for f in report.files if f.status == "failed"]
    if failed:
        kb.close()
        raise DatasetError(f"{len(failed)} corpus document(s) failed to ingest; first: {failed[0]}")
    return kb
