"""``kbseek eval report``: evaluation runs as Markdown tables and PNG charts.

Charts: one bar per run for each headline metric with its 95% bootstrap interval, and each tag's
nDCG@10 per run. Labels stay ASCII (tags and run names are), so no CJK font is needed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbseek.core.modes import is_answer_policy

HEADLINE = ("ndcg@10", "recall@10", "mrr@10", "hit@1")


def _metrics(report: dict[str, Any]) -> list[str]:
    available = report["runs"][0]["metrics"]
    return [m for m in HEADLINE if m in available] or sorted(available)[:4]


def _short(path: str) -> str:
    """A path relative to the working folder when it is inside it (reports are committed)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def evidence_cells(run: dict[str, Any]) -> str:
    """Evidence precision (of the strong pieces) and characters per default answer, or dashes for a recall policy.

    >>> evidence_cells({"evidence": {"strong_pieces": 8, "precision": 0.75, "chars_mean": 2400.4}})
    '0.750 of 8 | 2400'
    >>> evidence_cells({"evidence": {}})
    '– | –'
    """
    ev = run.get("evidence") or {}
    precision = f"{ev['precision']:.3f} of {ev['strong_pieces']}" if ev.get("precision") is not None else "–"
    chars = f"{ev['chars_mean']:.0f}" if ev.get("chars_mean") is not None else "–"
    return f"{precision} | {chars}"


def markdown(report: dict[str, Any], charts: dict[str, str], *, title: str | None = None) -> str:
    metrics = _metrics(report)
    lines = [
        f"# {title or 'Evaluation: ' + report['dataset']}",
        "",
        f"{report['config']['queries']} answerable cases; cut-offs {report['config']['k']}; "
        f"ranked lists {report['config']['depth']} deep. Files: "
        + ", ".join(f"`{k}` {_short(v)}" for k, v in report["files"].items())
        + ".",
        "",
        "| run | "
        + " | ".join(f"{m} [95% CI]" for m in metrics)
        + " | answerable refused | no-answer refused | evidence precision | chars/answer |",
        "|---|" + "---|" * len(metrics) + "---:|---:|---:|---:|",
    ]
    for run in report["runs"]:
        cells = [
            f"{run['metrics'][m]['mean']:.3f} [{run['metrics'][m]['ci_low']:.3f}, {run['metrics'][m]['ci_high']:.3f}]"
            for m in metrics
        ]
        refusals = run.get("no_answer", {})
        unanswerable = (
            f"{refusals['unanswerable_refused']:.0%} of {refusals['unanswerable']}"
            if "unanswerable" in refusals
            else "–"
        )
        lines.append(
            f"| {run['name']} | "
            + " | ".join(cells)
            + f" | {refusals.get('answerable_refused', 0):.0%} | {unanswerable} | {evidence_cells(run)} |"
        )
    if "metrics" in charts:
        lines += ["", f"![metrics per run]({charts['metrics']})"]
    lines += _answered_without_answer(report)
    lines += _wrong_strong_evidence(report)
    tags = sorted({t for run in report["runs"] for t in run.get("by_tag", {})})
    if tags:
        metric = metrics[0]
        lines += [
            "",
            f"## {metric} by tag",
            "",
            "| tag | cases | " + " | ".join(r["name"] for r in report["runs"]) + " |",
            "|---|---:|" + "---:|" * len(report["runs"]),
        ]
        for tag in tags:
            first = next(r["by_tag"][tag] for r in report["runs"] if tag in r.get("by_tag", {}))
            lines.append(
                f"| {tag} | {first['queries']} | "
                + " | ".join(
                    f"{r['by_tag'][tag][metric]:.3f}" if tag in r.get("by_tag", {}) else "–" for r in report["runs"]
                )
                + " |"
            )
        if "tags" in charts:
            lines += ["", f"![{metric} by tag]({charts['tags']})"]
    return "\n".join(lines) + "\n"


