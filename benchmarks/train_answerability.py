"""Fit the answerability gate (``kbseek.core.answerability``) on dev/train splits only, and check it leave-one-set-out.

    python benchmarks/train_answerability.py [--policy hybrid|lexical] [--signals FILE] [--recollect] [--write]
        [--exclude SET]

Each dev/train question is asked as a default ``lookup_knowledge`` request; the recall its gate reads gives the
signals (``lookup.answering.question_signals``). Positives: the answerable questions. Negatives: the questions written
without an answer, and every answerable question asked again with its judged documents taken out of the recall
(near-topic by construction: the rest of the knowledge base is still there). A logistic regression (L2, standardised
features) is fitted; the cut is the highest probability that still answers ``TARGET_ANSWERED`` of the positives.
Leave-one-set-out: each set scored by a model fitted on the others. ``--write`` prints the ``Model`` to paste into
``MODELS``. ``--policy lexical`` fits the gate of a recall without dense scores (``MODELS["lexical"]``) on the
lexical policy's recall of the same questions. The sets are read in place (``shared/data``); nothing is copied.
The hybrid gate in ``MODELS`` is fitted with ``--exclude tidb-ops-dev`` (a refit with those rows was measured and
dropped: docs/evaluation.md); a run without it shows, leave-one-set-out, how that fit scores the tidb-ops rows.
``--exclude`` leaves a set out of the fit, and out of the questions asked when the signals are collected
(``--recollect``, or no signals file yet; the tidb-ops tree is the slow one). The signals file says which sets it
skipped, the policy it was asked under and the ``embedding_input`` its cosines come from; a run that needs more, or
asks otherwise, is told to ``--recollect``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"  # the evaluation data beside the repository
OPS = ROOT / "eval" / "cases" / "tidb-ops"  # ops questions over the TiDB docs tree (its dev split)
TARGET_ANSWERED = 0.95
L2 = 1.0


def _cases(path: Path) -> object:
    from kbseek.evaluation.cases import load_cases  # imported here: the script's start-up stays cheap

    return load_cases(path, split="dev")


def _folder(path: Path, **options: str) -> object:
    from kbseek.evaluation.datasets import load_dataset  # imported here: as above

    return load_dataset(path, **options)


# every dev/train split used, the same for both gates (the hybrid gate's tidb-ops rows need the 16,000-chunk tree
# embedded: about 11 minutes on two cores with kbseek's engine, cached after)
SETS = {
    "golden-dev": lambda: _cases(ROOT / "examples" / "eval" / "golden-cases.json"),
    "superbizagent-dev": lambda: _folder(DATA / "superbizagent-runbooks", split="dev"),
    "prometheus": lambda: _folder(DATA / "prometheus-operator-runbooks"),
    "superbizagent-written-dev": lambda: _cases(ROOT / "examples" / "eval" / "superbizagent-dev.json"),
    "tidb-ops-dev": lambda: _folder(
        DATA / "tidb-faq-zh-dev", queries=str(OPS / "queries.jsonl"), qrels=str(OPS / "qrels.tsv"), split="dev"
    ),
}


def sets(skip: list[str] | tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """(name, dataset) of each set in ``SETS`` but those in ``skip`` (not even loaded)."""
    return [(name, load()) for name, load in SETS.items() if name not in skip]


OFF_TOPIC = 30  # questions of each off-topic bank asked of every knowledge base
# (bank, queries file, knowledge bases it is off-topic for): none of these sets' questions is answered by those
BANKS = (
    (
        "cmrc-trial",
        "cmrc2018-retrieval-zh/queries-trial.jsonl",
        ("golden-dev", "superbizagent-dev", "prometheus", "tidb-ops-dev"),
    ),
    (
        "scifact-train",
        "beir-scifact/queries-train.jsonl",
        ("golden-dev", "superbizagent-dev", "prometheus", "tidb-ops-dev"),
    ),
    ("tidb-dev", "tidb-faq-zh-dev/queries.jsonl", ("superbizagent-dev", "prometheus")),
)


def off_topic(set_name: str) -> list[tuple[str, str]]:
    """(bank, question) pairs asked of ``set_name``'s knowledge base as off-topic negatives."""
    out = []
    for bank, path, targets in BANKS:
        if set_name in targets:
            lines = (DATA / path).read_text(encoding="utf-8").splitlines()[:OFF_TOPIC]
            out.extend((bank, json.loads(line)["text"]) for line in lines)
    return out


