"""The TiDB docs tree as Markdown files, rebuilt from the sections of ``corpus.jsonl``, with these questions'
judgments mapped to heading paths: the held-out large-tree set runs over real documents (a title, its sections,
their breadcrumbs), where ``corpus.jsonl`` makes every section a document of its own.

    python eval/cases/tidb-ops/rebuild_tree.py OUT [path/to/corpus.jsonl]
    KBSEEK_EMBEDDER=none .venv/bin/kbseek eval run OUT --policy lexical --split dev

OUT gets ``docs/`` (one file per source path, headings from each section's breadcrumb; a heading whose section was
empty in the corpus is written as an empty section; a section whose own heading the corpus masks, the FAQ answers,
gets the placeholder heading ``Q<index>``), ``queries.jsonl`` and ``qrels.tsv`` (``path#heading path``). Nothing
is written into this repository: the corpus stays in ``../shared/data``.
"""

from __future__ import annotations

import collections
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE.parents[3] / "shared" / "data" / "tidb-faq-zh-dev" / "corpus.jsonl"


def rebuild(corpus: Path, out: Path) -> dict[str, str]:
    """Write ``out/docs``; return each corpus id's heading path."""
    files: dict[str, list[tuple[int, dict]]] = collections.defaultdict(list)
    with corpus.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            path, index = row["_id"].rsplit("#", 1)
            files[path].append((int(index), row))
    paths: dict[str, str] = {}
    for path, sections in files.items():
        lines: list[str] = []
        previous: list[str] = []
        open_headings: list[str] = []
        for index, row in sorted(sections, key=lambda s: s[0]):
            title = " ".join((row.get("title") or "").split())
            parts = title.split(" / ") if title else []
            if not parts or (index > 0 and parts == previous[: len(parts)]):
                parts = parts + [f"Q{index}"]  # its own heading was masked (an FAQ question)
            for depth, heading in enumerate(parts[:-1]):  # headings above it that no section of their own wrote
                if len(open_headings) <= depth or open_headings[depth] != heading:
                    lines += ["#" * min(depth + 1, 6) + " " + heading, ""]
                    del open_headings[depth:]
                    open_headings.append(heading)
            del open_headings[len(parts) - 1 :]
            open_headings.append(parts[-1])
            lines += ["#" * min(len(parts), 6) + " " + parts[-1], "", row["text"].strip(), ""]
            paths[row["_id"]] = "/".join(parts)
            previous = parts
        target = out / "docs" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines), encoding="utf-8")
    return paths


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0])
    corpus = Path(args[1]) if len(args) > 1 else DEFAULT_CORPUS
    paths = rebuild(corpus, out)
    rows = ["query-id\tcorpus-id\tscore"]
    for number, line in enumerate((HERE / "qrels.tsv").read_text(encoding="utf-8").splitlines()):
        if number:
            query, judged, score = line.split("\t")
            rows.append(f"{query}\t{judged.rsplit('#', 1)[0]}#{paths[judged]}\t{score}")
    (out / "qrels.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    shutil.copyfile(HERE / "queries.jsonl", out / "queries.jsonl")
    print(f"{len({p.rsplit('#', 1)[0] for p in paths})} documents, {len(paths)} sections, {len(rows) - 1} judgments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
