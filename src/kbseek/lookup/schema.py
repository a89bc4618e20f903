"""The agent tools' one typed definition: names, descriptions and JSON Schemas.

The MCP server, ``kbseek tool-schema`` (OpenAI function calling) and the REST API's tool listing all read
them from here. Each schema is generated from the pydantic model that validates the tool's arguments
(``kbseek.lookup.types.LookupRequest`` for ``lookup_knowledge``), so what a model is told and what every interface
accepts cannot drift apart.

>>> openai_tool_schema()["function"]["parameters"]["required"]
['query']
>>> sorted(tool_descriptions)
['get_document_section', 'list_categories', 'lookup_knowledge', 'report_evidence']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from kbseek.errors import InvalidRequest
from kbseek.lookup.feedback import REPORT_DESCRIPTION, FeedbackRequest
from kbseek.lookup.types import TOOL_NAME, LookupRequest

LOOKUP = TOOL_NAME
SECTION = "get_document_section"
CATEGORIES = "list_categories"
REPORT = "report_evidence"

LOOKUP_DESCRIPTION = (
    "Search the team's operations knowledge base (runbooks, troubleshooting guides, alert handbooks, error-code "
    "references) for evidence during a diagnosis. Ask in Chinese or English, or both mixed, with the symptom, "
    "error code (ERR_TIMEOUT, ORA-00600), alert name (HighCPUUsage), service or component; identifiers are "
    "matched whole, so paste them exactly.\n"
    "The answer groups evidence by document; each piece names its source path, heading breadcrumb and lines, "
    "and carries a relevance level: PRECISE (the document is the one the query names and the text answers it), "
    "HIGHLY_RELEVANT (strong evidence), REFERENCE (related, not confirmed: check before acting on it). When "
    "nothing passes the confidence thresholds the status is no_confident_match and no evidence is given (the "
    "closest documents are named, but they are not evidence): say the knowledge base has no answer rather than "
    "guess.\n"
    "Pass the same session_id on every call of one diagnosis: evidence this session already received comes back "
    "as short DEDUPED pointers instead of being repeated, each with the level this question gave it (judged). "
    "To read a whole section an answer points to, use "
    "get_document_section (or the section parameter). Narrow with category or frontmatter filters (see "
    "list_categories)."
)
SECTION_DESCRIPTION = (
    "Read one section of a knowledge-base document in full, e.g. a procedure that a lookup_knowledge answer "
    "showed only in part or listed under its available sections. Name the document by its path as answers give "
    "it (or its file name when that is unique) and the section by its anchor or heading path. An unknown "
    "document or section is an error that lists what exists."
)
CATEGORIES_DESCRIPTION = (
    "List the knowledge base's categories with how many documents each holds; use one as lookup_knowledge's "
    "category to search only there."
)

_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class SectionRequest(BaseModel):
    """``get_document_section``'s arguments; strict like ``LookupRequest``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    document: Annotated[
        _Text,
        Field(
            max_length=500,
            description=(
                "The document's path as answers give it, e.g. 'payment/gateway-errors.md' (or its id, or its file name "
                "when unique)."
            ),
        ),
    ]
    section: Annotated[
        _Text,
        Field(
            max_length=600,
            description=(
                "The section's anchor as listed in an answer's available sections, e.g. 'err_timeout', or its heading "
                "path, e.g. 'Troubleshooting / Timeouts'."
            ),
        ),
    ]


