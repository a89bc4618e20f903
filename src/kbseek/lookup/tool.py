"""``lookup_knowledge``: the one tool definition every interface (CLI, REST, MCP) calls.

A call runs in named steps: parse the request → recall (the policy's lanes, per query variant when rewriting)
→ the confidence gate and relevance levels (``answering.levelled``) → placement: a named section, the ``legacy``
decision matrix, or expansion (``answering.place``) → assembly: grouping, caps, budget, content forms
(``answering.assemble_answer``) → session dedup → the invocation record. The tool is built once per knowledge
base with its collaborators; where the candidates come from is one of them (:class:`Recall`), so an evaluation
can replay recorded lane candidates through the very same steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from kbseek.core.alertline import clean as clean_query
from kbseek.core.answer import Answer, Candidate
from kbseek.core.answerability import Model
from kbseek.core.keywords import KeywordHint
from kbseek.core.relevance import REFERENCE, Thresholds
from kbseek.core.results import Hit, RecallResult
from kbseek.core.rewrite import QueryRewriter
from kbseek.core.rewrite import Rewrite as RewriteResult
from kbseek.errors import InvalidRequest, KbseekError
from kbseek.lookup.answering import (
    allowed_documents,
    assemble_answer,
    fuse_variants,
    given,
    levelled,
    place,
    question_signals,
    recall_depth,
    unknown_names,
)
from kbseek.lookup.config import LookupConfig
from kbseek.lookup.offtopic import OffTopicFloor
from kbseek.lookup.records import failure_row, success_row
from kbseek.lookup.types import LookupRequest, LookupResponse
from kbseek.observability.logs import request_scope
from kbseek.observability.metrics import Telemetry
from kbseek.ports import InvocationRecorder, Reranker, SessionLedger
from kbseek.retrieval import recall as retrieval
from kbseek.retrieval.indexes import Indexes
from kbseek.settings import Settings

log = logging.getLogger("kbseek")


class Recall(Protocol):
    """Where the tool's ranked candidates come from: the live lanes over the indexes (:class:`IndexRecall`), or
    lanes recorded earlier (``kbseek.evaluation.replay``).

    ``embedder_id`` names the embedding model whose cosines the dense lane gives (``None``: no dense lane); the
    relevance thresholds calibrated for it gate the answer."""

    @property
    def embedder_id(self) -> str | None: ...

    def __call__(
        self,
        query: str,
        *,
        top_k: int,
        policy: str,
        category: str | None,
        only: frozenset[str] | None,
        config: LookupConfig,
    ) -> RecallResult: ...


@dataclass(frozen=True, slots=True)
class IndexRecall:
    """The live recall: L0, BM25 and the dense lane over the in-memory indexes (``retrieval.recall.lookup``),
    reordered by ``reranker`` when the knowledge base has one."""

    indexes: Indexes
    reranker: Reranker | None = None

    @property
    def embedder_id(self) -> str | None:
        dense = self.indexes.dense
        return dense.embedder.model_id if dense is not None else None

    def __call__(
        self,
        query: str,
        *,
        top_k: int,
        policy: str,
        category: str | None,
        only: frozenset[str] | None,
        config: LookupConfig,
    ) -> RecallResult:
        return retrieval.lookup(
            self.indexes,
            query,
            top_k=top_k,
            policy=policy,
            category=category,
            use_domain_filter=config.domain_filter,
            config=config.fusion,
            only=only,
            reranker=self.reranker,
        )


@dataclass(slots=True)
class _Recalled:
    """The recall step's outcome: the first variant's result (filter, versions, timings) and L0 hint, the hits
    fused over the variants, those hits levelled, and the notes of every variant."""

    base: RecallResult
    hint: KeywordHint
    hits: list[Hit]
    candidates: list[Candidate]
    rewrite: RewriteResult | None
    notes: list[str]


@dataclass(frozen=True)
class LookupTool:
    """``lookup_knowledge`` over one knowledge base's indexes, with its collaborators given once.

    ``sessions`` (dedup across a session's calls), ``invocations`` and ``telemetry`` (the record of each call)
    are optional: without ``sessions`` a ``session_id`` is refused, without the others nothing is recorded.
    ``rewriter`` gives the query rewriter for the current documents' keywords."""

    indexes: Indexes
    config: LookupConfig
    recall: Recall
    rewriter: Callable[[], QueryRewriter]
    sessions: SessionLedger | None = None
    invocations: InvocationRecorder | None = None
    telemetry: Telemetry | None = None
    off_topic: OffTopicFloor = field(default_factory=OffTopicFloor)  # kept by with_settings: one per knowledge base

    def with_settings(self, settings: Settings) -> LookupTool:
        """The same tool reading another configuration (e.g. one an evaluation tries); this one is unchanged."""
        return replace(self, config=LookupConfig.from_settings(settings))

    def thresholds(self, policy: str | None = None) -> Thresholds:
        """The relevance thresholds for the recall's embedding model, with the configured overrides; for a recall
        without cosines (``policy`` lexical, or no embedder) the lexical gate's cut stands on this knowledge base's
        off-topic floor (``lookup.offtopic``)."""
        t = self.config.thresholds_for(self.recall.embedder_id)
        lexical = t.lexical_answerability
        if lexical is None or not self.config.off_topic_floor or (policy != "lexical" and self.recall.embedder_id):
            return t
        floor = self.off_topic.floor(
            len(self.indexes.chunks), self.config.off_topic_floor, lambda q: self._lexical_probability(q, lexical)
        )
        return replace(t, lexical_answerability=replace(lexical, cut=floor)) if floor > lexical.cut else t

    def answerability(self, query: str) -> float | None:
        """The gate's probability that the knowledge base answers ``query``, read off a default hybrid recall as
        the gate reads it (``None`` without a fitted model): what ``kbseek eval calibrate`` places its cut on."""
        model = self.thresholds().answerability
        return None if model is None else self._probability(query, "hybrid", model)

    def _probability(self, query: str, policy: str, model: Model, recall: Recall | None = None) -> float:
        result = (recall or self.recall)(
            query.strip(), top_k=recall_depth(5), policy=policy, category=None, only=None, config=self.config
        )
        hint = result.hint if result.hint is not None else KeywordHint(result.query)
        found = question_signals(
            self.indexes, query, list(result.hits), hint, result.reference_similarity, result.candidates.get("dense")
        )
        return model.probability(found)

    def _lexical_probability(self, query: str, model: Model) -> float:
        # over the indexes themselves, whatever recall the tool was given: a replay of recorded lanes holds no
        # bank question, and a lexical recall of the same indexes gives the same floor live and replayed
        return self._probability(query, "lexical", model, IndexRecall(self.indexes))

    def __call__(self, request: LookupRequest | dict[str, Any]) -> LookupResponse:
        """Answer, and record the call (a failed one too); recording never fails the answer."""
        started = time.perf_counter()
        session_call: list[int] = []  # the call's number in its session, once counted (for a failure's record)
        with request_scope() as request_id:
            try:
                parsed = request if isinstance(request, LookupRequest) else LookupRequest.parse(request)
                log.info(
                    "lookup_knowledge received: query=%r policy=%s session=%s",
                    parsed.query[:200],
                    parsed.policy or self.config.policy,
                    parsed.session_id or "-",
                )
                response = self.answer(parsed, started=started, on_call=session_call.append)
            except Exception as exc:
                duration = (time.perf_counter() - started) * 1000
                if isinstance(exc, KbseekError):
                    log.info("lookup_knowledge refused: %s totalTime=%.1fms", exc, duration)
                else:
                    log.error(
                        "lookup_knowledge failed: %s: %s totalTime=%.1fms",
                        type(exc).__name__,
                        exc,
                        duration,
                        exc_info=True,
                    )
                self._record(failure_row(request, exc, duration, request_id, session_call[0] if session_call else None))
                raise
            duration = (time.perf_counter() - started) * 1000
            row = success_row(response, duration)
            self._log_done(response, duration)
            self._record(row)
            return response

    def answer(
        self, request: LookupRequest, *, started: float | None = None, on_call: Callable[[int], None] | None = None
    ) -> LookupResponse:
        """The steps of one call, without its record: recall → levels → placement → assembly → session dedup."""
        started = time.perf_counter() if started is None else started
        policy = request.policy or self.config.policy
        indexes = self.indexes
        with indexes.snapshot():
            only, notes = self._filters(request)
            call, seen = self._begin_session(request, on_call)
            thresholds = self.thresholds(policy)
            recalled = self._recall_and_level(request, policy, only, thresholds)
            t_recall = time.perf_counter()
            placement = place(indexes, request, policy, recalled.candidates, recalled.hint, only)
            answer = assemble_answer(indexes, request, placement, recalled.hits, seen, self.config)
            self._remember(request, call, answer)
            done = time.perf_counter()
            base = recalled.base
            dense = indexes.dense
            return LookupResponse(
                query=request.query.strip(),
                request_id=base.request_id,
                policy=policy,
                session_id=request.session_id,
                call=call,
                hint=recalled.hint,
                filter=base.filter,
                filters=dict(request.filters or {}),
                answer=answer,
                thresholds=thresholds,
                index_version=base.index_version,
                embedding_model=dense.model_id if dense is not None else None,
                timings_ms={
                    **base.timings_ms,
                    "levels_and_assembly": round((done - t_recall) * 1000, 3),
                    "total": round((done - started) * 1000, 3),
                },
                notes=tuple(notes + [n for n in recalled.notes if n not in notes]),
                rewrite=recalled.rewrite,
                legacy=placement.legacy,
                ranked=tuple(recalled.hits),
            )

    # -- the steps ------------------------------------------------------------------------

    def _filters(self, request: LookupRequest) -> tuple[frozenset[str] | None, list[str]]:
        """The documents the frontmatter filters allow (``None``: no filter), and a note when none does."""
        if not request.filters:
            return None, []
        only = allowed_documents(self.indexes, request.filters)
        return only, [] if only else [f"no document matches the filters {request.filters}"]

    def _begin_session(
        self, request: LookupRequest, on_call: Callable[[int], None] | None
    ) -> tuple[int | None, dict[str, int]]:
        """The call's number in its session (told to ``on_call`` at once) and what the session has been given
        (nothing without a session)."""
        if not request.session_id:
            return None, {}
        if self.sessions is None:
            raise InvalidRequest("session_id: this tool keeps no sessions")
        call = self.sessions.begin_call(request.session_id)
        if on_call is not None:
            on_call(call)
        return call, self.sessions.seen(request.session_id)

    def _recall_and_level(
        self, request: LookupRequest, policy: str, only: frozenset[str] | None, thresholds: Thresholds
    ) -> _Recalled:
        """The policy's recall of each query variant, fused and levelled. When rewriting added terms and the
        variants found nothing confident, the original query is recalled and levelled instead."""
        query = request.query.strip()
        mode = request.rewrite or self.config.query_rewrite
        rewrite = self.rewriter().rewrite(query) if mode != "off" else None
        variants = [query]
        if rewrite and rewrite.additions:
            variants = [rewrite.expanded] if mode == "expand" else list(rewrite.variants)
        recall_policy = "hybrid" if policy == "legacy" else policy  # legacy shapes the answer of a hybrid recall

        def recall(text: str) -> RecallResult:
            return self.recall(
                text,
                top_k=recall_depth(request.top_k),
                policy=recall_policy,
                category=request.category,
                only=only,
                config=self.config,
            )

        results = [recall(v) for v in variants]
        base = results[0]
        hint = base.hint if base.hint is not None else KeywordHint(base.query)  # a lookup's recall carries one
        hits = fuse_variants(results) if len(results) > 1 else list(base.hits)
        candidates = levelled(
            self.indexes, request.query, hits, hint, thresholds, base.reference_similarity, base.candidates.get("dense")
        )
        notes: list[str] = []
        if rewrite and rewrite.additions and not candidates:
            plain = recall(query)
            candidates = levelled(
                self.indexes,
                request.query,
                list(plain.hits),
                plain.hint or hint,
                thresholds,
                plain.reference_similarity,
                plain.candidates.get("dense"),
            )
            notes.append("the rewritten query found no confident match; answered from the original query")
        for result in results:
            notes += [n for n in result.notes if n not in notes]
        missing = unknown_names(self.indexes, clean_query(request.query))
        if missing:
            notes.append(f"no document of this knowledge base mentions {', '.join(missing)}")
        confident = [c for c in candidates if c.level != REFERENCE]
        log.info(
            "confidence: confident=%s hits=%d above_reference=%d thresholds=%s",
            bool(candidates),
            len(hits),
            len(confident),
            thresholds.source,
        )
        return _Recalled(base, hint, hits, candidates, rewrite, notes)

    def _remember(self, request: LookupRequest, call: int | None, answer: Answer) -> None:
        """Session dedup: what this answer gave becomes a pointer in the session's later answers."""
        if request.session_id and call is not None and self.sessions is not None:
            self.sessions.remember(request.session_id, call, request.query, given(self.indexes, answer, request.dedup))

    # -- the record ------------------------------------------------------------------------

    def _record(self, row: dict[str, Any]) -> None:
        if self.invocations is not None:
            self.invocations.record(row)
        if self.telemetry is not None:
            self.telemetry.observe_lookup(row, slow=row["duration_ms"] > self.config.slow_lookup_ms)

    def _log_done(self, response: LookupResponse, duration: float) -> None:
        answer = response.answer
        stages = " ".join(f"{k}={v:.1f}" for k, v in response.timings_ms.items() if k != "total")
        fields = {
            "total_ms": round(duration, 3),
            "timings_ms": response.timings_ms,
            "status": answer.status,
            "relevance_level": answer.level,
            "session_id": response.session_id,
        }
        log.info(
            "lookup_knowledge done: status=%s level=%s evidence=%s documents=%d deduped=%d chars=%d "
            "totalTime=%.1fms stages: %s",
            answer.status,
            answer.level,
            answer.evidence_status,
            len(answer.documents),
            len(answer.deduplicated),
            answer.chars,
            duration,
            stages,
            extra=fields,
        )
        if duration > self.config.slow_lookup_ms:
            log.warning(
                "slow lookup: totalTime=%.0fms > %.0fms query=%r stages: %s",
                duration,
                self.config.slow_lookup_ms,
                response.query[:200],
                stages,
                extra=fields,
            )
