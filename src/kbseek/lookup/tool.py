"""``lookup_knowledge``: the one tool definition every interface (CLI, REST, MCP) calls.

It turns a ranked recall (``retrieval.lookup``) into an answer for an agent: relevance levels and
*no confident match* (``core.relevance``), grouping, caps, budget and content forms (``core.answer``),
sections and neighbour expansion, frontmatter filters, optional query rewriting, the ``legacy``
decision matrix of the original service (one strong L0 match answers with its compact summary), and session dedup.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kbseek.retrieval import recall as retrieval
from kbseek.core.analysis import clean_query
from kbseek.core.answer import (
    Answer, Candidate, DocumentEvidence, assemble, compact_summary, dedup_key, join_chunks, metadata_only,
)
from kbseek.core.fusion import rrf
from kbseek.core.keywords import STRONG_TIER, KeywordHint
from kbseek.core.relevance import HIGHLY_RELEVANT, PRECISE, REFERENCE, Thresholds, level
from kbseek.core.results import CategoryFilter, Hit
from kbseek.core.rewrite import Rewrite
from kbseek.errors import InvalidRequest, KbseekError, NotFoundError
from kbseek.core.models import DocumentCard
from kbseek.retrieval.indexes import Indexes
from kbseek.observability.logs import request_scope
from kbseek.lookup.records import failure_row, success_row
from kbseek.retrieval.sections import document_chunks, expanded, find_section, resolve_document
from kbseek.core.modes import Dedup, Expand, Policy, Rewrite

if TYPE_CHECKING:
    from kbseek.service import KnowledgeBase

log = logging.getLogger("kbseek")
TOOL_NAME = "lookup_knowledge"
MAX_FILTER_VALUES = 20




class LookupRequest(BaseModel):
    """The tool's parameters; strict, so a wrong type over an API is an error naming the field."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(min_length=1, max_length=retrieval.MAX_QUERY_CHARS,
                       description="The question, alert text, error code or identifier to look up.")
    session_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[\w.:@\-]+$",
                                   description="The agent's diagnosis session; enables dedup across calls.")
    category: str | None = Field(None, min_length=1, max_length=200, description="Only this category.")
    filters: dict[str, str | list[str]] | None = Field(
        None, description="Frontmatter fields that must match, e.g. {\"service\": \"payment\", \"tags\": [\"db\"]}.")
    top_k: int = Field(5, ge=1, le=50, description="At most this many evidence pieces.")
    policy: Policy | None = Field(
        None, description="Retrieval policy; default from the settings (hybrid).")
    expand: Expand = Field(
        "none", description="Give each hit's whole section, or its neighbouring chunks.")
    section: str | None = Field(None, min_length=1, max_length=600,
                                description="One section: 'path/to/doc.md#anchor' or '#heading path' within the "
                                            "best document for the query.")
    dedup: Dedup = Field("section", description="What a session remembers as given.")
    budget_chars: int | None = Field(None, ge=200, le=100_000, description="Total characters of evidence.")
    rewrite: Rewrite | None = Field(None, description="Rule-based query rewriting.")

    @classmethod
    def parse(cls, data: dict[str, Any]) -> "LookupRequest":
        try:
            request = cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
            raise InvalidRequest(f"invalid lookup_knowledge request: {problems}") from None
        if request.filters:
            for name, value in request.filters.items():
                values = value if isinstance(value, list) else [value]
                if not name or len(name) > 100 or len(values) > MAX_FILTER_VALUES or any(len(v) > 200 for v in values):
                    raise InvalidRequest(f"filters.{name[:100]}: a field name up to 100 characters and up to "
                                         f"{MAX_FILTER_VALUES} values of up to 200 characters")
        if not request.query.strip():
            raise InvalidRequest("query: is blank")
        return request


@dataclass(frozen=True, slots=True)
class LookupResponse:
    query: str
    request_id: str
    policy: str
    session_id: str | None
    call: int | None
    hint: KeywordHint
    filter: CategoryFilter
    filters: dict[str, Any]
    answer: Answer
    thresholds: Thresholds
    index_version: str
    embedding_model: str | None
    timings_ms: dict[str, float]
    notes: tuple[str, ...] = ()
    rewrite: Rewrite | None = None
    legacy: dict[str, Any] = field(default_factory=dict)  # the matrix row taken (policy legacy)
    ranked: tuple[Hit, ...] = ()  # the fused recall before levels, for explain views and traces


def document_info(doc: DocumentCard) -> DocumentCard:
    return doc