class CategoriesRequest(BaseModel):
    """``list_categories`` takes no arguments (and refuses unknown ones)."""

    model_config = ConfigDict(extra="forbid", strict=True)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One agent tool: what a model is told (name, title, description) and the model validating its arguments."""

    name: str
    title: str
    description: str
    request: type[BaseModel]
    idempotent: bool  # lookup_knowledge is not: a session's repeated question gets DEDUPED pointers
    read_only: bool = True  # report_evidence records a report: not read-only, though it changes no answer


TOOLS: Mapping[str, ToolSpec] = MappingProxyType(
    {
        LOOKUP: ToolSpec(LOOKUP, "Look up the knowledge base", LOOKUP_DESCRIPTION, LookupRequest, idempotent=False),
        SECTION: ToolSpec(SECTION, "Read a document section", SECTION_DESCRIPTION, SectionRequest, idempotent=True),
        CATEGORIES: ToolSpec(CATEGORIES, "List categories", CATEGORIES_DESCRIPTION, CategoriesRequest, idempotent=True),
        REPORT: ToolSpec(
            REPORT, "Report on evidence", REPORT_DESCRIPTION, FeedbackRequest, idempotent=False, read_only=False
        ),
    }
)
tool_descriptions: Mapping[str, str] = MappingProxyType({name: spec.description for name, spec in TOOLS.items()})


def _spec(name: str) -> ToolSpec:
    try:
        return TOOLS[name]
    except KeyError:
        raise InvalidRequest(f"unknown tool {name!r}", hint=f"one of {', '.join(TOOLS)}") from None


def input_schema(name: str = LOOKUP) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments: self-contained (no ``$ref``), without pydantic's titles.

    >>> input_schema()["properties"]["top_k"]
    {'type': 'integer', 'description': 'At most this many evidence pieces.', 'default': 5, 'maximum': 50, 'minimum': 1}
    """
    raw = _spec(name).request.model_json_schema()
    schema = _tidy(raw, raw.get("$defs", {}), ())
    schema.pop("description", None)  # the model's docstring is for developers; the tool description is the model's
    schema.setdefault("properties", {})
    return schema


def openai_tool_schema(name: str = LOOKUP) -> dict[str, Any]:
    """The OpenAI function-calling (and compatible) tool definition."""
    spec = _spec(name)
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": input_schema(name)},
    }


def mcp_tool_definition(name: str = LOOKUP) -> dict[str, Any]:
    """The tool as an MCP ``tools/list`` entry (camelCase wire names), as the MCP server lists it."""
    spec = _spec(name)
    return {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "inputSchema": input_schema(name),
        "annotations": tool_annotations(name),
    }


def tool_annotations(name: str) -> dict[str, bool]:
    """MCP tool hints: the lookup tools only read the knowledge base (lookups record a trace, which changes nothing
    an agent could observe besides session dedup), ``report_evidence`` records a report; none reaches outside it."""
    return {
        "readOnlyHint": _spec(name).read_only,
        "destructiveHint": False,
        "idempotentHint": _spec(name).idempotent,
        "openWorldHint": False,
    }


def parse_request(name: str, arguments: dict[str, Any]) -> BaseModel:
    """Validate a tool's arguments; a problem raises ``InvalidRequest`` naming the field, as ``LookupRequest``."""
    spec = _spec(name)
    if spec.request is LookupRequest:
        return LookupRequest.parse(arguments)
    if spec.request is FeedbackRequest:
        return FeedbackRequest.parse(arguments)
    try:
        return spec.request.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
        raise InvalidRequest(f"invalid {name} request: {problems}") from None


# Keys whose value maps names to schemas, and keys whose value is one schema or a list of them.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SCHEMA_VALUES = ("items", "additionalProperties", "propertyNames", "contains", "not", "if", "then", "else")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def _tidy(node: Any, defs: dict[str, Any], resolving: tuple[str, ...]) -> Any:
    """One schema node made model-friendly.

    * ``$ref`` into ``$defs`` is inlined (function-calling APIs want one self-contained object);
    * ``title`` is dropped: pydantic derives it from the field name, so it repeats the key;
    * an optional field's ``anyOf [X, null]`` with ``default: null`` becomes plain ``X``, left out of
      ``required``: to the request models null and absent are the same, and one way to omit a value is
      what models get right most often. The schema is thus a little stricter than the model, never looser.
    """
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        name = ref.removeprefix("#/$defs/")
        if name in resolving or name not in defs:
            raise ValueError(f"tool schema: cannot inline {ref!r} (recursive or unknown)")
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return _tidy({**defs[name], **siblings}, defs, (*resolving, name))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs") or (key == "default" and value is None):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _tidy(sub, defs, resolving) for name, sub in value.items()}
        elif key in _SCHEMA_VALUES and isinstance(value, dict):
            out[key] = _tidy(value, defs, resolving)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_tidy(sub, defs, resolving) for sub in value]
        else:
            out[key] = value
    branches = out.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        rest = [b for b in branches if b != {"type": "null"}]
        if len(rest) == 1:
            del out["anyOf"]
            out = {**rest[0], **out}
        else:
            out["anyOf"] = rest
    first = [k for k in _FIRST if k in out]  # what a person reads first in `kbseek tool-schema`
    return {k: out[k] for k in first + [k for k in out if k not in _FIRST]}


_FIRST = ("type", "description", "properties", "required")
