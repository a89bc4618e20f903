"""Fits and charts for ``scaling.py report``: how each measured quantity grows with the number of chunks.

A power law ``y = a * n**b`` is fitted by least squares in log-log space; ``b`` is the fitted exponent. Where
``b`` is near 1, a line through the origin (``a * n``) and ``a * n * ln n`` are fitted too and the one with the
smaller error in log space names the growth (over 10k-1M, ``n ln n`` looks like ``n**1.07``). A size a store did not
reach is extrapolated with its power law, and every such number is marked ``(extrap.)``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Getter = Callable[[dict[str, Any]], float | None]


def fit(points: list[tuple[float, float]]) -> dict[str, Any] | None:
    """The power law through ``(n, y)`` points, and which growth model fits them best."""
    points = [(n, y) for n, y in points if y is not None and y > 0]
    if len(points) < 2:
        return None
    n, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    b, log_a = np.polyfit(n, y, 1)
    if b < 0.9:
        growth = "sublinear"
    elif b > 1.2:
        growth = "superlinear"
    else:
        errors = {}
        for name, shape in (("linear", n), ("n log n", n + np.log(n))):
            offset = float(np.mean(y - shape))
            errors[name] = float(np.sqrt(np.mean((y - shape - offset) ** 2)))
        growth = min(errors, key=errors.__getitem__)
    return {"b": round(float(b), 2), "a": float(math.exp(log_a)), "growth": growth}


def line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``y = slope * n + intercept``: memory is a fixed base plus a cost per chunk (MiB per chunk)."""
    slope, intercept = np.polyfit([p[0] for p in points], [p[1] for p in points], 1)
    return float(slope), float(intercept)


def predict(model: dict[str, Any], n: float) -> float:
    return float(model["a"] * n ** model["b"])


def chunks_of(row: dict[str, Any]) -> float:
    """The chunks a home was built to (10,299 for a target of 10,000), else the row's size."""
    return float((row.get("build") or {}).get("chunks") or row["size"])


def series(rows: list[dict[str, Any]], get: Getter) -> list[tuple[float, float]]:
    out = []
    for row in rows:
        try:
            value = get(row)
        except (KeyError, TypeError):
            value = None
        if value is not None:
            out.append((chunks_of(row), float(value)))
    return out


def _cell(value: float | None, unit: str = "") -> str:
    if value is None:
        return "–"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}"
    return text + unit


def quantities(store: str) -> dict[str, Getter]:
    """What is fitted per store: name -> getter from a result row."""
    q: dict[str, Getter] = {
        "lookup p50 ms": lambda r: r[store]["p50_ms"],
        "lookup p95 ms": lambda r: r[store]["p95_ms"],
        "dense search p50 ms": lambda r: r[store]["stages_p50_ms"]["dense_search"],
        "bm25 p50 ms": lambda r: r[store]["stages_p50_ms"]["bm25"],
        "l0 p50 ms": lambda r: r[store]["stages_p50_ms"]["l0"],
        "start-up s": lambda r: r[store]["startup_s"],
        "process RSS after start-up MiB": lambda r: r[store]["rss_mib"]["after_startup"],
        "process peak RSS MiB": lambda r: r[store]["rss_mib"]["peak"],
    }
    for part in ("vector_store", "bm25_postings", "l0_keywords", "chunks", "document_cards", "standby_copy_extra"):
        q[f"{part} MiB"] = lambda r, part=part: r[store]["structures_mib"].get(part)
    if store == "milvus":
        q["server RSS after fill MiB"] = lambda r: r["milvus"]["server_rss_after_fill_mib"]
        q["server RSS after lookups MiB"] = lambda r: r["milvus"]["server_rss_after_lookups_mib"]
        q["server disk MiB"] = lambda r: r["milvus"]["server_disk_mib"]
        q["fill vectors/s"] = lambda r: r["milvus"]["fill"]["vectors_per_s"]
    return q


def is_timing(name: str) -> bool:
    return name.endswith((" ms", " s", "/s"))


