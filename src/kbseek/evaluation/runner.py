"""``kbseek eval``: datasets, runs through the real lookup, metrics with confidence intervals.

A dataset is a folder (see ``shared/data/README.md``): ``corpus.jsonl`` (BEIR) or ``docs/`` of
Markdown, ``queries.jsonl`` and ``qrels.tsv``. Judged ids are a corpus id, a Markdown path, or a
path and heading path (``file.md#H1/H2``): a retrieved chunk matches the latter when its file is the
same and its heading path starts with the judged one, segment by segment, headings normalised as
the chunker normalises them. The ranked list scored is what the lookup returns, in its order, each
judged id counted at its first occurrence; an unjudged chunk takes a place under its own id.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbseek.core import metrics as m
from kbseek.core.markdown import normalize_heading
from kbseek.core.models import Chunk
from kbseek.errors import DatasetError, KbseekError
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

DEFAULT_K = (1, 3, 5, 10)
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
    root: Path, *, corpus: str | None = None, queries: str | None = None, qrels: str | None = None,
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
            if number == 1 and parts[0] == "query-id" or not line.strip():
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
    judged = [q for q in chosen if q.id in grades]
    if not judged:
        raise DatasetError(f"no query of {queries_path.name} has judgments in {qrels_path.name}")
    return Dataset(root.name, root, corpus_path, queries_path, qrels_path, judged,
                   {q.id: grades[q.id] for q in judged})


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


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", normalize_heading(text)).casefold()


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

    def ids(self, chunk: Chunk) -> list[str]:
        file = chunk.source_path if self.markdown else chunk.source_path.removesuffix(".md")
        path = "/".join(_fold(h) for h in chunk.heading_path)
        matched = [judged for prefix, judged in self._by_file.get(file, ())
                   if not prefix or path == prefix or path.startswith(prefix + "/")]
        if matched:
            return matched
        return [f"{file}#{path}" if self.markdown else file]


@dataclass(slots=True)
class RunResult:
    name: str
    policy: str
    overrides: dict[str, Any]
    run: m.Run
    per_query: dict[str, dict[str, float]]
    summary: dict[str, dict[str, float]]
    seconds: float
    no_answer: dict[str, Any] = field(default_factory=dict)
    by_tag: dict[str, dict[str, float]] = field(default_factory=dict)


def metric_names(ks: tuple[int, ...]) -> list[str]:
    names = ["hit@1"]
    for k in ks:
        names += [f"recall@{k}", f"mrr@{k}", f"ndcg@{k}", f"precision@{k}"]
        if k != 1:
            names += [f"hit@{k}", f"sources@{k}"]
    return names


def cache_home(dataset: Dataset, settings: Settings, cache_root: Path) -> Path:
    """A data home keyed by the corpus files and everything that shapes chunks."""
    stats = []
    paths = sorted(dataset.corpus.rglob("*")) if dataset.is_markdown else [dataset.corpus]
    for path in paths:
        if path.is_file():
            info = path.stat()
            stats.append(f"{path}:{info.st_size}:{info.st_mtime_ns}")
    key = "\n".join([*stats, str(settings.chunk_size), str(settings.chunk_overlap), str(settings.max_file_bytes)])
    return cache_root / f"{dataset.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def default_cache_root() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "kbseek", "eval")
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


def run_policy(kb: KnowledgeBase | None, dataset: Dataset, *, policy: str, depth: int, names: list[str],
               name: str, overrides: dict[str, Any], fixture: dict[str, Any] | None = None,
               retrieve: Callable[[str, str, int], list[Any]] | None = None) -> RunResult:
    """Score one policy; ``retrieve(query, policy, depth)`` replaces the in-process knowledge base (e.g. a
    server over HTTP, :mod:`kbseek.evaluation.live`) and returns objects with ``source_path`` and ``heading_path``."""
    mapper = JudgmentMapper(dataset.qrels, markdown=dataset.is_markdown)
    run: m.Run = {}
    started = time.perf_counter()
    if fixture is not None:
        from kbseek.evaluation.replay import replay

        run = replay(kb, dataset, fixture, policy=policy, depth=depth)
    for query in dataset.queries + dataset.unanswerable if fixture is None else ():
        ranked: dict[str, float] = {}
        found = retrieve(query.text, policy, depth) if retrieve else _ranked_chunks(kb, query.text, policy, depth)
        for chunk in found:
            for judged in mapper.ids(chunk):
                if judged not in ranked:
                    ranked[judged] = 1.0 / (len(ranked) + 1)
        run[query.id] = ranked
    seconds = time.perf_counter() - started
    per_query = m.per_query(dataset.qrels, run, names)
    summary = {}
    for metric in names:
        values = [scores[metric] for scores in per_query.values()]
        low, high = m.bootstrap_ci(values)
        summary[metric] = {"mean": round(m.mean(values), 4), "ci_low": round(low, 4), "ci_high": round(high, 4)}
    return RunResult(name, policy, overrides, run, per_query, summary, seconds,
                     refusals(dataset, run), tag_means(dataset, per_query, names))


def refusals(dataset: Dataset, run: m.Run) -> dict[str, Any]:
    """An empty answer is a refusal (*no confident match*): right for a question without an answer, wrong
    for an answerable one. Recall policies return nothing only when no chunk matches at all; answer policies
    (``legacy``, ``answer:…``) refuse below the confidence thresholds."""
    answerable = [q.id for q in dataset.queries]
    out: dict[str, Any] = {"answerable": len(answerable),
                           "answerable_refused": round(m.mean([float(not run.get(q)) for q in answerable]), 4)}
    if dataset.unanswerable:
        out["unanswerable"] = len(dataset.unanswerable)
        out["unanswerable_refused"] = round(m.mean([float(not run.get(q.id)) for q in dataset.unanswerable]), 4)
    return out


def tag_means(dataset: Dataset, per_query: dict[str, dict[str, float]], names: list[str]) -> dict[str, dict[str, float]]:
    """Each metric's mean over the answerable queries of each tag (``queries``: how many)."""
    groups: dict[str, list[str]] = {}
    for query in dataset.queries:
        for tag in query.metadata.get("tags") or []:
            groups.setdefault(str(tag), []).append(query.id)
    return {tag: {"queries": len(ids), **{n: round(m.mean([per_query[q][n] for q in ids if q in per_query]), 4)
                                          for n in names}}
            for tag, ids in sorted(groups.items())}