def collect(policy: str, skip: list[str]) -> list[dict]:
    from kbseek.evaluation.datasets import cached_settings, default_cache_root, open_dataset_kb  # imported here
    from kbseek.lookup.answering import question_signals  # imported here: as above
    from kbseek.observability.logs import configure_logging  # imported here: as above
    from kbseek.settings import Settings  # imported here: as above

    configure_logging("ERROR")
    import kbseek.lookup.tool as tool_module  # imported here: its gate step is wrapped to see what it sees

    seen: list[tuple] = []
    real = tool_module.levelled

    def spy(indexes, query, hits, hint, t, reference, dense=None):
        seen.append((indexes, query, list(hits), hint, reference, dense))
        return real(indexes, query, hits, hint, t, reference, dense)

    tool_module.levelled = spy
    rows = []
    for name, dataset in sets(skip):  # a set left out of the fit is not asked either (the tidb-ops tree costs most)
        kb = open_dataset_kb(dataset, cached_settings(dataset, Settings(), default_cache_root()))
        try:
            for query in dataset.queries + dataset.unanswerable:
                seen.clear()
                kb.lookup_tool({"query": query.text, "policy": policy})  # a default request, as an agent makes
                indexes, text, hits, hint, ref, dense = seen[0]  # the first gate: the query as asked (and rewritten)
                judged = {j.partition("#")[0] for j in dataset.qrels.get(query.id, {})}  # the judged files
                answerable = query.id in dataset.qrels
                s = question_signals(indexes, text, hits, hint, ref, dense)
                rows.append({"set": name, "id": query.id, "label": int(answerable), "x": asdict(s), "kind": "asked"})
                if answerable:
                    rest = [h for h in hits if not _judged(_file(h.chunk), judged)]
                    if rest:
                        kept = [(v, c) for v, c in dense or () if not _judged(_vector_file(indexes, v), judged)]
                        s = question_signals(indexes, text, rest, _without(hint, hits, rest), ref, kept)
                        rows.append({"set": name, "id": query.id, "label": 0, "x": asdict(s), "kind": "held-out"})
            for bank, text in off_topic(name):
                seen.clear()
                kb.lookup_tool({"query": text, "policy": policy})
                indexes, asked, hits, hint, ref, dense = seen[0]
                s = question_signals(indexes, asked, hits, hint, ref, dense)
                rows.append({"set": name, "id": f"{bank}:{text[:40]}", "label": 0, "x": asdict(s), "kind": "off-topic"})
        finally:
            kb.close()
        print(f"{name}: {sum(r['set'] == name for r in rows)} rows", file=sys.stderr)
    tool_module.levelled = real
    return rows


def _file(chunk) -> str:
    """The file a chunk comes from: its path, or for a corpus of sections (``file.md#3``) the part before ``#``."""
    return chunk.source_path.partition("#")[0]


def _vector_file(indexes, vector_id: str) -> str:
    """The file of a dense candidate: a chunk's, or a document summary's (``D<doc>``)."""
    from kbseek.retrieval.lanes import document_of  # imported here: as above

    doc = indexes.documents.get(document_of(indexes, vector_id) or "")
    return doc.path.partition("#")[0] if doc is not None else ""


def _judged(file: str, judged: set[str]) -> bool:
    return file in judged or file.removesuffix(".md") in judged


def _without(hint, hits, rest):
    """The hint without the documents taken out."""
    from dataclasses import replace  # imported here: only this helper needs it

    kept = {h.chunk.document_id for h in rest}
    gone = {h.chunk.document_id for h in hits} - kept
    return replace(hint, matches=tuple(m for m in hint.matches if m.document_id not in gone))


def fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale
    w, b = np.zeros(z.shape[1]), 0.0
    for _ in range(3000):  # plain gradient descent: small, deterministic
        p = 1 / (1 + np.exp(-(z @ w + b)))
        w -= 0.1 * (z.T @ (p - y) / len(y) + L2 * w / len(y))
        b -= 0.1 * float((p - y).mean())
    return w, b, mean, scale


