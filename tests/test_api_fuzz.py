"""Every REST route, fuzzed from its own OpenAPI schema: no input may end in a 5xx or a body that is not the API's.

Each operation's path, query and JSON body parameters are drawn from their schema and from just outside it
(integers of any size and sign, strings of any length and script, spans like ``99999999d``, NaN, wrong types,
lists too long, unknown fields); multipart routes get files with hostile names and contents. The property: the
answer is below 500, and an error is the JSON ``{"error": {"code", "message", ...}}``. (Found this way: ``since``
overflowing a date, ``k: [0]`` on an evaluation run.) Walking the schema means a new route is fuzzed too.

``KBSEEK_FUZZ_EXAMPLES`` (default 150) sets the number of requests; ``KBSEEK_FUZZ_SEED`` explores others (the
default is derandomized, so the suite is deterministic). The long run, by hand: ``KBSEEK_FUZZ_EXAMPLES=5000``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from support import EXAMPLES

from kbseek.interfaces.http.app import create_app
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

EXAMPLES_COUNT = int(os.environ.get("KBSEEK_FUZZ_EXAMPLES", "150"))
SEED = os.environ.get("KBSEEK_FUZZ_SEED")
WRITES = ("post", "put", "delete", "patch")

HOSTILE_STRINGS = [
    "",
    " ",
    "..",
    "../../etc/passwd",
    "%2e%2e%2f",
    "a" * 5000,
    "99999999d",
    "9" * 400 + "w",
    "-1d",
    "0d",
    "2026-13-45",
    "0001-01-01",
    "9999-12-31T23:59:59+14:00",
    "NaN",
    "null",
    "\x00",
    "api/payment-errors.md",
    "支付/超时.md",
    "#",
    "?x=1",
    "\ufffd",
    "ERR_TIMEOUT 支付超时",
]
EDGE_NUMBERS = [0, -1, 1, 2**63, -(2**63), 10**30, 1e308, -0.5, float("nan"), float("inf")]
hostile_text = st.one_of(st.text(max_size=40), st.sampled_from(HOSTILE_STRINGS))
any_number = st.one_of(
    st.integers(),
    st.integers(min_value=-2, max_value=2),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([2**63, -(2**63), 10**30]),
)
any_json = st.recursive(
    st.none() | st.booleans() | any_number | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=12,
)


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def near(spec: dict[str, Any], schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of ``schema``, and values just outside it (any value at all, one time in five)."""
    schema = _resolve(spec, schema)
    if depth > 4:
        return any_json
    if "anyOf" in schema or "oneOf" in schema:
        inner = st.one_of([near(spec, s, depth + 1) for s in schema.get("anyOf", schema.get("oneOf"))])
    elif "enum" in schema:
        inner = st.sampled_from(schema["enum"])
    elif "const" in schema:
        inner = st.just(schema["const"])
    else:
        kind = schema.get("type")
        if kind == "integer":
            low, high = schema.get("minimum"), schema.get("maximum")
            edges = [v + d for v in (low, high) if v is not None for d in (-1, 0, 1)]
            inner = st.one_of(st.integers(), st.sampled_from(edges or [0, -1]))
        elif kind == "number":
            inner = any_number
        elif kind == "boolean":
            inner = st.booleans() | st.sampled_from(["maybe", "1", "yes"])
        elif kind == "string":
            inner = hostile_text
        elif kind == "array":
            items = near(spec, schema.get("items", {}), depth + 1)
            inner = st.lists(items, max_size=(schema.get("maxLength") or schema.get("maxItems") or 6) + 2)
        elif kind == "object" or "properties" in schema:
            props = {name: near(spec, sub, depth + 1) for name, sub in schema.get("properties", {}).items()}
            inner = st.fixed_dictionaries({}, optional=props) | st.fixed_dictionaries(
                {}, optional={**props, "unknown_field": any_json}
            )
        elif kind == "null":
            inner = st.none()
        else:
            inner = any_json
    return st.one_of(inner, inner, inner, inner, any_json)