ANSWER_PREFIX = "answer:"


def _ranked_chunks(kb: KnowledgeBase, query: str, policy: str, depth: int) -> list[Chunk]:
    """What a policy returns, best first. ``legacy`` and ``answer:<policy>`` score the answer an agent
    receives (``lookup_knowledge``: gated, grouped, capped); a compact summary counts as its document's first
    chunk (its excerpt is the start of the body), a metadata-only entry as nothing (it has no content)."""
    if policy != "legacy" and not policy.startswith(ANSWER_PREFIX):
        return [hit.chunk for hit in kb.lookup(query, top_k=depth, policy=policy).hits]
    response = kb.lookup_knowledge({"query": query, "policy": policy.removeprefix(ANSWER_PREFIX),
                                    "top_k": min(depth, 50), "budget_chars": 100_000})
    return answer_chunks(kb, response.answer)


def answer_chunks(kb: KnowledgeBase, answer: Any) -> list[Chunk]:
    """An answer as the ranked chunks it stands for (see ``_ranked_chunks``)."""
    chunks = []
    for entry in answer.documents:
        if entry.pieces:
            chunks += [kb.indexes.chunks[p.chunk_ids[0]] for p in entry.pieces]
        elif entry.form == "compact_summary" and kb.indexes.documents[entry.document.id].chunk_ids:
            chunks.append(kb.indexes.chunks[kb.indexes.documents[entry.document.id].chunk_ids[0]])
    return chunks


QUERY_TIME_SETTINGS = {"domain_filter", "bm25_k1", "bm25_b", "log_level", "policy", "rrf_k", "weight_bm25",
                       "weight_dense", "weight_l0", "lane_depth", "fusion"}


