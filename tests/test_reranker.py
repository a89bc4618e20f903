"""The optional reranker endpoint: both request shapes, reordering, and failing open (errors, timeouts, bad
replies) to the fused ranking, against a local stub server (no cross-encoder server can run here)."""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support import EXAMPLES, reply_json

from kbseek.adapters.reranker import HttpReranker, _scores
from kbseek.errors import ConfigError, RerankError
from kbseek.service import KnowledgeBase
from kbseek.settings import Settings

KEY = "rerank-sekret"


class StubReranker(BaseHTTPRequestHandler):
    """Scores a passage 1 when it holds the server's ``prefer`` text, else 0; ``mode`` breaks it on purpose."""

    def do_POST(self):
        state = self.server.state
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        state["requests"].append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        mode = state["mode"]
        if mode == "hang":
            state["release"].wait(30)  # answers only after the test let go: always past the client's timeout
        if mode == "error":
            self.send_response(500)
            self.end_headers()
            return
        passages = body.get("texts", body.get("documents", []))
        scores = [(i, 1.0 if state["prefer"] in p else 0.0) for i, p in enumerate(passages)]
        if mode == "bad":
            reply = [{"index": len(passages) + 3, "score": 1.0}]
        elif "documents" in body:
            reply = {"results": [{"index": i, "relevance_score": s} for i, s in sorted(scores, key=lambda x: -x[1])]}
        else:
            reply = [{"index": i, "score": s} for i, s in reversed(scores)]
        reply_json(self, reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubReranker)
    server.daemon_threads = True
    server.state = {"requests": [], "mode": "ok", "prefer": "", "release": threading.Event()}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.state["release"].set()
    server.shutdown()
    server.server_close()


def url_of(server, path="/rerank") -> str:
    return f"http://127.0.0.1:{server.server_port}{path}"


def open_kb(tmp_path, name: str, **settings) -> KnowledgeBase:
    kb = KnowledgeBase.open(Settings(home=tmp_path / name, embedder="none", **settings))
    kb.ingest([EXAMPLES / "knowledge_base"])
    return kb


QUERY = "ERR_TIMEOUT 支付超时怎么处理"


def test_the_reranker_orders_the_fused_hits_and_the_answer_follows(tmp_path, stub, caplog):
    plain = open_kb(tmp_path, "plain")
    fused = plain.lookup(QUERY, top_k=5).hits
    assert len(fused) == 5
    # the stub prefers a section the fused ranking puts last among the first five
    stub.state["prefer"] = fused[4].chunk.text[:40]
    kb = open_kb(tmp_path, "reranked", reranker_url=url_of(stub), reranker_api_key=KEY, reranker_depth=10)
    with caplog.at_level(logging.DEBUG, logger="kbseek"):
        result = kb.lookup(QUERY, top_k=5)
        answer = kb.lookup_knowledge({"query": QUERY})
    assert result.hits[0].chunk.id == fused[4].chunk.id
    assert [h.rank for h in result.hits] == [1, 2, 3, 4, 5]
    assert result.hits[0].lanes["rerank"].score == 1.0 and result.hits[0].lanes["rerank"].rank == 1
    assert "bm25" in result.hits[0].lanes  # the lanes' own view is kept beside the reranker's
    # ties keep the fused order: the rest of the first five follow as fusion ranked them
    assert [h.chunk.id for h in result.hits[1:]] == [h.chunk.id for h in fused[:4]]
    assert any("reranked by" in n for n in result.notes) and "rerank" in result.timings_ms
    assert answer.ranked[0].chunk.id == fused[4].chunk.id
    request = stub.state["requests"][0]
    assert request["path"] == "/rerank" and request["auth"] == f"Bearer {KEY}"
    assert request["body"]["query"] == QUERY and len(request["body"]["texts"]) == 10  # depth, not top_k
    assert fused[4].chunk.breadcrumb in request["body"]["texts"][4]  # the section it answers is read too
    assert KEY not in caplog.text and all(KEY not in n for n in result.notes)
    assert kb.settings.describe()["reranker_api_key"] == "***"
    plain.close()
    kb.close()


def test_the_cohere_shape_sends_model_documents_and_top_n(tmp_path, stub):
    stub.state["prefer"] = "ERR_DUPLICATE_ORDER"
    kb = open_kb(tmp_path, "kb", reranker_url=url_of(stub, "/v1/rerank"), reranker_api="cohere", reranker_model="m")
    hits = kb.lookup(QUERY, top_k=3).hits
    body = stub.state["requests"][0]["body"]
    assert body["model"] == "m" and body["top_n"] == len(body["documents"]) == 20
    assert "ERR_DUPLICATE_ORDER" in hits[0].chunk.text
    kb.close()


