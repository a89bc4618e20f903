"""The agent tools' one definition: schemas generated from the request models, checked against them."""

from __future__ import annotations

import json
import typing

import jsonschema
import pytest
from typer.testing import CliRunner

from kbseek.errors import InvalidRequest
from kbseek.interfaces.cli import app
from kbseek.lookup import LookupRequest
from kbseek.lookup.schema import (
    CATEGORIES,
    LOOKUP,
    REPORT,
    SECTION,
    TOOLS,
    input_schema,
    mcp_tool_definition,
    openai_tool_schema,
    parse_request,
    tool_descriptions,
)

runner = CliRunner()


def _schema_nodes(node, path=""):
    """Every schema object inside ``node`` (property names are data, not schema keywords)."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            if key in ("properties", "patternProperties"):
                for name, sub in value.items():
                    yield from _schema_nodes(sub, f"{path}/{key}/{name}")
            elif isinstance(value, (dict, list)) and key not in ("enum", "required", "default"):
                yield from _schema_nodes(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _schema_nodes(item, f"{path}/{i}")


@pytest.mark.parametrize("name", list(TOOLS))
def test_schemas_are_valid_self_contained_and_without_noise(name):
    schema = input_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    for where, node in _schema_nodes(schema):
        assert not {"$ref", "$defs", "title"} & node.keys(), where
        assert node.get("default", "absent") is not None, where
    assert "description" not in schema  # the tool description is what the model reads


def test_lookup_schema_mirrors_the_request_model():
    schema = input_schema(LOOKUP)
    fields = LookupRequest.model_fields
    assert list(schema["properties"]) == list(fields)
    assert schema["required"] == ["query"]
    for name, field in fields.items():
        prop = schema["properties"][name]
        assert prop["description"] == field.description
        literal = [a for a in typing.get_args(field.annotation) if typing.get_origin(a) is typing.Literal]
        if typing.get_origin(field.annotation) is typing.Literal:
            literal = [field.annotation]
        if literal:
            assert prop["enum"] == list(typing.get_args(literal[0]))
        if not field.is_required() and field.default is not None:
            assert prop["default"] == field.default
    top_k = schema["properties"]["top_k"]
    assert (top_k["type"], top_k["minimum"], top_k["maximum"]) == ("integer", 1, 50)
    assert schema["properties"]["budget_chars"]["minimum"] == 200


VALID = [
    {"query": "ERR_TIMEOUT 支付超时"},
    {
        "query": "HighCPUUsage firing on api-7",
        "session_id": "diag-42:run@1",
        "category": "ops",
        "filters": {"service": "payment", "tags": ["db", "cpu"]},
        "top_k": 50,
        "policy": "lexical",
        "expand": "neighbors",
        "section": "ops/high-cpu.md#mitigation",
        "dedup": "document",
        "budget_chars": 200,
        "rewrite": "multi",
    },
]
INVALID = [
    ({}, "query"),
    ({"query": ""}, "query"),
    ({"query": "x", "top_k": 0}, "top_k"),
    ({"query": "x", "top_k": 51}, "top_k"),
    ({"query": "x", "top_k": "5"}, "top_k"),
    ({"query": "x", "policy": "fast"}, "policy"),
    ({"query": "x", "bogus": 1}, "bogus"),
    ({"query": "x", "filters": {"service": 1}}, "filters"),
    ({"query": "x", "session_id": "a b"}, "session_id"),
    ({"query": "x", "budget_chars": 100}, "budget_chars"),
    ({"query": 42}, "query"),
]


@pytest.mark.parametrize("request_", VALID)
def test_what_the_schema_accepts_the_model_accepts(request_):
    jsonschema.validate(request_, input_schema(LOOKUP))
    LookupRequest.parse(request_)


@pytest.mark.parametrize(("request_", "field"), INVALID)
def test_what_the_schema_refuses_the_model_refuses_naming_the_field(request_, field):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(request_, input_schema(LOOKUP))
    with pytest.raises(InvalidRequest, match=field):
        LookupRequest.parse(request_)


def test_explicit_null_is_omission_to_the_model():
    # The schema offers one way to leave a parameter out (omit it); the model also takes null for it.
    LookupRequest.parse({"query": "x", "policy": None, "session_id": None})


def test_openai_schema_and_descriptions():
    tool = openai_tool_schema()
    assert tool["type"] == "function" and tool["function"]["name"] == "lookup_knowledge"
    assert tool["function"]["parameters"] == input_schema(LOOKUP)
    text = tool["function"]["description"]
    for needle in (
        "Chinese",
        "English",
        "error code",
        "alert name",
        "session_id",
        "PRECISE",
        "HIGHLY_RELEVANT",
        "REFERENCE",
        "no_confident_match",
        "DEDUPED",
    ):
        assert needle in text
    assert set(tool_descriptions) == {LOOKUP, SECTION, CATEGORIES, REPORT}
    for name in TOOLS:
        assert openai_tool_schema(name)["function"]["description"] == tool_descriptions[name]
        assert mcp_tool_definition(name)["description"] == tool_descriptions[name]
    with pytest.raises(InvalidRequest, match="unknown tool"):
        input_schema("drop_tables")


def test_other_tools_validate_strictly():
    assert input_schema(SECTION)["required"] == ["document", "section"]
    assert input_schema(CATEGORIES)["properties"] == {}
    assert parse_request(SECTION, {"document": " a.md ", "section": "x"}).document == "a.md"
    for arguments, field in (
        ({"document": "a.md"}, "section"),
        ({"document": "a.md", "section": "  "}, "section"),
        ({"document": 1, "section": "x"}, "document"),
    ):
        with pytest.raises(InvalidRequest, match=f"get_document_section request: {field}"):
            parse_request(SECTION, arguments)
    with pytest.raises(InvalidRequest, match="verbose: Extra inputs"):
        parse_request(CATEGORIES, {"verbose": True})


def test_tool_schema_cli_prints_the_definitions():
    result = runner.invoke(app, ["tool-schema"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == openai_tool_schema()
    jsonschema.Draft202012Validator.check_schema(printed["function"]["parameters"])
    for request_ in VALID:
        jsonschema.validate(request_, printed["function"]["parameters"])

    result = runner.invoke(app, ["tool-schema", "--format", "mcp"])
    assert json.loads(result.stdout)["inputSchema"] == printed["function"]["parameters"]

    result = runner.invoke(app, ["tool-schema", "--format", "mcp", "--all"])
    assert [t["name"] for t in json.loads(result.stdout)] == list(TOOLS)

    result = runner.invoke(app, ["tool-schema", "--format", "yaml"])
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "invalid_request"