def allowed_documents(indexes: Indexes, filters: dict[str, str | list[str]]) -> frozenset[str]:
    """Documents whose frontmatter matches every filter: a field equal to one of the values, or for a
    list field, holding one of them; compared case-insensitively. Values are data, never an expression."""
    wanted = {name.casefold(): {str(v).casefold() for v in (value if isinstance(value, list) else [value])}
              for name, value in filters.items()}
    allowed = set()
    for doc in indexes.documents.values():
        fields = {str(k).casefold(): v for k, v in doc.fields.items()}
        fields.setdefault("category", doc.category)
        if all(_field_matches(fields.get(name), values) for name, values in wanted.items()):
            allowed.add(doc.id)
    return frozenset(allowed)


def _field_matches(value: Any, wanted: set[str]) -> bool:
    if value is None:
        return False
    values = value if isinstance(value, list) else [value]
    return any(str(v).casefold() in wanted for v in values)


def _l0_status(hint: KeywordHint) -> dict[str, str]:
    """Per document: ``unique`` (L0's one strong match), ``match`` (one of several), else absent.
    Only strong matches (a whole keyword or title in the query) count, as the original service's exact L0 match did."""
    strong = [m.document_id for m in hint.matches if m.exact and m.score >= STRONG_TIER]
    if len(strong) == 1:
        return {strong[0]: "unique"}
    return dict.fromkeys(strong, "match")


def levelled(indexes: Indexes, query: str, hits: list[Hit], hint: KeywordHint, t: Thresholds,
             reference: float | None) -> list[Candidate]:
    """Each hit with its relevance level, in fused order.

    The thresholds gate the *question*: when no hit passes, there is no confident match and nothing is
    returned. When one does, every hit is kept and hits below the thresholds come as ``REFERENCE``: related,
    not confirmed. The query is cleaned as the recall lanes saw it (``clean_query``: a pasted alert line's
    labels and values would otherwise dilute the coverage). The answer then reads them strongest level first,
    the fused rank within a level (``core.answer.reading_order``)."""
    tokens = indexes.analyzer.tokens(clean_query(query))  # as the recall lanes saw it
    coverage = indexes.bm25.coverage(tokens, [h.chunk.id for h in hits])
    l0 = _l0_status(hint)
    levels = []
    for hit in hits:
        dense = hit.lanes.get("dense")
        sim = dense.score if dense else None
        gap = sim - reference if sim is not None and reference is not None else 0.0
        levels.append(level(sim, gap, coverage[hit.chunk.id], l0.get(hit.chunk.document_id, "none"), t))
    if all(lvl is None for lvl in levels):
        return []
    return [Candidate((hit.chunk,), hit.score, hit.lanes, lvl or REFERENCE) for hit, lvl in zip(hits, levels)]