@pytest.mark.parametrize("mode", ["error", "bad", "hang"])
def test_a_failing_endpoint_fails_open_to_the_fused_ranking_and_rests(tmp_path, stub, mode):
    plain = open_kb(tmp_path, "plain")
    fused = [h.chunk.id for h in plain.lookup(QUERY, top_k=5).hits]
    stub.state["mode"] = mode
    kb = open_kb(
        tmp_path, "kb", reranker_url=url_of(stub), reranker_timeout_s=0.5, reranker_retry_s=3600, reranker_depth=5
    )
    first = kb.lookup(QUERY, top_k=5)
    answer = kb.lookup_knowledge({"query": QUERY})
    assert [h.chunk.id for h in first.hits] == fused
    assert all("rerank" not in h.lanes for h in first.hits)
    note = next(n for n in first.notes if n.startswith("reranker unavailable"))
    assert {"error": "HTTP 500", "bad": "names passage 8", "hang": "timed out"}[mode] in note
    assert [h.chunk.id for h in answer.ranked[:5]] == fused and any("reranker unavailable" in n for n in answer.notes)
    assert len(stub.state["requests"]) == 1  # the second lookup did not call the resting endpoint
    (record,) = kb.invocations.list(limit=5)
    assert "reranker_unavailable" in record["retrieval_details"]["fallback_kinds"]
    assert b'kbseek_lookup_fallbacks_total{kind="reranker_unavailable"} 1.0' in kb.telemetry.exposition()
    plain.close()
    kb.close()


def closed_port() -> int:
    with socket.socket() as probe:  # a port just released: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_endpoint_is_asked_again_after_its_rest():
    now = [0.0]
    url = f"http://127.0.0.1:{closed_port()}/rerank"
    reranker = HttpReranker(url=url, timeout=0.5, retry_s=30, clock=lambda: now[0])
    with pytest.raises(RerankError, match="failed"):
        reranker.rerank("q", ["a", "b"])
    now[0] = 29.0
    with pytest.raises(RerankError, match="rests 1 s more"):
        reranker.rerank("q", ["a", "b"])
    now[0] = 31.0
    with pytest.raises(RerankError, match="failed"):  # asked again (and failed again) after the rest
        reranker.rerank("q", ["a", "b"])


def test_replies_are_checked_passage_by_passage():
    assert _scores([{"index": 1, "score": 0.5}, {"index": 0, "score": 0.9}], 2) == [0.9, 0.5]
    assert _scores({"results": [{"index": 1, "relevance_score": 2}]}, 3) == [1.0, 2.0, 1.0]  # left out: lowest
    for reply, message in (
        ({"data": []}, "neither a list"),
        ([{"index": True, "score": 1}], "names passage True"),
        ([{"index": 0, "score": float("nan")}], "not a finite number"),
        ([{"index": 0, "score": "high"}], "not a finite number"),
        ([], "scores no passage"),
    ):
        with pytest.raises(RerankError, match=message):
            _scores(reply, 2)


def test_settings_name_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="reranker_api 'jina' is not one of tei, cohere"):
        Settings(home=tmp_path, reranker_api="jina")
    with pytest.raises(ConfigError, match="not an http"):
        HttpReranker(url="file:///etc/passwd")
    with pytest.raises(ConfigError, match="needs reranker_model"):
        HttpReranker(url="http://127.0.0.1:9/v1/rerank", api="cohere")
    shown = Settings(home=tmp_path, reranker_url="http://user:pw@127.0.0.1:9/rerank").describe()
    assert shown["reranker_url"] == "http://user:***@127.0.0.1:9/rerank"
    assert HttpReranker(url="http://user:pw@127.0.0.1:9/rerank").name == "http://user:***@127.0.0.1:9/rerank"


def test_an_evaluation_compares_configurations_with_and_without_the_reranker(tmp_path, stub):
    from kbseek.evaluation.cases import load_cases
    from kbseek.evaluation.runner import evaluate

    dataset = load_cases(EXAMPLES / "eval" / "golden-cases.json", split="dev")
    result = evaluate(
        dataset,
        policies=["hybrid"],
        configs=[("plain", {}), ("reranked", {"reranker_url": url_of(stub)})],
        cache_root=tmp_path / "cache",
        base=Settings(home=tmp_path / "base", embedder="none"),
    )
    plain, reranked = result["runs"]
    assert (plain["name"], reranked["name"]) == ("hybrid/plain", "hybrid/reranked")
    asked = dataset.queries + dataset.unanswerable
    assert len(stub.state["requests"]) == len(asked)  # every question of the second run, none of the first
    assert "ERR_TIMEOUT 怎么排查" in {r["body"]["query"] for r in stub.state["requests"]}
