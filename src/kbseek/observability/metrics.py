"""Prometheus metrics, fed by the same rows that are recorded (tool invocations, the write audit).

Because the live counters and the recorded rows come from one source, ``kbseek metrics`` can rebuild the
metrics of any period from the database (:func:`from_records`) and they agree with what a server exposed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
INGEST_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Telemetry:
    """One registry per knowledge base, so several in one process (tests, evaluations) stay apart.

    >>> t = Telemetry()
    >>> t.observe_lookup({"policy": "hybrid", "relevance_level": "PRECISE", "success": True, "duration_ms": 12.0,
    ...                   "timings": {"l0": 0.4, "total": 12.0}, "retrieval_details": {"fallback_kinds": [],
    ...                   "evidence": [{"lanes": ["bm25", "dense"]}], "deduplicated": []}}, slow=False)
    >>> b'kbseek_lookups_total{level="PRECISE",policy="hybrid",success="true"} 1.0' in t.exposition()
    True
    """

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.stage_seconds = Histogram(
            "kbseek_lookup_stage_seconds",
            "Time per lookup stage (total = whole call)",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.lookups = Counter(
            "kbseek_lookups",
            "lookup_knowledge calls by policy, strongest level and outcome",
            ["policy", "level", "success"],
            registry=r,
        )
        self.slow = Counter("kbseek_slow_lookups", "Lookups over the slow_lookup_ms threshold", registry=r)
        self.lane_contributions = Counter(
            "kbseek_lane_contributions", "Evidence pieces in answers that each lane had ranked", ["lane"], registry=r
        )
        self.fallbacks = Counter("kbseek_lookup_fallbacks", "Fallbacks taken while answering", ["kind"], registry=r)
        self.dedup_hits = Counter("kbseek_dedup_hits", "Evidence withheld as already given in the session", registry=r)
        self.record_failures = Counter(
            "kbseek_invocation_record_failures", "tool_invocation rows that could not be written", registry=r
        )
        self.ingest_files = Counter(
            "kbseek_ingest_files", "Documents written or refused, by outcome", ["action"], registry=r
        )
        self.ingest_seconds = Histogram(
            "kbseek_ingest_parse_seconds",
            "Parse and chunk time per stored document",
            buckets=INGEST_BUCKETS,
            registry=r,
        )
        self.documents = Gauge("kbseek_documents", "Documents in the knowledge base", registry=r)
        self.chunks = Gauge("kbseek_chunks", "Chunks in the knowledge base", registry=r)
        self.feedback = Counter(
            "kbseek_evidence_feedback", "Readers' reports on evidence, by verdict", ["verdict"], registry=r
        )
        self.stale_documents = Gauge(
            "kbseek_stale_documents", "Documents past their review date (see 'kbseek docs stale')", registry=r
        )

    def observe_lookup(self, row: dict[str, Any], *, slow: bool) -> None:
        """Count one recorded ``tool_invocation`` row (see :mod:`kbseek.lookup.records`)."""
        self.lookups.labels(row["policy"] or "-", row["relevance_level"], str(bool(row["success"])).lower()).inc()
        for stage, ms in (row.get("timings") or {}).items():
            self.stage_seconds.labels(stage).observe(ms / 1000)
        if not row.get("timings"):
            self.stage_seconds.labels("total").observe(row["duration_ms"] / 1000)
        if slow:
            self.slow.inc()
        details = row.get("retrieval_details") or {}
        for kind in details.get("fallback_kinds", ()):
            self.fallbacks.labels(kind).inc()
        for entry in details.get("evidence", ()):
            for lane in entry.get("lanes", ()):
                self.lane_contributions.labels(lane).inc()
        if details.get("deduplicated"):
            self.dedup_hits.inc(len(details["deduplicated"]))

    def observe_write(self, action: str, duration_ms: float | None = None) -> None:
        self.ingest_files.labels(action).inc()
        if duration_ms is not None:
            self.ingest_seconds.observe(duration_ms / 1000)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def from_records(
    invocations: Iterable[dict[str, Any]],
    audit: Iterable[dict[str, Any]],
    *,
    slow_lookup_ms: float,
    documents: int,
    chunks: int,
) -> Telemetry:
    """The metrics of recorded rows, e.g. the last day's, as a running server would have counted them."""
    telemetry = Telemetry()
    for row in invocations:
        telemetry.observe_lookup(row, slow=row["duration_ms"] > slow_lookup_ms)
    for entry in audit:
        telemetry.observe_write(entry["action"], entry.get("duration_ms"))
    telemetry.documents.set(documents)
    telemetry.chunks.set(chunks)
    return telemetry