class LookupTool:
    """Binds ``lookup_knowledge`` to one knowledge base (its indexes, settings and session store)."""

    def __init__(self, kb: "KnowledgeBase") -> None:
        self.kb = kb

    def __call__(self, request: LookupRequest | dict[str, Any]) -> LookupResponse:
        """Answer, and record the call (a failed one too); recording never fails the answer."""
        started = time.perf_counter()
        progress: dict[str, Any] = {}
        with request_scope() as request_id:
            try:
                parsed = request if isinstance(request, LookupRequest) else LookupRequest.parse(request)
                log.info("lookup_knowledge received: query=%r policy=%s session=%s", parsed.query[:200],
                         parsed.policy or self.kb.settings.policy, parsed.session_id or "-")
                response = self._answer(parsed, started, progress)
            except Exception as exc:
                duration = (time.perf_counter() - started) * 1000
                if isinstance(exc, KbseekError):
                    log.info("lookup_knowledge refused: %s totalTime=%.1fms", exc, duration)
                else:
                    log.error("lookup_knowledge failed: %s: %s totalTime=%.1fms", type(exc).__name__, exc, duration,
                              exc_info=True)
                self._record(failure_row(request, exc, duration, request_id, progress.get("call")))
                raise
            duration = (time.perf_counter() - started) * 1000
            row = success_row(response, duration)
            self._log_done(response, duration)
            self._record(row)
            return response

    def _record(self, row: dict[str, Any]) -> None:
        kb = self.kb
        kb.invocations.record(row)
        kb.telemetry.observe_lookup(row, slow=row["duration_ms"] > kb.settings.slow_lookup_ms)

    def _log_done(self, response: LookupResponse, duration: float) -> None:
        answer = response.answer
        stages = " ".join(f"{k}={v:.1f}" for k, v in response.timings_ms.items() if k != "total")
        fields = {"total_ms": round(duration, 3), "timings_ms": response.timings_ms, "status": answer.status,
                  "relevance_level": answer.level, "session_id": response.session_id}
        log.info("lookup_knowledge done: status=%s level=%s evidence=%s documents=%d deduped=%d chars=%d "
                 "totalTime=%.1fms stages: %s", answer.status, answer.level, answer.evidence_status,
                 len(answer.documents), len(answer.deduplicated), answer.chars, duration, stages, extra=fields)
        if duration > self.kb.settings.slow_lookup_ms:
            log.warning("slow lookup: totalTime=%.0fms > %.0fms query=%r stages: %s", duration,
                        self.kb.settings.slow_lookup_ms, response.query[:200], stages, extra=fields)

    def _answer(self, request: LookupRequest, started: float, progress: dict[str, Any]) -> LookupResponse:
        kb, s = self.kb, self.kb.settings
        policy = request.policy or s.policy
        indexes = kb.indexes
        with indexes.snapshot():
            notes: list[str] = []
            only = allowed_documents(indexes, request.filters) if request.filters else None
            if only is not None and not only:
                notes.append(f"no document matches the filters {request.filters}")
            thresholds = kb.relevance_thresholds()
            budget = request.budget_chars or s.answer_budget_chars
            session_call, seen = None, {}
            if request.session_id:
                session_call = progress["call"] = kb.sessions.begin_call(request.session_id)
                seen = kb.sessions.seen(request.session_id)
            rewrite = None
            mode = request.rewrite or s.query_rewrite
            if mode != "off":
                rewrite = kb.rewriter().rewrite(request.query.strip())
            recall_policy = "hybrid" if policy == "legacy" else policy
            variants = [request.query.strip()]
            if rewrite and rewrite.additions:
                variants = [rewrite.expanded] if mode == "expand" else list(rewrite.variants)
            depth = max(request.top_k * 3, 15)
            results = [retrieval.lookup(indexes, v, top_k=depth, policy=recall_policy, category=request.category,
                                        use_domain_filter=s.domain_filter, config=kb.fusion_config(), only=only)
                       for v in variants]
            base = results[0]
            hits = _fuse_variants(results) if len(results) > 1 else list(base.hits)
            candidates = levelled(indexes, request.query, hits, base.hint, thresholds, base.reference_similarity)
            if rewrite and rewrite.additions and not candidates:
                plain = retrieval.lookup(indexes, request.query.strip(), top_k=depth, policy=recall_policy,
                                         category=request.category, use_domain_filter=s.domain_filter,
                                         config=kb.fusion_config(), only=only)
                candidates = levelled(indexes, request.query, list(plain.hits), plain.hint, thresholds,
                                      plain.reference_similarity)
                notes.append("the rewritten query found no confident match; answered from the original query")
            for result in results:
                notes += [n for n in result.notes if n not in notes]
            t_recall = time.perf_counter()
            confident = [c for c in candidates if c.level != REFERENCE]
            log.info("confidence: confident=%s hits=%d above_reference=%d thresholds=%s", bool(candidates), len(hits),
                     len(confident), thresholds.source)
            extra: list[DocumentEvidence] = []
            legacy: dict[str, Any] = {}
            if request.section:
                candidates, extra = self._section(indexes, request.section, candidates), []
            elif policy == "legacy":
                candidates, extra, legacy = self._legacy(indexes, _within(base.hint, request.category, only),
                                                         candidates)
            else:
                candidates = expanded(indexes, candidates[: request.top_k], request.expand)
                extra = _unplaced_l0_matches(indexes, _within(base.hint, request.category, only), candidates, only)
            if not candidates and not request.section and hits:
                closest = tuple({"document_id": h.chunk.document_id, "source_path": h.chunk.source_path,
                                 "title": h.document_title, "breadcrumb": h.chunk.breadcrumb, "anchor": h.chunk.anchor,
                                 "similarity": round(h.lanes["dense"].score, 4) if "dense" in h.lanes else None}
                                for h in hits[:3])
            else:
                closest = ()
            placed = candidates[: request.top_k] if not request.section else candidates
            answer = assemble(placed, {c.document_id: document_info(indexes.documents[c.document_id]) for c in placed},
                              seen={} if request.section else seen, dedup_mode=request.dedup, budget_chars=budget,
                              per_document=s.answer_per_document if not request.section else len(candidates) or 1,
                              url_template=s.source_url_template or None, extra=extra)
            if closest and answer.status == "no_confident_match":
                answer = replace(answer, closest=closest)
            if request.session_id and session_call is not None:
                given = [(dedup_key(indexes.chunks[p.chunk_ids[0]], request.dedup), e.document.id,
                          None if request.dedup == "document" else p.anchor)
                         for e in answer.documents for p in e.pieces]
                given += [(e.document.id, e.document.id, None) for e in answer.documents if e.form == "compact_summary"]
                kb.sessions.remember(request.session_id, session_call, request.query, given)
            done = time.perf_counter()
            timings = {**base.timings_ms, "levels_and_assembly": round((done - t_recall) * 1000, 3),
                       "total": round((done - started) * 1000, 3)}
            dense = indexes.dense
            return LookupResponse(
                request.query.strip(), base.request_id, policy, request.session_id, session_call, base.hint, base.filter,
                dict(request.filters or {}), answer, thresholds, base.index_version,
                dense.model_id if dense is not None else None, timings, tuple(notes), rewrite, legacy, tuple(hits),
            )

    def _section(self, indexes: Indexes, section: str, candidates: list[Candidate]) -> list[Candidate]:
        path, _, name = section.partition("#")
        if path:
            doc = resolve_document(indexes, path)
        elif candidates:
            doc = indexes.documents[candidates[0].document_id]
        else:
            raise NotFoundError(f"section {section!r}: no document named and none matches the query",
                                hint="name it as 'path/to/doc.md#anchor'")
        chunks = find_section(indexes, doc.id, name) if name else document_chunks(indexes, doc.id)
        if not chunks:
            anchors = ", ".join(s["anchor"] for s in doc.outline[:15])
            raise NotFoundError(f"document {doc.path!r} has no section {name!r}", hint=f"its sections: {anchors}")
        return [Candidate(tuple(chunks), 1.0, {}, PRECISE)]

    def _legacy(self, indexes: Indexes, hint: KeywordHint, candidates: list[Candidate]
                ) -> tuple[list[Candidate], list[DocumentEvidence], dict[str, Any]]:
        """The original service's decision matrix: a document's whole compact summary is given when L0 has one
        strong match (high confidence) or recall found nothing; otherwise the recalled pieces, with strong L0
        matches named as metadata."""
        strong = [m for m in hint.matches if m.exact and m.score >= STRONG_TIER and m.document_id in indexes.documents]
        semantic = [c for c in candidates if "dense" in c.lanes or "bm25" in c.lanes]
        if len(strong) == 1:
            doc = indexes.documents[strong[0].document_id]
            summary = DocumentEvidence(document_info(doc), "compact_summary", PRECISE,
                                       content=compact_summary(document_info(doc), self._body(indexes, doc.id)))
            return [], [summary], {"row": "unique_l0_match", "matchType": "exact_L0", "confidence": "high",
                                   "l1": "skipped"}
        if strong:
            doc = indexes.documents[strong[0].document_id]
            info = document_info(doc)
            if semantic:
                entry = DocumentEvidence(info, "metadata_only", HIGHLY_RELEVANT, content=metadata_only(info))
                return semantic, [entry], {"row": "several_l0_matches_with_l1", "matchType": "exact_L0",
                                           "confidence": "low", "l1": "used",
                                           "primary": {"source_path": info.path, "content": entry.content}}
            entry = DocumentEvidence(info, "compact_summary", REFERENCE,
                                     content=compact_summary(info, self._body(indexes, doc.id)))
            return [], [entry], {"row": "several_l0_matches_without_l1", "matchType": "exact_L0",
                                 "confidence": "low", "l1": "empty"}
        return semantic, [], {"row": "no_l0_match", "matchType": "semantic_L1",
                              "confidence": "medium" if semantic else "none", "l1": "used"}

    @staticmethod
    def _body(indexes: Indexes, document_id: str) -> str:
        chunks = document_chunks(indexes, document_id)
        return join_chunks(tuple(chunks)) if chunks else ""