def _answered_without_answer(report: dict[str, Any]) -> list[str]:
    """Per answer policy, the ids of the cases without an answer that it answered anyway."""
    return _cases_by_policy(
        report,
        "Cases without an answer that were answered",
        lambda run: [u for u in run.get("unanswerable", []) if u["ranking"]],
    )


def _wrong_strong_evidence(report: dict[str, Any]) -> list[str]:
    """Per answer policy, the ids of the answerable cases given a strong piece (PRECISE or HIGHLY_RELEVANT) that is
    judged not relevant: where its evidence precision is lost."""
    return _cases_by_policy(
        report,
        "Answerable cases given strong evidence judged not relevant",
        lambda run: [q for q in run.get("per_query", []) if any(not p["relevant"] for p in q.get("strong", []))],
    )


def _cases_by_policy(
    report: dict[str, Any], heading: str, pick: Callable[[dict[str, Any]], list[dict[str, Any]]]
) -> list[str]:
    """A section listing, per answer policy, the ids of the cases ``pick`` selects from its run (ids only: a report
    without its JSON copies no query text); nothing when no policy has any."""
    rows = [
        f"| {run['name']} | {', '.join(c['query_id'] for c in cases)} |"
        for run in report["runs"]
        if is_answer_policy(run["policy"]) and (cases := pick(run))
    ]
    if not rows:
        return []
    return ["", f"## {heading}", "", "| run | cases |", "|---|---|", *rows]


def charts(report: dict[str, Any], folder: Path, stem: str) -> dict[str, str]:
    """Write the PNG charts next to the report; returns their file names by kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    runs = report["runs"]
    metrics = _metrics(report)
    names = [r["name"] for r in runs]
    out: dict[str, str] = {}
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=110)
    width = 0.8 / len(runs)
    x = np.arange(len(metrics))
    for i, run in enumerate(runs):
        means = [run["metrics"][m]["mean"] for m in metrics]
        low = [means[j] - run["metrics"][m]["ci_low"] for j, m in enumerate(metrics)]
        high = [run["metrics"][m]["ci_high"] - means[j] for j, m in enumerate(metrics)]
        ax.bar(x + i * width - 0.4 + width / 2, means, width, yerr=[low, high], capsize=3, label=names[i])
    ax.set_xticks(x, metrics)
    out["metrics"] = _save(
        plt,
        fig,
        ax,
        "mean, 95% bootstrap CI",
        f"{report['dataset']}: {report['config']['queries']} cases",
        folder / f"{stem}-metrics.png",
    )
    tags = sorted({t for run in runs for t in run.get("by_tag", {})})
    if tags:
        metric = metrics[0]
        fig, ax = plt.subplots(figsize=(min(12, max(7, 1.1 * len(tags))), 3.6), dpi=110)
        x = np.arange(len(tags))
        for i, run in enumerate(runs):
            values = [run.get("by_tag", {}).get(t, {}).get(metric, 0.0) for t in tags]
            ax.bar(x + i * width - 0.4 + width / 2, values, width, label=names[i])
        ax.set_xticks(
            x,
            [f"{t}\n(n={next(r['by_tag'][t]['queries'] for r in runs if t in r.get('by_tag', {}))})" for t in tags],
            fontsize=8,
        )
        out["tags"] = _save(plt, fig, ax, metric, f"{report['dataset']}: {metric} by tag", folder / f"{stem}-tags.png")
    return out


def _save(plt: Any, fig: Any, ax: Any, ylabel: str, title: str, path: Path) -> str:
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def write_report(
    report: dict[str, Any], folder: Path, stem: str, *, title: str | None = None, with_json: bool = True
) -> Path:
    """``<stem>.md``, the charts and (``with_json``) ``<stem>.json`` in ``folder``. The JSON holds every query's
    text: leave it out for data whose licence forbids copying it (the shared sets)."""
    folder.mkdir(parents=True, exist_ok=True)
    made = charts(report, folder, stem)
    if with_json:
        (folder / f"{stem}.json").write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    path = folder / f"{stem}.md"
    path.write_text(markdown(report, made, title=title), encoding="utf-8")
    return path