def _same_index(current: Settings, wanted: Settings) -> bool:
    """Whether ``wanted`` differs from ``current`` only in settings applied at query time."""
    ignore = QUERY_TIME_SETTINGS
    return current.model_dump(exclude=ignore) == wanted.model_dump(exclude=ignore)


def apply_query_settings(kb: KnowledgeBase, settings: Settings) -> None:
    """Make ``kb`` answer with ``settings``' query-time settings (fusion, weights, BM25, relevance thresholds)."""
    kb.settings = settings
    kb.indexes.set_bm25(k1=settings.bm25_k1, b=settings.bm25_b)


def evaluate(
    dataset: Dataset, *, policies: list[str], configs: list[tuple[str, dict[str, Any]]] | None = None,
    ks: tuple[int, ...] = DEFAULT_K, depth: int = 100, cache_root: Path | None = None,
    base: Settings | None = None, fixture: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every (policy × configuration) over the dataset; the JSON of ``kbseek eval run --json``."""
    base = base or Settings()
    configs = configs or [("default", {})]
    names = metric_names(tuple(sorted(set(ks))))
    runs = []
    timings: dict[str, float] = {}
    kb: KnowledgeBase | None = None
    try:
        for config_name, overrides in configs:
            settings = base.model_copy(update=overrides)
            home = cache_home(dataset, settings, cache_root or default_cache_root())
            settings = Settings(**{**settings.model_dump(), "home": home, "database_url": "", "scan_dirs": []})
            if kb is None or not _same_index(kb.settings, settings):
                if kb is not None:
                    kb.close()
                started = time.perf_counter()
                kb = open_dataset_kb(dataset, settings)
                timings[f"build:{config_name}"] = round(time.perf_counter() - started, 3)
            apply_query_settings(kb, settings)
            for policy in policies:
                name = policy if len(configs) == 1 else f"{policy}/{config_name}"
                runs.append(run_policy(kb, dataset, policy=policy, depth=depth, names=names, name=name,
                                       overrides=overrides, fixture=fixture))
    finally:
        if kb is not None:
            kb.close()
    return report(dataset, runs, ks=ks, depth=depth, base=base, timings=timings)


def report(dataset: Dataset, runs: list[RunResult], *, ks: tuple[int, ...], depth: int, base: Settings,
           timings: dict[str, float]) -> dict[str, Any]:
    """The JSON of ``kbseek eval run --json`` (schemas/eval-run.schema.json)."""
    return {
        "dataset": dataset.name,
        "files": dataset.files(),
        "config": {"k": list(sorted(set(ks))), "depth": depth, "queries": len(dataset.queries),
                   "chunk_size": base.chunk_size, "chunk_overlap": base.chunk_overlap},
        "timings_s": timings,
        "runs": [
            {
                "name": r.name, "policy": r.policy, "overrides": r.overrides,
                "seconds": round(r.seconds, 3),
                "metrics": r.summary,
                "no_answer": r.no_answer,
                "by_tag": r.by_tag,
                "per_query": [
                    {"query_id": q.id, "query": q.text, "metrics": r.per_query.get(q.id, {}),
                     "ranking": list(m.ranking(r.run.get(q.id, {})))[:10],
                     "relevant": sorted(d for d, g in dataset.qrels[q.id].items() if g > 0)}
                    for q in dataset.queries
                ],
            }
            for r in runs
        ],
    }


def parse_configs(specs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """``["nofilter:domain_filter=false", "k1:bm25_k1=0.9,bm25_b=0.6"]`` → named settings overrides."""
    configs = []
    for spec in specs:
        name, sep, assignments = spec.partition(":")
        if not sep or not name:
            raise DatasetError(f"--set {spec!r} must look like NAME:key=value[,key=value]")
        overrides: dict[str, Any] = {}
        for assignment in assignments.split(","):
            key, eq, value = assignment.partition("=")
            if not eq or key.strip() not in Settings.model_fields:
                raise DatasetError(f"--set {spec!r}: {key.strip()!r} is not a setting")
            overrides[key.strip()] = json.loads(value) if value.strip() in ("true", "false") or _is_number(value) else value
        configs.append((name, overrides))
    return configs


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