def _within(hint: KeywordHint, category: str | None, only: frozenset[str] | None) -> KeywordHint:
    """The hint's matches that the request's category and filters allow (pointers obey them like evidence)."""
    if category is None and only is None:
        return hint
    return replace(hint, matches=tuple(m for m in hint.matches if (category is None or m.category == category)
                                       and (only is None or m.document_id in only)))


def _unplaced_l0_matches(indexes: Indexes, hint: KeywordHint, candidates: list[Candidate],
                         only: frozenset[str] | None) -> list[DocumentEvidence]:
    """Strong L0 matches with no piece in the answer: named metadata-only (title, summary, keywords, source), at most two."""
    placed = {c.document_id for c in candidates}
    out = []
    for m in hint.matches:
        if (m.exact and m.score >= STRONG_TIER and m.document_id not in placed and m.document_id in indexes.documents
                and (only is None or m.document_id in only)):
            info = document_info(indexes.documents[m.document_id])
            out.append(DocumentEvidence(info, "metadata_only", REFERENCE, content=metadata_only(info)))
    return out[:2]


def _fuse_variants(results: list[Any]) -> list[Hit]:
    """Rankings of several query variants fused by RRF (k = 60); each chunk keeps its best lane scores."""
    lanes = {f"q{i}": [h.chunk.id for h in r.hits] for i, r in enumerate(results)}
    by_id: dict[str, Hit] = {}
    for result in results:
        for hit in result.hits:
            by_id.setdefault(hit.chunk.id, hit)
    fused = rrf(lanes, k=60)
    return [Hit(rank, f.score, by_id[f.chunk_id].chunk, by_id[f.chunk_id].document_title, by_id[f.chunk_id].lanes)
            for rank, f in enumerate(fused, 1)]
