"""Fit the section ranker (``kbseek.core.ranker``) on dev/train splits only, and check it leave-one-set-out.

    python benchmarks/train_ranker.py [--features /tmp/ranker-features.json] [--recollect] [--write]

Each answerable dev/train question is asked as a ``hybrid`` search without the ranker; its first ``DEPTH`` fused
hits become rows of features (``kbseek.retrieval.ranking.hit_features``) with the grade the judgments give the
hit. A linear model (standardised features, L2) is fitted by the pairwise logistic loss over every pair of *one
document's* sections of different grades, each question weighing the same: the ranker only reorders sections
within a document (``core.ranker.within_documents``). Sets judged per document (prometheus) give no pairs and are
unchanged by construction. Leave-one-set-out: each set reordered by a model fitted on the others, MRR@5 / nDCG@10
before and after. ``--write`` prints the ``RankerModel`` to paste into ``MODELS``. The sets are read in place
(``shared/data``); nothing is copied.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from train_answerability import sets  # the same dev/train splits as the answerability gate

L2 = 0.1
STEPS = 1500


def collect() -> list[dict]:
    # imported here: the script starts cheaply
    from kbseek.evaluation.datasets import JudgmentMapper, cached_settings, default_cache_root, open_dataset_kb
    from kbseek.observability.logs import configure_logging
    from kbseek.retrieval.ranking import DEPTH, hit_features
    from kbseek.settings import Settings

    configure_logging("ERROR")
    rows = []
    for name, dataset in sets():
        base = Settings(learned_ranker=False)  # the fused order is what the ranker is given
        kb = open_dataset_kb(dataset, cached_settings(dataset, base, default_cache_root()))
        mapper = JudgmentMapper(dataset.qrels, markdown=dataset.is_markdown)
        try:
            for query in dataset.queries:
                grades = dataset.qrels.get(query.id, {})
                hits = list(kb.search(query.text, policy="hybrid", top_k=DEPTH).hits)
                for hit, x in zip(hits, hit_features(kb.indexes, query.text, hits), strict=True):
                    judged = mapper.ids(hit.chunk)
                    rows.append(
                        {
                            "set": name,
                            "q": query.id,
                            "document": hit.chunk.document_id,
                            "judged": judged,
                            "grade": max((grades.get(j, 0) for j in judged), default=0),
                            "x": x,
                        }
                    )
        finally:
            kb.close()
        print(f"{name}: {sum(r['set'] == name for r in rows)} rows", file=sys.stderr)
    return rows


def fit(x: np.ndarray, rows: list[dict], groups: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plain gradient descent on the pairwise logistic loss: small and deterministic."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale
    better, worse, weight = [], [], []
    for members in groups:
        pairs = [
            (i, j)
            for i in members
            for j in members
            if rows[i]["grade"] > rows[j]["grade"] and rows[i]["document"] == rows[j]["document"]
        ]
        for i, j in pairs:
            better.append(i)
            worse.append(j)
            weight.append(1 / len(pairs))  # each question weighs the same, however many pairs it has
    d, share = z[better] - z[worse], np.array(weight) / sum(weight)
    w = np.zeros(z.shape[1])
    for _ in range(STEPS):
        slope = 1 / (1 + np.exp(np.clip(d @ w, -30, 30)))
        w -= 0.5 * (-(d.T @ (slope * share)) + L2 * w)
    return w, mean, scale


def reorder(rows: list[dict], members: list[int], scores: np.ndarray) -> list[int]:
    from kbseek.core.ranker import within_documents

    order = within_documents([rows[i]["document"] for i in members], [float(scores[i]) for i in members])
    return [members[i] for i in order]


def quality(rows: list[dict], orders: dict, qrels: dict) -> tuple[float, float]:
    """MRR@5 and nDCG@10 of the judged ids in each question's order (first occurrence), as the runner counts."""
    from kbseek.core import metrics as m

    run = {}
    for key, members in orders.items():
        ranked: dict[str, float] = {}
        for i in members:
            for judged in rows[i]["judged"]:
                ranked.setdefault(judged, 1.0 / (len(ranked) + 1))
        run[key] = ranked
    per = m.per_query({k: qrels[k] for k in orders}, run, ["mrr@5", "ndcg@10"])
    return float(np.mean([v["mrr@5"] for v in per.values()])), float(np.mean([v["ndcg@10"] for v in per.values()]))


def main() -> None:
    from kbseek.core.ranker import FEATURES

    parser = argparse.ArgumentParser()
    parser.add_argument("--features", type=Path, default=Path("/tmp/ranker-features.json"))
    parser.add_argument("--recollect", action="store_true")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.recollect or not args.features.exists():
        args.features.write_text(json.dumps(collect()))
    rows = json.loads(args.features.read_text())
    x = np.array([r["x"] for r in rows], dtype=float)
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(f"{r['set']}:{r['q']}", []).append(i)
    qrels = {f"{name}:{qid}": dict(g) for name, dataset in sets() for qid, g in dataset.qrels.items()}
    names = sorted({r["set"] for r in rows})
    print("leave-one-set-out: MRR@5 / nDCG@10, fused order -> sections reordered by a model fitted on the other sets")
    for held in names:
        model = fit(x, rows, [g for k, g in groups.items() if not k.startswith(held + ":")])
        scores = ((x - model[1]) / model[2]) @ model[0]
        test = {k: g for k, g in groups.items() if k.startswith(held + ":")}
        before = quality(rows, test, qrels)
        after = quality(rows, {k: reorder(rows, g, scores) for k, g in test.items()}, qrels)
        print(f"  {held:28s} {before[0]:.3f} / {before[1]:.3f} -> {after[0]:.3f} / {after[1]:.3f} ({len(test)})")
    w, mean, scale = fit(x, rows, list(groups.values()))
    print("weights", dict(zip(FEATURES, np.round(w, 3).tolist(), strict=True)))
    if args.write:
        r = lambda v: tuple(round(float(a), 5) for a in v)  # noqa: E731
        print(f'RankerModel({r(w)}, {r(mean)}, {r(scale)}, source="dev: {", ".join(names)}; {len(rows)} rows")')


if __name__ == "__main__":
    main()
