"""What ``lookup_knowledge`` reads of the settings, taken once: the query-time configuration.

A knowledge base builds one from its settings when it opens; an evaluation builds others to try configurations
on the same indexes without touching the knowledge base (``LookupTool.with_settings``).

>>> config = LookupConfig.from_settings(Settings(fusion="rrf", similarity_high=0.9, similarity_low=0.8))
>>> config.fusion.method, config.thresholds_for(None).similarity_high, config.thresholds_for(None).source
('rrf', 0.9, 'configured')
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbseek.core.relevance import FIELDS as THRESHOLD_FIELDS
from kbseek.core.relevance import Thresholds, thresholds_for
from kbseek.core.rewrite import load_synonyms
from kbseek.core.staleness import parse_period
from kbseek.retrieval.recall import FusionConfig
from kbseek.settings import Settings


def fusion_config(settings: Settings) -> FusionConfig:
    """How the recall lanes are fused, from the settings."""
    return FusionConfig(
        rrf_k=settings.rrf_k,
        lane_depth=settings.lane_depth,
        method=settings.fusion,
        learned_ranker=settings.learned_ranker,
        context_share=settings.context_share,
        lexicon_weight=settings.lexicon_weight,
        cross_language_terms=settings.cross_language_terms,
        # read once per configuration: a broken file is a clear error when the knowledge base opens
        lexicon_groups=tuple(load_synonyms(settings.synonyms_file)) if settings.synonyms_file else (),
        weights={
            "bm25": settings.weight_bm25,
            "dense": settings.weight_dense,
            "l0": settings.weight_l0,
            "headings": settings.weight_headings,
            "dense_clauses": settings.weight_dense_clauses,
            "terms": settings.weight_terms,
            "section": settings.weight_section,
            "clauses": settings.weight_clauses,
        },
    )


@dataclass(frozen=True, slots=True)
class LookupConfig:
    """The settings a lookup reads at query time (the index-shaping ones, BM25's included, belong to the indexes)."""

    policy: str = "hybrid"  # when the request names none
    fusion: FusionConfig = field(default_factory=FusionConfig)
    domain_filter: bool = False
    budget_chars: int = 6000  # when the request names none
    per_document: int = 3
    source_url_template: str | None = None
    query_rewrite: str = "off"  # when the request names none
    slow_lookup_ms: float = 1000.0
    threshold_overrides: dict[str, float] = field(default_factory=dict)  # over the embedder's calibration
    answerability_model: bool = True  # the embedder's fitted question-level gate, where it has one
    answerability_cut: float | None = None  # this knowledge base's calibrated cut for it (None: the model's own)
    off_topic_floor: float = 0.0  # the lexical gate refuses at least this share of the off-topic bank (0: off)
    review_every_default: int | None = 365  # days before a document with no review_every is stale; None: never

    @classmethod
    def from_settings(cls, settings: Settings) -> LookupConfig:
        return cls(
            policy=settings.policy,
            fusion=fusion_config(settings),
            domain_filter=settings.domain_filter,
            budget_chars=settings.answer_budget_chars,
            per_document=settings.answer_per_document,
            source_url_template=settings.source_url_template or None,
            query_rewrite=settings.query_rewrite,
            slow_lookup_ms=settings.slow_lookup_ms,
            answerability_model=settings.answerability_model,
            answerability_cut=settings.answerability_cut,
            off_topic_floor=settings.off_topic_floor,
            review_every_default=parse_period(settings.review_every_default),
            threshold_overrides={
                name: getattr(settings, name) for name in THRESHOLD_FIELDS if getattr(settings, name) is not None
            },
        )

    def thresholds_for(self, model_id: str | None) -> Thresholds:
        """The relevance thresholds for cosines of ``model_id`` (``None``: no dense lane), with the overrides."""
        return thresholds_for(
            model_id, self.threshold_overrides, answerability=self.answerability_model, cut=self.answerability_cut
        )