def prob(x: np.ndarray, model) -> np.ndarray:
    w, b, mean, scale = model
    return 1 / (1 + np.exp(-(((x - mean) / scale) @ w + b)))


def cut_for(p_pos: np.ndarray) -> float:
    return float(np.quantile(p_pos, 1 - TARGET_ANSWERED))


def main() -> None:
    from kbseek.core.answerability import FEATURES, LEXICAL_FEATURES  # imported here: as above
    from kbseek.settings import Settings  # imported here: as above

    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", choices=("hybrid", "lexical"), default="hybrid")
    parser.add_argument("--signals", type=Path, default=None, help="default /tmp/answerability-signals-POLICY.json")
    parser.add_argument("--recollect", action="store_true")
    parser.add_argument("--write", action="store_true")
    parser.add_argument(
        "--exclude", action="append", default=[], choices=list(SETS), help="leave a set's rows out of the fit"
    )
    args = parser.parse_args()
    signals = args.signals or Path(f"/tmp/answerability-signals-{args.policy}.json")
    # what the rows were read from: the lexical gate reads no cosines, so the embedded input does not matter to it
    source = {"policy": args.policy, "embedding_input": Settings().embedding_input if args.policy == "hybrid" else None}
    if args.recollect or not signals.exists():
        rows = collect(args.policy, args.exclude)
        signals.write_text(json.dumps(source | {"skipped": sorted(args.exclude), "rows": rows}))
    saved = json.loads(signals.read_text())
    if not isinstance(saved, dict):
        parser.error(f"{signals} does not say what it was collected from (an older file): --recollect")
    for key, value in source.items():
        if saved.get(key) != value:
            parser.error(f"{signals} holds signals of {key}={saved.get(key)}, not {value}: --recollect")
    missing = sorted(set(saved.get("skipped", ())) - set(args.exclude))
    if missing:
        parser.error(f"{signals} was collected without {', '.join(missing)}: --recollect to fit on it")
    rows = [r for r in saved["rows"] if r["set"] not in args.exclude]
    features = LEXICAL_FEATURES if args.policy == "lexical" else FEATURES
    x = np.array([[r["x"][name] for name in features] for r in rows], dtype=float)
    y = np.array([r["label"] for r in rows], dtype=float)
    names = sorted({r["set"] for r in rows})
    print("leave-one-set-out: answerable / written unanswerable / held-out-document / off-topic questions refused")
    for held in names:
        train = np.array([r["set"] != held for r in rows])
        model = fit(x[train], y[train])
        cut = cut_for(prob(x[train & (y == 1)], model))
        p = prob(x, model)
        test = ~train
        for kind, mask in (
            ("answerable", test & (y == 1)),
            ("unanswerable", test & (y == 0) & np.array([r["kind"] == "asked" for r in rows])),
            ("held-out", test & (y == 0) & np.array([r["kind"] == "held-out" for r in rows])),
            ("off-topic", test & (y == 0) & np.array([r["kind"] == "off-topic" for r in rows])),
        ):
            if mask.any():
                print(f"  {held:20s} {kind:13s} refused {np.mean(p[mask] < cut):.2f} of {int(mask.sum())}")
    w, b, mean, scale = fit(x, y)
    cut = cut_for(prob(x[y == 1], (w, b, mean, scale)))
    p = prob(x, (w, b, mean, scale))
    print(
        f"all sets: answerable refused {np.mean(p[y == 1] < cut):.2f}, negatives refused {np.mean(p[y == 0] < cut):.2f}"
    )
    print("weights", dict(zip(features, np.round(w, 3).tolist())))
    if args.write:
        r = lambda v: tuple(round(float(a), 5) for a in v)  # noqa: E731
        print(
            f"Model({r(w)}, {round(b, 5)}, {r(mean)}, {r(scale)}, cut={round(cut, 4)}, "
            f'source="dev: {", ".join(names)}; {len(rows)} rows"'
            + (", features=LEXICAL_FEATURES)" if args.policy == "lexical" else ")")
        )


if __name__ == "__main__":
    main()
