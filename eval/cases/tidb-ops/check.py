"""Sanity checks for the tidb-ops question set (no retrieval, no scores).

    python eval/cases/tidb-ops/check.py [path/to/corpus.jsonl]

Checks: ids unique; every judged corpus id exists and has a non-empty body; every answerable query has a
grade-2 row; no-answer queries carry the tag, answerable: false and no qrels rows; splits alternate per tag.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = Path("/work/shared/data/tidb-faq-zh-dev/corpus.jsonl")


def main() -> int:
    corpus_path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CORPUS
    bodies = {}
    with corpus_path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            bodies[row["_id"]] = row["text"]
    queries = [json.loads(line) for line in (HERE / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line]
    qrels: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for number, line in enumerate((HERE / "qrels.tsv").read_text(encoding="utf-8").splitlines(), 1):
        if number == 1:
            assert line == "query-id\tcorpus-id\tscore", line
            continue
        qid, cid, score = line.split("\t")
        assert cid not in qrels[qid], f"duplicate row {qid} {cid}"
        qrels[qid][cid] = int(score)
    errors = []
    ids = [q["_id"] for q in queries]
    if len(ids) != len(set(ids)):
        errors.append("duplicate query ids")
    known = set(ids)
    errors += [f"qrels row for unknown query {q}" for q in qrels if q not in known]
    per_tag: dict[str, list[str]] = collections.defaultdict(list)
    for q in queries:
        md = q["metadata"]
        tag = md["tags"][0]
        per_tag[tag].append(md["split"])
        rows = qrels.get(q["_id"], {})
        if md["answerable"]:
            if "no-answer" in md["tags"]:
                errors.append(f"{q['_id']}: answerable but tagged no-answer")
            if 2 not in rows.values():
                errors.append(f"{q['_id']}: no grade-2 row")
        else:
            if md["tags"][0] != "no-answer":
                errors.append(f"{q['_id']}: answerable false without the no-answer tag")
            if rows:
                errors.append(f"{q['_id']}: no-answer query has qrels rows")
        for cid, grade in rows.items():
            if cid not in bodies:
                errors.append(f"{q['_id']}: corpus id {cid} not in corpus")
            elif not bodies[cid].strip():
                errors.append(f"{q['_id']}: corpus id {cid} has an empty body")
            if grade not in (1, 2):
                errors.append(f"{q['_id']}: grade {grade}")
    for tag, splits in per_tag.items():
        if splits != ["dev" if i % 2 == 0 else "test" for i in range(len(splits))]:
            errors.append(f"tag {tag}: splits do not alternate dev/test")
    counts = {tag: (len(s), s.count("dev"), s.count("test")) for tag, s in per_tag.items()}
    print(f"{len(queries)} queries, {sum(len(r) for r in qrels.values())} qrels rows; per tag (all, dev, test): {counts}")
    for error in errors:
        print("ERROR", error)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