def comparable_loads(rows: list[dict[str, Any]], store: str, sizes: list[int]) -> bool:
    """Whether the 1-minute load averages after the measurements of ``sizes`` are within a factor of 2."""
    measured = [r for r in rows if r["size"] in sizes]
    loads = [float(str(r.get(f"load_after_{store}", "0")).split()[0]) for r in measured]
    # what else ran beside a measurement, where it was noted (the load average alone does not show it)
    beside = {str((r.get(store) or {}).get("beside", "")) for r in measured}
    return bool(loads) and max(loads) <= 2 * max(min(loads), 0.5) and len(beside) <= 1


def table(rows: list[dict[str, Any]], store: str, sizes: list[int]) -> list[str]:
    head = "| quantity | " + " | ".join(f"{s:,}" for s in sizes) + " | exponent b | growth | KB per chunk (line) |"
    lines = [head, "|---|" + "---:|" * len(sizes) + "---:|---|---:|"]
    for name, get in quantities(store).items():
        points = series(rows, get)
        if not points:
            continue
        model = fit(points)
        by_chunks = dict(points)
        measured = {r["size"]: by_chunks[chunks_of(r)] for r in rows if chunks_of(r) in by_chunks}
        cells = []
        for size in sizes:
            row = next((r for r in rows if r["size"] == size), None)
            near = row and (row.get(store) or {}).get("chunks")
            if size in measured:
                cells.append(_cell(measured[size]))
            elif name.startswith("server RSS"):  # a Go heap and its caches: no per-vector line (see docs/scaling.md)
                cells.append("–")
            elif model is not None and name.endswith("MiB"):
                slope, intercept = line(points)
                cells.append(_cell(intercept + slope * (near or size)) + " (extrap.)")
            elif model is not None:
                cells.append(_cell(predict(model, near or size)) + " (extrap.)")
            else:
                cells.append("–")
        b = f"{model['b']:.2f}" if model else "–"
        growth = model["growth"] if model else "–"
        if model and is_timing(name) and not comparable_loads(rows, store, [int(n) for n, _ in points]):
            b, growth = f"({b})", "not comparable: measured under different loads or beside other work"
            cells = [c if "extrap." not in c else "–" for c in cells]
        per_chunk = f"{line(points)[0] * 1024:.2f}" if name.endswith("MiB") and len(points) > 1 else ""
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {b} | {growth} | {per_chunk} |")
    loads = [
        next((r.get(f"load_after_{store}", "–") for r in rows if r["size"] == s and store in r), "–") for s in sizes
    ]
    lines.append("| load average after (1, 5, 15 min) | " + " | ".join(loads) + " | | | |")
    return lines


def ingest_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| target | documents | chunks | write s | index s | total s | chunks/s | database MiB | load before | after |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        b = r["build"]
        lines.append(
            f"| {r['size']:,} | {b['documents']:,} | {b['chunks']:,} | {b['write_s']:.0f} | {b['index_s']:.0f} "
            f"| {b['ingest_s']:.0f} | {b['chunks_per_s']:,.0f} | {b['database_mib']:,.0f} | {r['load_before']} "
            f"| {r.get('load_after_build', '–')} |"
        )
    model = fit([(float(r["build"]["chunks"]), r["build"]["ingest_s"]) for r in rows])
    loads = [float(r.get("load_after_build", "0").split()[0]) for r in rows]
    if model and max(loads) <= 2 * max(min(loads), 0.5):
        lines.append(f"\nIngest time: exponent b = {model['b']:.2f} ({model['growth']}).")
    elif model:
        lines.append(f"\nIngest time: no fit (exponent {model['b']:.2f} across loads {min(loads)}-{max(loads)}).")
    return lines


def loads_note(rows: list[dict[str, Any]]) -> str:
    """The 1-minute load after each size's measurement, per store, for a chart's title."""
    parts = []
    for store in ("local", "milvus"):
        loads = [(r["size"], str(r[f"load_after_{store}"]).split()[0]) for r in rows if f"load_after_{store}" in r]
        if loads:
            parts.append(f"{store} " + ", ".join(f"{n // 1000}k {load}" for n, load in loads))
    busy = sorted(
        {
            f"{store} {r['size'] // 1000}k"
            for r in rows
            for store in ("local", "milvus")
            if (r.get(store) or {}).get("beside", "nothing").split()[0] not in ("nothing", "")
        }
    )
    note = "\n1-min load after: " + "; ".join(parts)
    return note + ("\nbeside other work: " + ", ".join(busy) if busy else "")


