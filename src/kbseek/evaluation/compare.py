"""``kbseek eval compare``: two runs over the same cases, case by case, with a paired significance test.

The test is the paired randomisation (sign-flip permutation) test IR evaluation uses (Smucker, Allan and
Carterette, CIKM 2007): under the null hypothesis the two systems are exchangeable per query, so each
per-query difference keeps or flips its sign at random; the p-value is the share of 10,000 such
shufflings whose mean difference is at least as large (two-sided) as the one observed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kbseek.errors import DatasetError

PERMUTATIONS = 10_000


def load_run(spec: str) -> tuple[str, dict[str, Any]]:
    """``report.json`` (its first run) or ``report.json#name`` → (label, run)."""
    path, _, name = spec.partition("#")
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        runs = report["runs"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DatasetError(f"{path}: not a 'kbseek eval run --json' report ({exc})") from None
    chosen = next((r for r in runs if r["name"] == name), None) if name else runs[0]
    if chosen is None:
        raise DatasetError(f"{path}: no run named {name!r}; it has {', '.join(r['name'] for r in runs)}")
    return f"{report.get('dataset', Path(path).stem)}/{chosen['name']}", chosen


def paired_permutation_p(differences: np.ndarray, *, permutations: int = PERMUTATIONS, seed: int = 0) -> float:
    """Two-sided p-value of the mean of paired ``differences`` under random sign flips.

    >>> paired_permutation_p(np.array([0.0, 0.0, 0.0]))
    1.0
    >>> paired_permutation_p(np.array([0.5] * 12)) < 0.001
    True
    """
    observed = abs(differences.mean()) if len(differences) else 0.0
    if observed == 0:
        return 1.0
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(permutations, len(differences)))
    means = np.abs((signs * differences).mean(axis=1))
    return float((np.count_nonzero(means >= observed - 1e-12) + 1) / (permutations + 1))


def compare(
    a: dict[str, Any], b: dict[str, Any], *, metric: str = "ndcg@10", label_a: str = "A", label_b: str = "B"
) -> dict[str, Any]:
    """Per-case wins and losses of ``b`` against ``a`` on ``metric``, the mean difference and its p-value."""
    scores_a = {q["query_id"]: q for q in a["per_query"]}
    scores_b = {q["query_id"]: q for q in b["per_query"]}
    if metric not in a["metrics"] or metric not in b["metrics"]:
        raise DatasetError(f"metric {metric!r} is not in both runs; they have {', '.join(sorted(a['metrics']))}")
    shared = [q for q in scores_a if q in scores_b]
    if not shared:
        raise DatasetError("the two runs share no case: compare runs over the same cases")
    rows = []
    for query_id in shared:
        va, vb = scores_a[query_id]["metrics"][metric], scores_b[query_id]["metrics"][metric]
        rows.append(
            {
                "query_id": query_id,
                "query": scores_a[query_id]["query"],
                "a": va,
                "b": vb,
                "difference": round(vb - va, 4),
            }
        )
    differences = np.array([r["difference"] for r in rows])
    rows.sort(key=lambda r: r["difference"])
    return {
        "metric": metric,
        "a": label_a,
        "b": label_b,
        "cases": len(rows),
        "only_in_a": sorted(set(scores_a) - set(scores_b)),
        "only_in_b": sorted(set(scores_b) - set(scores_a)),
        "mean_a": round(float(np.mean([r["a"] for r in rows])), 4),
        "mean_b": round(float(np.mean([r["b"] for r in rows])), 4),
        "mean_difference": round(float(differences.mean()), 4),
        "wins": int((differences > 0).sum()),
        "losses": int((differences < 0).sum()),
        "ties": int((differences == 0).sum()),
        "p_value": round(paired_permutation_p(differences), 4),
        "evidence_a": a.get("evidence") or {},
        "evidence_b": b.get("evidence") or {},
        "no_answer_a": a.get("no_answer") or {},
        "no_answer_b": b.get("no_answer") or {},
        "losses_detail": [r for r in rows if r["difference"] < 0],
        "wins_detail": [r for r in reversed(rows) if r["difference"] > 0],
    }


def regressions(
    run: dict[str, Any],
    baseline: dict[str, Any],
    *,
    metrics: tuple[str, ...] = ("ndcg@10", "recall@10", "mrr@10", "hit@1"),
    tolerance: float = 0.01,
) -> list[str]:
    """The metrics of ``run`` that fell more than ``tolerance`` below ``baseline`` (same policy), as messages;
    refusing more answerable cases, or fewer unanswerable ones, counts too."""
    problems = []
    for metric in metrics:
        now, before = run["metrics"][metric]["mean"], baseline["metrics"][metric]["mean"]
        if now < before - tolerance:
            problems.append(f"{run['name']}: {metric} {now:.4f} < baseline {before:.4f} - {tolerance}")
    now_na, before_na = run.get("no_answer", {}), baseline.get("no_answer", {})
    if now_na.get("answerable_refused", 0) > before_na.get("answerable_refused", 0) + tolerance:
        problems.append(
            f"{run['name']}: answerable refused {now_na['answerable_refused']:.4f} > baseline "
            f"{before_na.get('answerable_refused', 0):.4f} + {tolerance}"
        )
    if (
        "unanswerable_refused" in before_na
        and now_na.get("unanswerable_refused", 0) < before_na["unanswerable_refused"] - tolerance
    ):
        problems.append(
            f"{run['name']}: no-answer refused {now_na.get('unanswerable_refused', 0):.4f} < baseline "
            f"{before_na['unanswerable_refused']:.4f} - {tolerance}"
        )
    return problems
