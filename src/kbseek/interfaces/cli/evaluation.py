"""Measuring retrieval quality: ``kbseek eval run|compare|add-case|report|record`` (the work itself is in
``kbseek.evaluation``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from kbseek.errors import DatasetError
from kbseek.evaluation.compare import compare, load_run
from kbseek.evaluation.report import write_report
from kbseek.interfaces.cli.common import HELP, GlobalOptions, JsonFlag, emit, exit_on_error, load_settings, out, say
from kbseek.observability.logs import configure_logging

eval_app = typer.Typer(help="Measure retrieval quality on a dataset.", **HELP)


def load_data(
    dataset: Path,
    *,
    corpus: str | None = None,
    queries: str | None = None,
    qrels: str | None = None,
    split: str | None = None,
) -> Any:
    """A golden case file or a dataset folder, as one ``Dataset``."""
    # Imported here: start-up cost (see common)
    from kbseek.evaluation.cases import load_cases
    from kbseek.evaluation.datasets import load_dataset

    if dataset.is_file():
        return load_cases(dataset, split=split)
    return load_dataset(dataset, corpus=corpus, queries=queries, qrels=qrels, split=split)


@eval_app.command("run")
def eval_run(
    dataset: Annotated[
        Path,
        typer.Argument(
            help="Golden case file (.json), or dataset folder (corpus.jsonl or docs/, queries.jsonl, qrels.tsv)."
        ),
    ],
    policy: Annotated[list[str], typer.Option(help="Policy to run; repeat for several.")] = ["hybrid"],
    corpus: Annotated[str | None, typer.Option(help="Corpus file or folder inside the dataset.")] = None,
    queries: Annotated[str | None, typer.Option(help="Queries file inside the dataset.")] = None,
    qrels: Annotated[str | None, typer.Option(help="Judgments file inside the dataset.")] = None,
    split: Annotated[str | None, typer.Option(help="Only queries whose metadata.split is this.")] = None,
    k: Annotated[str, typer.Option("--k", help="Cut-offs, comma-separated.")] = "1,3,5,10",
    depth: Annotated[int, typer.Option(min=1, max=1000, help="Chunks retrieved per query.")] = 100,
    setting: Annotated[
        list[str], typer.Option("--set", help="NAME:key=value[,key=value] configuration to compare; repeat.")
    ] = [],
    cache: Annotated[Path | None, typer.Option(help="Index cache folder (default ~/.cache/kbseek/eval).")] = None,
    replay: Annotated[
        Path | None, typer.Option(help="Re-score recorded lane candidates ('eval record'): no embedding.")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="Evaluate a running server instead (live acceptance): its search and lookup endpoints."),
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(help="Bearer key for --base-url (default: KBSEEK_READ_API_KEY or KBSEEK_API_KEY).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run the dataset's queries through lookup and score them (recall, MRR, nDCG, hit, precision)."""
    # Imported here: start-up cost (see common)
    from kbseek.evaluation.live import evaluate_live
    from kbseek.evaluation.replay import load
    from kbseek.evaluation.runner import evaluate, parse_configs

    with exit_on_error(as_json):
        try:
            ks = tuple(int(x) for x in k.split(",") if x.strip())
        except ValueError:
            raise typer.BadParameter(f"--k must be integers separated by commas, got {k!r}") from None
        base = load_settings()
        if not GlobalOptions.verbose:
            configure_logging("ERROR")  # the corpus's own warnings are not the evaluation's
        data = load_data(dataset, corpus=corpus, queries=queries, qrels=qrels, split=split)
        fixture = None
        if replay is not None:
            fixture = load(replay)
            base = base.model_copy(update={"embedder": "none"})  # replays embed nothing
        if base_url is not None:
            report = evaluate_live(
                data,
                base_url,
                policies=policy,
                ks=ks,
                depth=depth,
                base=base,
                api_key=api_key or base.read_api_key or base.api_key,
            )
        else:
            report = evaluate(
                data,
                policies=policy,
                configs=parse_configs(setting),
                ks=ks,
                depth=depth,
                cache_root=cache,
                base=base,
                fixture=fixture,
            )
        emit(report, as_json, _print_runs)