def charts(rows: list[dict[str, Any]], folder: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    both = ("local", "milvus")
    panels = [
        (
            "scaling-lookup.png",
            f"lookup latency (ms): {loads_note(rows)}",
            [(st, n) for st in both for n in ("lookup p50 ms", "lookup p95 ms", "dense search p50 ms", "bm25 p50 ms")],
        ),
        (
            "scaling-startup.png",
            f"start-up (s): {loads_note(rows)}",
            [(st, "start-up s") for st in both],
        ),
        (
            "scaling-memory.png",
            "memory (MiB)",
            [
                ("local", f"{part} MiB")
                for part in ("vector_store", "bm25_postings", "chunks", "l0_keywords", "standby_copy_extra")
            ]
            + [("local", "process RSS after start-up MiB"), ("milvus", "server RSS after fill MiB")],
        ),
    ]
    for file_name, ylabel, names in panels:
        fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
        for store, name in names:
            points = series(rows, quantities(store)[name])
            if not points:
                continue
            model = fit(points)
            label = f"{store}: {name.rsplit(' ', 1)[0]}"
            if model and not is_timing(name):
                label += f" (b={model['b']:.2f})"
            drawn = ax.plot(*zip(*points), marker="o", label=label)[0]
            if model and points[-1][0] < 1e6 and name.endswith("MiB") and not name.startswith("server"):
                slope, intercept = line(points)
                ns = [points[-1][0], 1e6]
                ax.plot(ns, [intercept + slope * x for x in ns], linestyle=":", color=drawn.get_color())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("chunks (dotted: memory extrapolated along the fitted line)")
        ax.set_ylabel(
            ylabel.split(":")[0].split(" (")[0]
            + (" (ms)" if "(ms)" in ylabel else " (s)" if "(s)" in ylabel else " (MiB)")
        )
        ax.set_title(f"kbseek scaling: {ylabel}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        fig.savefig(folder / file_name)
        plt.close(fig)
        made.append(file_name)
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    builds = [(float(r["build"]["chunks"]), r["build"]["chunks_per_s"]) for r in rows]
    ax.plot(*zip(*builds), marker="o", label="ingest, in-process store (chunks/s)")
    fills = series(rows, lambda r: r["milvus"]["fill"]["vectors_per_s"])
    if fills:
        ax.plot(*zip(*fills), marker="s", label="cached vectors into Milvus 2.3.5 (vectors/s)")
    ax.set_xscale("log")
    ax.set_xlabel("chunks")
    ax.set_ylabel("per second")
    ax.set_title("kbseek scaling: ingest rate")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "scaling-ingest.png")
    plt.close(fig)
    return [*made, "scaling-ingest.png"]


COMPONENT_QUANTITIES: dict[str, Getter] = {
    "BM25 index MiB": lambda r: r["bm25_mib"],
    "BM25 search top 50 p50 ms": lambda r: r["bm25_search"]["p50_ms"],
    "BM25 search top 50 p95 ms": lambda r: r["bm25_search"]["p95_ms"],
    "BM25 build s": lambda r: r["bm25_build_s"],
    "vector store MiB": lambda r: r["vector_store_mib"],
    "vector search top 50 p50 ms": lambda r: r["vector_search"]["p50_ms"],
    "vector search top 50 p95 ms": lambda r: r["vector_search"]["p95_ms"],
    "vector search, 2 of 8 categories, p50 ms": lambda r: r["vector_search_filtered"]["p50_ms"],
}


MILVUS_COMPONENT_QUANTITIES: dict[str, Getter] = {
    "fill vectors/s": lambda r: r["vectors_per_s"],
    "fill s": lambda r: r["fill_s"],
    "flush and index s": lambda r: r["flush_index_s"],
    "server RSS idle MiB": lambda r: r["server_idle_rss_mib"],
    "server RSS after fill MiB": lambda r: r["server_rss_after_fill_mib"],
    "server RSS after index MiB": lambda r: r["server_rss_after_index_mib"],
    "server RSS after searches MiB": lambda r: r["server_rss_after_search_mib"],
    "server disk MiB": lambda r: r["server_disk_mib"],
    "vector search top 50 p50 ms": lambda r: r["vector_search"]["p50_ms"],
    "vector search top 50 p95 ms": lambda r: r["vector_search"]["p95_ms"],
    "vector search, 2 of 8 categories, p50 ms": lambda r: r["vector_search_filtered"]["p50_ms"],
    "vector search, 2 of 8 categories, p95 ms": lambda r: r["vector_search_filtered"]["p95_ms"],
}


def milvus_components(rows: list[dict[str, Any]]) -> list[str]:
    """The vector store alone on a Milvus server (``scaling_components.py --milvus``): a table with fits."""
    sizes = [r["size"] for r in rows]
    loads = [float(str(r["load_after"]).split()[0]) for r in rows]
    comparable = max(loads) <= 2 * max(min(loads), 0.5)
    lines = ["| quantity | " + " | ".join(f"{s:,}" for s in sizes) + " | exponent b | growth | KB per vector (line) |"]
    lines.append("|---|" + "---:|" * len(sizes) + "---:|---|---:|")
    for name, get in MILVUS_COMPONENT_QUANTITIES.items():
        points = series(rows, get)
        model = fit(points)
        cells = " | ".join(_cell(v) for _, v in points)
        b, growth = (f"{model['b']:.2f}", model["growth"]) if model else ("–", "–")
        if model and is_timing(name) and not comparable:
            b, growth = f"({b})", "not comparable: measured under different loads or beside other work"
        per = f"{line(points)[0] * 1024:.2f}" if name.endswith("MiB") and len(points) > 1 else ""
        lines.append(f"| {name} | {cells} | {b} | {growth} | {per} |")
    lines.append(
        "| load average before / after (1 min) | "
        + " | ".join(f"{str(r['load_before']).split()[0]} / {str(r['load_after']).split()[0]}" for r in rows)
        + " | | | |"
    )
    return lines


def components(rows: list[dict[str, Any]], folder: Path) -> list[str]:
    """The component benchmark (``scaling_components.py``): a table with fits, and one chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["size"] for r in rows]
    lines = ["| quantity | " + " | ".join(f"{s:,}" for s in sizes) + " | exponent b | growth |"]
    lines.append("|---|" + "---:|" * len(sizes) + "---:|---|")
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    for name, get in COMPONENT_QUANTITIES.items():
        points = series(rows, get)
        model = fit(points)
        cells = " | ".join(_cell(v) for _, v in points)
        if model and is_timing(name):  # each size ran under another load (see docs/scaling.md)
            lines.append(f"| {name} | {cells} | ({model['b']:.2f}) | not comparable: measured under different loads |")
        else:
            lines.append(
                f"| {name} | {cells} | {model['b']:.2f} | {model['growth']} |" if model else f"| {name} | {cells} |"
            )
        if "p95" not in name and "build" not in name:
            shown = f" (b={model['b']:.2f})" if model and not is_timing(name) else ""
            ax.plot(*zip(*points), marker="o", label=name + shown)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks")
    ax.set_title("BM25 index and in-process vector store alone (timings: loads 6-15, not comparable)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(folder / "scaling-components.png")
    plt.close(fig)
    return lines


def report(results: Path, folder: Path) -> str:
    rows = json.loads(results.read_text())
    sizes = [r["size"] for r in rows]
    if 1_000_000 not in sizes:
        sizes.append(1_000_000)
    out = ["## Ingest", "", *ingest_table(rows), ""]
    for store in ("local", "milvus"):
        if any(store in r for r in rows):
            out += [f"## {store}", "", *table(rows, store, sizes), ""]
    parts = results.with_name("scaling-components.json")
    if parts.exists():
        out += ["## Components", "", *components(json.loads(parts.read_text()), folder), ""]
    served = results.with_name("scaling-components-milvus.json")
    if served.exists():
        out += ["## Vector store alone on a Milvus server", "", *milvus_components(json.loads(served.read_text())), ""]
    out += ["Charts: " + ", ".join(charts(rows, folder))]
    return "\n".join(out)