def edges(spec: dict[str, Any], schema: dict[str, Any], depth: int = 0) -> list[Any]:
    """The values at and just past the edges of ``schema`` (and some of other types), for a sweep."""
    schema = _resolve(spec, schema)
    if depth > 2:
        return [None]
    if "anyOf" in schema or "oneOf" in schema:
        return [v for sub in schema.get("anyOf", schema.get("oneOf")) for v in edges(spec, sub, depth + 1)]
    if "enum" in schema:
        return [*schema["enum"], "bogus", 0]
    kind = schema.get("type")
    if kind in ("integer", "number"):
        bounds = [schema.get(k) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")]
        return EDGE_NUMBERS + [b + d for b in bounds if b is not None for d in (-1, 0, 1)] + ["x"]
    if kind == "boolean":
        return [True, False, "maybe"]
    if kind == "string":
        return HOSTILE_STRINGS + [0, ["list"]]
    if kind == "array":
        items = edges(spec, schema.get("items", {}), depth + 1)
        return [[], [items[0]] * 200, "not a list", *([v] for v in items)]
    if kind == "object" or "properties" in schema:
        return [{}, [], "x", {"unknown_field": 1}]
    return [None, 0, "", [], {}]


def _query_value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def sweep(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One request per operation, parameter and edge value of that parameter (the others left out): every
    query parameter, every top-level field of a JSON body, every path parameter."""
    for path, item in spec["paths"].items():
        for method, op in item.items():
            base = path
            for p in op.get("parameters", []):
                if p["in"] == "path":
                    base = base.replace("{" + p["name"] + "}", "api/payment-errors.md" if p["name"] == "path" else "x")
            content = op.get("requestBody", {}).get("content", {})
            json_body = "application/json" in content
            default = {"content": b"{}", "headers": {"Content-Type": "application/json"}} if json_body else {}
            for p in op.get("parameters", []):
                for value in edges(spec, p.get("schema", {})):
                    if p["in"] == "path":
                        text_value = quote(_query_value(value) or "x", safe="/" if p["name"] == "path" else "")
                        yield {
                            "method": method.upper(),
                            "url": path.replace("{" + p["name"] + "}", text_value),
                            **default,
                        }
                    elif p["in"] == "query":
                        yield {
                            "method": method.upper(),
                            "url": base,
                            "params": {p["name"]: _query_value(value)},
                            **default,
                        }
            if json_body:
                schema = _resolve(spec, content["application/json"]["schema"])
                for name, sub in schema.get("properties", {}).items():
                    for value in edges(spec, sub):
                        yield {
                            "method": method.upper(),
                            "url": base,
                            "content": json.dumps({name: value}).encode(),
                            "headers": {"Content-Type": "application/json"},
                        }


def requests(spec: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """One request to one operation of ``spec``: method, URL, query and body."""
    operations = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            params = {p["name"]: (p["in"], near(spec, p.get("schema", {}))) for p in op.get("parameters", [])}
            content = op.get("requestBody", {}).get("content", {})
            body = (
                ("json", near(spec, content["application/json"]["schema"]))
                if "application/json" in content
                else ("multipart", _multipart())
                if "multipart/form-data" in content
                else ("none", st.none())
            )
            operations.append((method.upper(), path, params, body))

    @st.composite
    def one(draw: st.DrawFn) -> dict[str, Any]:
        method, path, params, (kind, body) = draw(st.sampled_from(operations))
        url, query = path, {}
        for name, (where, values) in params.items():
            if where == "path":
                value = draw(hostile_text | st.just("api/payment-errors.md")) or "x"
                url = url.replace("{" + name + "}", quote(value, safe="/" if name == "path" else ""))
            elif draw(st.booleans()):
                query[name] = _query_value(draw(values))
        request: dict[str, Any] = {"method": method, "url": url, "params": query}
        if kind == "json":
            request["content"] = json.dumps(draw(body), ensure_ascii=draw(st.booleans())).encode()
            request["headers"] = {"Content-Type": "application/json"}
        elif kind == "multipart":
            files, form = draw(body)
            request["files"], request["data"] = files, form
        return request

    return one()


def _multipart() -> st.SearchStrategy[tuple[list, dict]]:
    names = hostile_text | st.sampled_from(["a.md", "b.markdown", "x.exe", ".md", "a/b.md"])
    contents = st.binary(max_size=300) | st.sampled_from([b"# title\n\ntext", b"---\ntitle: [x\n---\n", b"\x00" * 9])
    fields = st.sampled_from(["files", "file", "other"])
    files = st.lists(st.tuples(fields, st.tuples(names, contents)), min_size=0, max_size=4)
    form = st.fixed_dictionaries({}, optional={"category": hostile_text})
    return st.tuples(files, form)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[TestClient]:
    """The example knowledge base with five golden cases (so that evaluation runs run, and quickly)."""
    root = tmp_path_factory.mktemp("api-fuzz")
    cases = json.loads((EXAMPLES / "eval" / "golden-cases.json").read_text("utf-8"))
    cases["cases"] = cases["cases"][:5]
    cases["knowledge_base"] = os.path.relpath(root / "home" / "knowledge_base", root)
    (root / "cases.json").write_text(json.dumps(cases, ensure_ascii=False), "utf-8")
    settings = Settings(home=root / "home", golden_cases_file=root / "cases.json", reports_dir=root / "reports")
    with KnowledgeBase.open(settings) as kb:
        kb.ingest([EXAMPLES / "knowledge_base"])
        with TestClient(create_app(kb=kb, mcp=False), raise_server_exceptions=False) as client:
            yield client


def answered_well(request: dict[str, Any], response: Any) -> None:
    assert response.status_code < 500, (request, response.status_code, response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["code"], str) and error["message"], (request, response.text[:500])


def test_every_parameter_at_its_edges(served):
    """The deterministic part: each parameter alone at each of its edge values."""
    spec = served.get("/openapi.json").json()
    requests_sent, failures = 0, []
    for request in sweep(spec):
        try:
            answered_well(request, served.request(**request))
        except AssertionError as failure:  # all of them, not the first only
            failures.append(str(failure)[:300])
        requests_sent += 1
    assert not failures, "\n".join(failures)
    assert requests_sent > 500


def test_no_route_answers_5xx_to_anything_its_schema_allows_or_nearly(served):
    """The random part: several parameters at once, bodies and files drawn from the schema and around it."""
    spec = served.get("/openapi.json").json()
    seen: dict[str, int] = {}

    @settings(
        max_examples=EXAMPLES_COUNT,
        deadline=None,
        derandomize=SEED is None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(requests(spec))
    def check(request: dict[str, Any]) -> None:
        response = served.request(**request)
        seen[request["method"] + " " + request["url"].split("/")[2 if request["url"].startswith("/api") else 1]] = 1
        answered_well(request, response)

    (seed(int(SEED))(check) if SEED else check)()
    assert len(seen) >= 8  # the draw reached most routes
