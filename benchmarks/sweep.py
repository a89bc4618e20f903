"""Record every evaluation set once, then replay a lever across all of them in one table (issue 17's routine).

    python benchmarks/sweep.py record [--sets a,b] [--force]      # lane candidates of each set, once per machine
    python benchmarks/sweep.py replay [--sets a,b] [--set NAME:key=value,...] [--test] [--json DIR]
    python benchmarks/sweep.py replay --against DIR --against-set key=value      # fixtures recorded under a lever

A lever is kept only if it helps where it should and hurts nowhere, on every set (docs/evaluation.md). This script
holds the sets and their arguments, records each set's fixture (``kbseek eval record``, measured beside other work
on two machines: under 1.5 to 8 minutes for the small sets, 21 to 47 for the TiDB tree's first embedding, 18 to 28
for SciFact), and replays the default configuration beside each ``--set`` (``kbseek eval run --replay``: seconds per
set) as one row per set and configuration: ``hybrid`` MRR@5 / nDCG@10, then ``answer:hybrid`` MRR@5, answerable /
unanswerable refused and evidence precision (strong pieces); a tried configuration's MRR@5 cells add its difference
from the default and the paired permutation test's p-value (``kbseek eval compare``). ``--json DIR`` also writes
each set's report, so two replays (of two fixture folders, say) can be compared with ``kbseek eval compare`` (its
runs are named ``hybrid`` without ``--set``, ``hybrid/default`` and ``hybrid/NAME`` with: replay both with the same
``--set`` list). A change to what the lanes recall (the dense text, BM25, the lexicon) needs a new recording: record
with the changed code into another ``--fixtures`` folder; a lever that is such a setting
(``embedding_input=spelled``) is recorded with its ``KBSEEK_*`` variable set (such a recording embeds only the texts
the setting changes: a minute for the TiDB tree). ``replay --against DIR --against-set embedding_input=spelled``
then replays that folder under the settings it was recorded with (a replay refuses others) as one more row per set,
its MRR@5 cells compared with the default's the same way. Test splits are replayed only with ``--test``: choose on
dev, then run the test splits once. The shared sets are read in place (``../shared/data``); nothing is copied.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OPS = ROOT / "eval" / "cases" / "tidb-ops"
FIXTURES = Path.home() / ".cache" / "kbseek" / "fixtures"
# the TiDB sections written back as Markdown files (``rebuild_tree.py``): the held-out large-tree set runs over files
TREE = FIXTURES.parent / "tidb-tree"


@dataclass(frozen=True)
class EvalSet:
    name: str
    path: Path
    split: str | None = None
    queries: str | None = None
    qrels: str | None = None
    test: bool = False  # a test split: replayed only with --test


SETS = (
    EvalSet("golden-dev", ROOT / "examples" / "eval" / "golden-cases.json", "dev"),
    EvalSet("written-dev", ROOT / "examples" / "eval" / "superbizagent-dev.json", "dev"),
    EvalSet("psec-dev", ROOT / "examples" / "eval" / "prometheus-sections-dev.json", "dev"),
    EvalSet("sb-dev", DATA / "superbizagent-runbooks", "dev"),
    EvalSet("prometheus", DATA / "prometheus-operator-runbooks"),
    EvalSet("tidb-ops-dev", DATA / "tidb-faq-zh-dev", "dev", str(OPS / "queries.jsonl"), str(OPS / "qrels.tsv")),
    EvalSet("tidb-faq", DATA / "tidb-faq-zh-dev"),
    EvalSet("cmrc-trial", DATA / "cmrc2018-retrieval-zh", None, "queries-trial.jsonl", "qrels-trial.tsv"),
    EvalSet("scifact-train", DATA / "beir-scifact", None, "queries-train.jsonl", "qrels-train.tsv"),
    EvalSet("tidb-tree-dev", TREE, "dev"),
    EvalSet("golden-test", ROOT / "examples" / "eval" / "golden-cases.json", "test", test=True),
    EvalSet("unseen-test", ROOT / "eval" / "cases" / "superbizagent-unseen.json", "test", test=True),
    EvalSet("psec-test", ROOT / "eval" / "cases" / "prometheus-sections.json", "test", test=True),
    EvalSet(
        "tidb-ops-test", DATA / "tidb-faq-zh-dev", "test", str(OPS / "queries.jsonl"), str(OPS / "qrels.tsv"), True
    ),
    EvalSet("tidb-tree-test", TREE, "test", test=True),
)
POLICIES = ["hybrid", "answer:hybrid"]


def dataset(s: EvalSet) -> Any:
    from kbseek.interfaces.cli.evaluation import load_data  # imported here: the script's start-up stays cheap

    if s.path == TREE and _stale(TREE / "queries.jsonl"):  # written last, outside the repository
        import shutil  # imported here: as above

        sys.path.insert(0, str(OPS))
        from rebuild_tree import main as rebuild_tree

        shutil.rmtree(TREE / "docs", ignore_errors=True)
        rebuild_tree([str(TREE)])
    return load_data(s.path, queries=s.queries, qrels=s.qrels, split=s.split)


def _stale(built: Path) -> bool:
    """Whether the rebuilt tree is missing or older than what it is built from. A rebuilt tree needs its fixtures
    recorded again (``record --force``)."""
    corpus = DATA / "tidb-faq-zh-dev" / "corpus.jsonl"
    sources = [OPS / "queries.jsonl", OPS / "qrels.tsv", OPS / "rebuild_tree.py", corpus]
    return not built.exists() or built.stat().st_mtime < max(p.stat().st_mtime for p in sources)


def record(chosen: list[EvalSet], fixtures: Path, *, force: bool) -> None:
    from kbseek.evaluation.datasets import cached_settings, default_cache_root, open_dataset_kb
    from kbseek.evaluation.replay import record as record_lanes
    from kbseek.settings import Settings

    fixtures.mkdir(parents=True, exist_ok=True)
    for s in chosen:
        out = fixtures / f"{s.name}.json"
        if out.exists() and not force:
            print(f"{s.name}: recorded already ({out})", file=sys.stderr)
            continue
        data = dataset(s)
        kb = open_dataset_kb(data, cached_settings(data, Settings(), default_cache_root()))
        try:
            fixture = record_lanes(kb, data)
        finally:
            kb.close()
        out.write_text(json.dumps(fixture, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{s.name}: {len(fixture['cases'])} case(s) -> {out}", file=sys.stderr)


def replay(
    chosen: list[EvalSet],
    fixtures: Path,
    tried: list[tuple[str, dict[str, Any]]],
    reports: Path | None = None,
    against: tuple[Path, dict[str, Any]] | None = None,
) -> list[str]:
    """One table row per set and configuration (the default first); each tried configuration's MRR@5 cells add its
    difference from the default and the paired test's p-value. ``reports``: each set's report is written there as
    ``SET.json`` too. ``against``: another fixture folder and the settings it was recorded under (a lever that
    changes what the lanes recall), replayed as one more row per set, compared with the default the same way."""
    from kbseek.errors import DatasetError
    from kbseek.settings import Settings

    configs = [("default", {}), *tried]
    if reports is not None:
        reports.mkdir(parents=True, exist_ok=True)
    base = Settings().model_copy(update={"embedder": "none"})  # replays embed nothing
    rows = [
        "| set | configuration | `hybrid` MRR@5 / nDCG@10 | `answer:hybrid` MRR@5 | refused (answerable / not) | "
        "precision (strong) |",
        "|---|---|---|---|---|---|",
    ]
    for s in chosen:
        if reports is not None:  # a set that fails below leaves no report of an earlier replay behind
            (reports / f"{s.name}.json").unlink(missing_ok=True)
        try:
            report = replayed(s, fixtures, configs, base)
        except DatasetError as exc:  # not recorded, a stale fixture, or a setting it cannot replay: said in its row
            rows.append(f"| {s.name} | {exc.message} | | | | |")
            continue
        if reports is not None:
            (reports / f"{s.name}.json").write_text(json.dumps(report, ensure_ascii=False) + "\n", encoding="utf-8")
        runs = {r["name"]: r for r in report["runs"]}
        suffix = lambda name: "" if len(configs) == 1 else f"/{name}"  # noqa: E731
        default_runs = runs["hybrid" + suffix("default")], runs["answer:hybrid" + suffix("default")]
        for name, _ in configs:
            pair = runs["hybrid" + suffix(name)], runs["answer:hybrid" + suffix(name)]
            rows.append(f"| {s.name} | {name} | {row(*pair, against=None if name == 'default' else default_runs)}")
        if against is not None:
            rows.append(against_row(s, against, base, default_runs))
    return rows


def replayed(s: EvalSet, folder: Path, configs: list[tuple[str, dict[str, Any]]], base: Any) -> dict[str, Any]:
    """The report of ``s`` replayed from its fixture in ``folder`` (``DatasetError`` when it cannot be)."""
    from kbseek.errors import DatasetError  # imported here: as above
    from kbseek.evaluation.replay import load  # imported here: as above
    from kbseek.evaluation.runner import evaluate  # imported here: as above

    path = folder / f"{s.name}.json"
    if not path.exists():
        raise DatasetError(f"not recorded in {folder}: `sweep.py record --sets {s.name} --fixtures {folder}`")
    return evaluate(dataset(s), policies=POLICIES, configs=configs, ks=(5, 10), fixture=load(path), base=base)


def against_row(s: EvalSet, against: tuple[Path, dict[str, Any]], base: Any, default: tuple[dict, dict]) -> str:
    """The row of ``s`` replayed from the other fixture folder under its recorded settings."""
    from kbseek.errors import DatasetError  # imported here: as above

    folder, settings = against
    name = "against " + (",".join(f"{k}={v}" for k, v in settings.items()) or str(folder))
    try:
        report = replayed(s, folder, [("default", {})], base.model_copy(update=settings))
    except DatasetError as exc:
        return f"| {s.name} | {name}: {exc.message} | | | | |"
    runs = {r["name"]: r for r in report["runs"]}
    return f"| {s.name} | {name} | {row(runs['hybrid'], runs['answer:hybrid'], against=default)}"


def row(
    recall: dict[str, Any], answer: dict[str, Any], *, against: tuple[dict[str, Any], dict[str, Any]] | None = None
) -> str:
    mean = lambda run, k: run["metrics"][k]["mean"]  # noqa: E731
    refused, evidence = answer["no_answer"], answer.get("evidence") or {}
    unanswerable = refused.get("unanswerable_refused")
    precision = evidence.get("precision")
    return (
        " | ".join(
            [
                f"{mean(recall, 'mrr@5'):.3f} / {mean(recall, 'ndcg@10'):.3f}" + paired(against, 0, recall),
                f"{mean(answer, 'mrr@5'):.3f}" + paired(against, 1, answer),
                f"{refused['answerable_refused']:.1%} / "
                + (f"{unanswerable:.1%}" if unanswerable is not None else "–"),
                f"{precision:.3f} ({evidence['strong_pieces']})" if precision is not None else "–",
            ]
        )
        + " |"
    )


def paired(against: tuple[dict[str, Any], ...] | None, which: int, run: dict[str, Any]) -> str:
    """`` (+0.015, p 0.04)``: MRR@5's difference from the default's run and its paired permutation test."""
    if against is None:
        return ""
    from kbseek.evaluation.compare import compare  # imported here: as above

    result = compare(against[which], run, metric="mrr@5")
    return f" ({result['mean_difference']:+.3f}, p {result['p_value']:.2g})"  # 0.0001 is the smallest it gives


def configurations(parser: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The ``--set`` configurations, each named once and none ``default`` (the row they are compared with)."""
    from kbseek.errors import DatasetError  # imported here: as above
    from kbseek.evaluation.runner import parse_configs  # imported here: as above

    try:
        tried = parse_configs(specs)
    except DatasetError as exc:
        parser.error(exc.message)
    names = [name for name, _ in tried]
    if "default" in names or len(set(names)) < len(names):
        parser.error(f"--set names must be unique and not 'default' (given: {', '.join(names)})")
    return tried


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("record", "replay"))
    parser.add_argument("--sets", help="comma-separated set names (default: every dev set; with --test, test too)")
    parser.add_argument("--set", action="append", default=[], dest="specs", help="NAME:key=value[,key=value]")
    parser.add_argument("--fixtures", type=Path, default=FIXTURES, help=f"fixture folder (default {FIXTURES})")
    parser.add_argument("--test", action="store_true", help="the test splits too: run once, after choosing on dev")
    parser.add_argument("--force", action="store_true", help="record again over an existing fixture")
    parser.add_argument("--json", type=Path, dest="reports", help="replay: each set's report to DIR/SET.json")
    parser.add_argument("--against", type=Path, help="replay: another fixture folder, compared with the default")
    parser.add_argument("--against-set", default="", help="key=value[,key=value]: what --against was recorded under")
    args = parser.parse_args(argv)
    by_name = {s.name: s for s in SETS}
    default = [s.name for s in SETS if args.test or not s.test]
    names = [n.strip() for n in args.sets.split(",")] if args.sets else default
    unknown = [n for n in names if n not in by_name]
    if unknown:
        parser.error(f"unknown set(s) {', '.join(unknown)}; known: {', '.join(by_name)}")
    chosen = [by_name[n] for n in names]
    tried = configurations(parser, args.specs)
    if args.command == "record" and (tried or args.against):
        parser.error("--set and --against are for replay: a recording takes its settings from KBSEEK_* variables")
    if args.against_set and args.against is None:
        parser.error("--against-set says what the --against folder was recorded under: give --against DIR too")
    against = None
    if args.against is not None:
        recorded = configurations(parser, [f"against:{args.against_set}"])[0][1] if args.against_set else {}
        against = (args.against, recorded)
    if args.command == "replay" and any(s.test for s in chosen) and not args.test:
        parser.error("test splits are replayed only with --test (choose on dev, then run them once)")
    if args.command == "record":
        record(chosen, args.fixtures, force=args.force)
    else:
        print("\n".join(replay(chosen, args.fixtures, tried, args.reports, against)))


if __name__ == "__main__":
    main()