def _print_runs(report: dict[str, Any]) -> None:
    top = report["config"]["k"][-1]
    shown = [f"ndcg@{top}", f"recall@{top}", f"mrr@{top}", "hit@1"]
    table = Table(box=None, highlight=False)
    table.add_column("run", no_wrap=True)
    for name in shown:
        table.add_column(name, no_wrap=True)
    for name in ("refused", "no-answer refused", "evidence precision", "chars"):
        table.add_column(name, no_wrap=True)
    table.add_column("s", justify="right")
    for r in report["runs"]:
        cells = [
            f"{r['metrics'][n]['mean']:.3f} "
            f"[dim][{r['metrics'][n]['ci_low']:.2f}, {r['metrics'][n]['ci_high']:.2f}][/dim]"
            for n in shown
        ]
        na, ev = r.get("no_answer", {}), r.get("evidence") or {}
        cells += [
            f"{na.get('answerable_refused', 0):.0%}",
            f"{na['unanswerable_refused']:.0%} of {na['unanswerable']}" if "unanswerable" in na else "–",
            f"{ev['precision']:.3f} of {ev['strong_pieces']}" if ev.get("precision") is not None else "–",
            f"{ev['chars_mean']:.0f}" if ev.get("chars_mean") is not None else "–",
        ]
        table.add_row(r["name"], *cells, f"{r['seconds']:.1f}")
    say(f"{report['dataset']}: {report['config']['queries']} queries")
    out.print(table)


@eval_app.command("compare")
def eval_compare(
    run_a: Annotated[str, typer.Argument(help="Report of 'eval run --json' (REPORT.json or REPORT.json#run-name).")],
    run_b: Annotated[str, typer.Argument(help="The run to compare with it, the same way.")],
    metric: Annotated[str, typer.Option(help="Per-case metric compared.")] = "ndcg@10",
    show: Annotated[int, typer.Option(help="Wins and losses listed.")] = 10,
    as_json: JsonFlag = False,
) -> None:
    """Case-by-case wins and losses of B against A, with a paired randomisation test."""
    with exit_on_error(as_json):
        label_a, a = load_run(run_a)
        label_b, b = load_run(run_b)
        result = compare(a, b, metric=metric, label_a=label_a, label_b=label_b)
        emit(result, as_json, lambda result: _print_comparison(result, show))


def _print_comparison(result: dict[str, Any], show: int) -> None:
    verdict = "significant at 0.05" if result["p_value"] < 0.05 else "not significant at 0.05"
    say(
        f"{result['metric']}: A {result['a']} {result['mean_a']:.3f} · B {result['b']} {result['mean_b']:.3f} · "
        f"difference {result['mean_difference']:+.3f} (p = {result['p_value']:.4f}, {verdict}); "
        f"{result['cases']} cases: {result['wins']} wins, {result['losses']} losses, {result['ties']} ties"
    )
    for side in ("a", "b"):
        ev, na = result.get(f"evidence_{side}") or {}, result.get(f"no_answer_{side}") or {}
        if ev.get("strong_pieces") is not None or "unanswerable" in na:
            precision = f"{ev['precision']:.3f}" if ev.get("precision") is not None else "–"
            chars = f"{ev['chars_mean']:.0f}" if ev.get("chars_mean") is not None else "–"
            refused = f"{na['unanswerable_refused']:.0%}" if "unanswerable" in na else "–"
            say(
                f"  {side.upper()}: evidence precision {precision}, chars/answer {chars}, answerable refused "
                f"{na.get('answerable_refused', 0):.0%}, no-answer refused {refused}"
            )
    for title, rows in (("B loses", result["losses_detail"]), ("B wins", result["wins_detail"])):
        if rows:
            say(f"[bold]{title}[/bold]:")
            for r in rows[:show]:
                say(f"  {r['difference']:+.3f}  {r['query_id']}  {r['query'][:70]}")


@eval_app.command("add-case")
def eval_add_case(
    cases: Annotated[Path, typer.Argument(help="Golden case file to add to.")],
    lookup_json: Annotated[
        Path | None, typer.Argument(help="A recorded lookup: the output of 'kbseek lookup --json' ('-' = stdin).")
    ] = None,
    case_id: Annotated[str | None, typer.Option("--id", help="The new case's id (with a recorded lookup).")] = None,
    from_feedback: Annotated[
        bool,
        typer.Option(
            "--from-feedback",
            help="Instead: every 'wrong' and 'missed' report readers sent (report_evidence, POST /api/feedback) "
            "not yet in the file becomes case fb-<report id>.",
        ),
    ] = False,
    piece: Annotated[
        list[int] | None, typer.Option(help="Answer piece (1-based) that is right; repeat. Default 1.")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option(help="Tag; repeat.")] = None,
    split: Annotated[str, typer.Option(help="dev | test")] = "dev",
    notes: Annotated[str, typer.Option(help="Why this case exists.")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Turn a recorded lookup (a bad answer seen in production), or readers' reports, into golden cases."""
    from kbseek.evaluation.cases import add_case, case_from_lookup  # imported here: start-up cost (see common)

    with exit_on_error(as_json):
        if from_feedback:
            if lookup_json is not None or case_id is not None:
                raise DatasetError("--from-feedback takes no recorded lookup and no --id: each report names its case")
            added, skipped = _cases_from_feedback(cases, split)
            emit({"added": added, "skipped": skipped}, as_json, lambda r: _print_from_feedback(cases, r))
            return
        if lookup_json is None or case_id is None:
            raise DatasetError("give a recorded lookup and --id, or --from-feedback")
        try:
            text = sys.stdin.read() if str(lookup_json) == "-" else lookup_json.read_text(encoding="utf-8")
            recorded = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DatasetError(f"{lookup_json}: not a lookup's JSON ({exc})") from None
        case = case_from_lookup(recorded, case_id=case_id, pieces=piece, split=split, tags=tag, notes=notes)
        add_case(cases, case)
        emit(
            case,
            as_json,
            lambda case: say(
                f"added case {case.id} to {cases}: "
                + ("no-answer case" if not case.answerable else f"{len(case.expected)} expected piece(s)")
            ),
            view=lambda case: case.model_dump(),
        )


def _cases_from_feedback(path: Path, split: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Add a case per new "wrong" or "missed" report; those that cannot be one are named with the reason."""
    # Imported here: start-up cost (see common)
    from kbseek.evaluation.cases import add_case, case_from_feedback, read_cases
    from kbseek.interfaces.cli.common import open_reading

    existing = {c.id for c in read_cases(path).cases}
    with open_reading(vectors=False) as kb:
        reports = kb.reviews.feedback(verdicts=("wrong", "missed"), limit=100_000)
    added, skipped = [], []
    for report in reports:
        if f"fb-{report['id']}" in existing:
            continue
        try:
            case = case_from_feedback(report, split=split)
            add_case(path, case)
        except DatasetError as exc:
            skipped.append({"feedback": report["id"], "reason": str(exc)})
            continue
        existing.add(case.id)
        added.append(case.model_dump())
    return added, skipped


def _print_from_feedback(path: Path, result: dict[str, Any]) -> None:
    for case in result["added"]:
        kind = "no-answer case" if not case["answerable"] else f"{len(case['expected'])} expected piece(s)"
        say(f"added case {case['id']} ({kind}): {case['query'][:70]}", markup=False)
    for skip in result["skipped"]:
        say(f"[yellow]skipped[/yellow] feedback {skip['feedback']}: {skip['reason']}")
    say(f"{len(result['added'])} case(s) added to {path}, {len(result['skipped'])} report(s) skipped", markup=False)


@eval_app.command("report")
def eval_report(
    report_json: Annotated[Path, typer.Argument(help="Report of 'eval run --json'.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the Markdown, JSON and PNG charts.")] = Path(
        "eval/reports"
    ),
    name: Annotated[str | None, typer.Option(help="File stem (default: the dataset's name).")] = None,
    title: Annotated[str | None, typer.Option(help="Heading of the Markdown report.")] = None,
    with_json: Annotated[
        bool, typer.Option("--json/--no-json", help="Also copy the run JSON (it holds every query's text).")
    ] = True,
) -> None:
    """Write a run report as Markdown tables with PNG charts (metrics with intervals, per-tag breakdown)."""
    with exit_on_error(False):
        try:
            report = json.loads(report_json.read_text(encoding="utf-8"))
            report["runs"][0]["metrics"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise DatasetError(f"{report_json}: not a 'kbseek eval run --json' report ({exc})") from None
        path = write_report(report, out_dir, name or report["dataset"], title=title, with_json=with_json)
        say(f"wrote {path} with its charts")


@eval_app.command("record")
def eval_record(
    dataset: Annotated[Path, typer.Argument(help="Golden case file (.json) or dataset folder.")],
    out_file: Annotated[Path, typer.Option("--out", help="Fixture file to write.")],
    corpus: Annotated[str | None, typer.Option(help="Corpus file or folder inside the dataset.")] = None,
    queries: Annotated[str | None, typer.Option(help="Queries file inside the dataset.")] = None,
    qrels: Annotated[str | None, typer.Option(help="Judgments file inside the dataset.")] = None,
    split: Annotated[str | None, typer.Option(help="Only cases of this split.")] = None,
    cache: Annotated[Path | None, typer.Option(help="Index cache folder (default ~/.cache/kbseek/eval).")] = None,
) -> None:
    """Record every case's lane candidates once, for 'eval run --replay' (fusion, levels and answers re-scored
    without embedding)."""
    # Imported here: start-up cost (see common)
    from kbseek.evaluation.datasets import cached_settings, default_cache_root, open_dataset_kb
    from kbseek.evaluation.replay import record

    with exit_on_error(False):
        data = load_data(dataset, corpus=corpus, queries=queries, qrels=qrels, split=split)
        kb = open_dataset_kb(data, cached_settings(data, load_settings(), cache or default_cache_root()))
        try:
            fixture = record(kb, data)
        finally:
            kb.close()
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps(fixture, ensure_ascii=False) + "\n", encoding="utf-8")
        say(
            f"recorded {len(fixture['cases'])} case(s) at index {fixture['index_version']} "
            f"({fixture['embedding_model'] or 'no dense lane'}) to {out_file}"
        )


@eval_app.command("calibrate")
def eval_calibrate(
    dataset: Annotated[Path, typer.Argument(help="Golden case file (.json) or dataset folder of this knowledge base.")],
    split: Annotated[
        str | None, typer.Option(help="Only cases of this split (calibrate on dev, check on test).")
    ] = None,
    answered: Annotated[
        float, typer.Option(min=0.5, max=0.99, help="Share of the answerable cases the cut must still answer.")
    ] = 0.95,
    cache: Annotated[Path | None, typer.Option(help="Index cache folder (default ~/.cache/kbseek/eval).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Choose this knowledge base's cut for the answerability gate from its own cases; prints the setting."""
    # Imported here: start-up cost (see common)
    from kbseek.evaluation.calibration import calibrate
    from kbseek.evaluation.datasets import cached_settings, default_cache_root, open_dataset_kb

    with exit_on_error(as_json):
        base = load_settings()
        if not GlobalOptions.verbose:
            configure_logging("ERROR")
        data = load_data(dataset, split=split)
        kb = open_dataset_kb(data, cached_settings(data, base, cache or default_cache_root()))
        try:
            result = calibrate(kb, data, answered=answered)
        finally:
            kb.close()
        emit(result, as_json, _print_calibration, view=lambda r: r.to_dict())


def _print_calibration(result: Any) -> None:
    view = result.to_dict()
    table = Table("questions", "n", f"refused at the model's cut {view['model_cut']}", f"refused at {view['cut']}")
    for group, row in view["groups"].items():
        table.add_row(group, str(row["questions"]), _share(row["refused_at_model_cut"]), _share(row["refused_at_cut"]))
    out.print(table)
    say(f"add to kbseek.toml (or KBSEEK_ANSWERABILITY_CUT): {view['setting']}")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
