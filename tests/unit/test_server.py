"""The HTTP API with the fake LLM: every route, errors, auth, limits, streaming order, cancellation."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.testing.fake_llm import FakeLLM

QUESTION = "Where was Marie Curie born?"


def client_for(index_dir, llm=None, **app_opts) -> tuple[TestClient, Engine]:
    engine = Engine({"demo": index_dir}, llm or FakeLLM(default="Warsaw"), method="naive_rag",
                    workers=app_opts.pop("workers", 2), max_queue=app_opts.pop("max_queue", 16))
    return TestClient(create_app(engine, **app_opts)), engine


def sse_events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.split("\n\n"):
        kind = re.search(r"^event: (.+)$", block, re.M)
        data = re.search(r"^data: (.+)$", block, re.M)
        if kind and data:
            out.append((kind.group(1), json.loads(data.group(1))))
    return out


def test_health_methods_and_indexes(index_dir):
    client, _ = client_for(index_dir)
    assert client.get("/healthz").json()["status"] == "ok"
    methods = client.get("/v1/methods").json()
    assert methods["default"] == "naive_rag"
    by_name = {m["name"]: m["settings"] for m in methods["methods"]}
    assert {"dualrag", "cooprag", "ircot", "naive_rag"} <= set(by_name) and by_name["naive_rag"]["k"] == 5
    assert by_name["dualrag"]["max_iter"] == 5
    assert client.get("/v1/indexes").json()["indexes"] == [{"name": "demo", "kind": "bm25", "documents": 5, "encoder": None}]
    assert "/v1/ask/stream" in client.get("/openapi.json").json()["paths"]


def test_retrieve_returns_hits_with_passages(index_dir):
    client, _ = client_for(index_dir)
    hits = client.post("/v1/retrieve", json={"query": QUESTION, "k": 2}).json()["hits"]
    assert len(hits) == 2 and hits[0]["title"] == "Marie Curie" and "Warsaw" in hits[0]["text"] and hits[0]["rank"] == 1


def test_retrieve_opens_a_retriever_once_per_index_and_kind(index_dir, monkeypatch):
    import tandem.server.engine as engine_module

    opened = []
    real_open = engine_module.open_retriever
    monkeypatch.setattr(engine_module, "open_retriever", lambda idx, kind=None: opened.append(kind) or real_open(idx, kind))
    client, _ = client_for(index_dir)
    first = [client.post("/v1/retrieve", json={"query": q, "k": 2}).json()["hits"] for q in (QUESTION, "Vistula")]
    assert first[0][0]["title"] == "Marie Curie" and first[0] != first[1]
    client.post("/v1/retrieve", json={"query": QUESTION, "k": 1, "retriever": "bm25"})
    assert opened == [None, "bm25"]  # one per (index, kind), not one a request


def test_ask_returns_answer_cited_passages_trace_and_cost(index_dir):
    llm = FakeLLM(default="Warsaw")
    client, _ = client_for(index_dir, llm)
    body = client.post("/v1/ask", json={"question": QUESTION, "settings": {"k": 2}}).json()
    assert body["answer"] == "Warsaw" and body["method"] == "naive_rag"
    assert [s["name"] for s in body["trace"]["steps"]] == ["retrieve", "answer"]
    assert body["trace"]["steps"][0]["hits"][0]["title"] == "Marie Curie"
    assert [d["title"] for d in body["cited"]][0] == "Marie Curie" and len(body["cited"]) == 2
    assert body["cost"]["llm_calls"] == 1 and body["cost"]["prompt_tokens"] > 0
    assert "Marie Curie was born in Warsaw" in llm.calls[0].last_user


def test_stream_sends_each_step_before_the_answer(index_dir):
    client, _ = client_for(index_dir)
    with client.stream("POST", "/v1/ask/stream", json={"question": QUESTION, "method": "ircot",
                                                        "settings": {"max_steps": 2}}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = sse_events(resp.read().decode())
    kinds = [k for k, _ in events]
    assert kinds[-1] == "answer" and kinds[:-1] == ["step"] * (len(kinds) - 1) and len(kinds) >= 3
    assert [d["index"] for k, d in events if k == "step"] == list(range(len(kinds) - 1))  # each step once, in order
    assert events[-1][1]["answer"] and len(events[-1][1]["trace"]["steps"]) == len(kinds) - 1


def test_chat_completions_plain_and_streamed(index_dir):
    client, _ = client_for(index_dir)
    body = {"model": "naive_rag", "messages": [{"role": "system", "content": "be brief"},
                                               {"role": "user", "content": QUESTION}]}
    reply = client.post("/v1/chat/completions", json=body).json()
    assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["content"] == "Warsaw"
    assert reply["tandem"]["trace"]["steps"][0]["queries"] == [QUESTION] and reply["usage"]["total_tokens"] > 0
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as resp:
        lines = [x[6:] for x in resp.read().decode().split("\n\n") if x.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(x) for x in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert [c["tandem_step"]["name"] for c in chunks if "tandem_step" in c] == ["retrieve", "answer"]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Warsaw"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["tandem"]["answer"] == "Warsaw"


def test_openai_client_library_talks_to_it(index_dir):
    openai = pytest.importorskip("openai")
    client, _ = client_for(index_dir)
    oa = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=client)
    reply = oa.chat.completions.create(model="naive_rag", messages=[{"role": "user", "content": QUESTION}])
    assert reply.choices[0].message.content == "Warsaw"
    assert [s["name"] for s in reply.model_extra["tandem"]["trace"]["steps"]] == ["retrieve", "answer"]
    chunks = list(oa.chat.completions.create(model="naive_rag", messages=[{"role": "user", "content": QUESTION}],
                                             stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Warsaw"


def test_api_key_is_required_on_every_api_route(index_dir):
    client, _ = client_for(index_dir, api_key="s3cret-key-123")
    for method, path in [("get", "/v1/methods"), ("get", "/v1/indexes"), ("post", "/v1/ask"), ("post", "/v1/retrieve"),
                         ("post", "/v1/ask/stream"), ("post", "/v1/chat/completions")]:
        assert getattr(client, method)(path).status_code == 401, path
        assert getattr(client, method)(path, headers={"Authorization": "Bearer wrong"}).status_code == 401, path
    ok = client.post("/v1/ask", json={"question": QUESTION}, headers={"Authorization": "Bearer s3cret-key-123"})
    assert ok.status_code == 200 and ok.json()["answer"] == "Warsaw"
    assert client.get("/healthz").status_code == 200


def test_size_and_length_limits(index_dir):
    client, _ = client_for(index_dir, max_body=2000, max_question=50)
    big = client.post("/v1/ask", content=json.dumps({"question": "x" * 5000}), headers={"Content-Type": "application/json"})
    assert big.status_code == 413 and "over the limit of 2000" in big.json()["error"]["message"]
    long = client.post("/v1/ask", json={"question": "why " * 20})
    assert long.status_code == 422 and "question: String should have at most 50 characters" in long.json()["error"]["message"]
    assert client.post("/v1/ask", json={"question": ""}).status_code == 422


def test_bad_method_index_and_settings_name_the_valid_ones(index_dir):
    client, _ = client_for(index_dir)
    r = client.post("/v1/ask", json={"question": QUESTION, "method": "nope"})
    assert r.status_code == 422 and "dualrag" in r.json()["error"]["message"]
    r = client.post("/v1/ask", json={"question": QUESTION, "index": "other"})
    assert r.status_code == 404 and "['demo']" in r.json()["error"]["message"]
    r = client.post("/v1/ask", json={"question": QUESTION, "settings": {"max_iter": 3}})
    assert r.status_code == 422 and "unknown setting 'max_iter' for naive_rag; settings a request may set: ['candidates', 'choice_orders', 'doc_order', 'k'" in r.json()["error"]["message"]


def test_a_full_queue_answers_429_with_retry_after_and_searches_still_answer(index_dir):
    gate = threading.Event()
    llm = FakeLLM(default=lambda req: gate.wait(10) and "Warsaw")
    client, _ = client_for(index_dir, llm, workers=1, max_queue=1)
    first = threading.Thread(target=lambda: client.post("/v1/ask", json={"question": QUESTION}))
    first.start()
    deadline = time.time() + 10
    while not llm.calls and time.time() < deadline:
        time.sleep(0.01)
    busy = client.post("/v1/ask", json={"question": QUESTION})
    assert busy.status_code == 429 and busy.headers["Retry-After"] and "queue is full" in busy.json()["error"]["message"]
    search = client.post("/v1/retrieve", json={"query": QUESTION, "k": 1})  # searches have workers of their own
    assert search.status_code == 200 and search.json()["hits"][0]["title"] == "Marie Curie"
    gate.set()
    first.join(10)
    assert client.post("/v1/ask", json={"question": QUESTION}).status_code == 200


def test_the_default_methods_instructions_are_computed_ahead_where_the_llm_keeps_them(index_dir):
    from tandem.methods.dualrag import prompts as P
    from tandem.types import current_observer

    keeps = FakeLLM(default="x")
    keeps.caches_prefixes = True  # as the embedded engine's prefix cache
    engine = Engine({"demo": index_dir}, keeps, method="naive_rag")
    engine.start_warm_up("dualrag").join(60)
    engine.close()
    heads = (P.REASONER_HEAD, P.ENTITY_HEAD, P.SUMMARIZER_HEAD, P.ANSWER_HEAD["short"])
    assert sorted(next(i for i, h in enumerate(heads) if c.last_user.startswith(h)) for c in keeps.calls) == [0, 1, 2, 3]
    assert all(c.max_tokens == 1 for c in keeps.calls)
    plain = FakeLLM(default="x")  # no prefix cache (a hosted API, say): nothing is sent
    engine = Engine({"demo": index_dir}, plain, method="dualrag")
    engine.start_warm_up().join(60)
    engine.close()
    assert plain.calls == []

    def until_cancelled(req):  # as the engine does: a cancelled question's call leaves the batch
        for _ in range(1000):
            observer = current_observer()
            if observer is not None:
                observer.check()
            time.sleep(0.01)
        return "x"

    stuck = FakeLLM(default=until_cancelled)
    stuck.caches_prefixes = True
    engine = Engine({"demo": index_dir}, stuck, method="dualrag")
    thread = engine.start_warm_up()
    deadline = time.time() + 10
    while not stuck.calls and time.time() < deadline:
        time.sleep(0.01)
    engine.close()  # the warm-up is cancelled with the questions when the server stops
    thread.join(5)
    assert stuck.calls and not thread.is_alive() and not engine._running


def test_the_page_is_served_offline(index_dir):
    client, _ = client_for(index_dir)
    page = client.get("/").text
    assert "<title>tandem" in page and 'src="app.js"' in page
    script = client.get("/app.js").text
    assert "v1/ask/stream" in script
    assert not re.search(r"(src|href)=\"https?://", page) and "https://" not in script  # no CDN


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_client_going_away_cancels_the_work(index_dir):
    import uvicorn

    def slow(req):
        time.sleep(0.3)
        return "Thought: I need more.\nQuery: Marie Curie birthplace"

    llm = FakeLLM(default=slow)
    engine = Engine({"demo": index_dir}, llm, method="ircot")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 20
        while not server.started and time.time() < deadline:
            time.sleep(0.05)
        hung_up = False
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/ask/stream",
                          json={"question": QUESTION, "settings": {"max_steps": 30}}, timeout=30) as resp:
            for line in resp.iter_lines():
                if line.startswith("event: step"):
                    hung_up = True
                    break  # the first step arrived: hang up
        assert hung_up, "the stream ended before its first step: nothing was cancelled"
        calls_at_close = len(llm.calls)
        assert calls_at_close < 30  # the client left while the method was still running
        time.sleep(1.5)
        assert len(llm.calls) <= calls_at_close + 2  # stopped at its next step or LLM call, not 30 iterations on
    finally:
        server.should_exit = True
        thread.join(10)


def test_requests_cannot_name_models_llms_or_files_and_numbers_are_bounded(index_dir):
    client, _ = client_for(index_dir)
    for settings in ({"role_llms": {"answer": "openai:m@http://attacker/v1"}}, {"reranker_model": "/etc/passwd"}):
        r = client.post("/v1/ask", json={"question": QUESTION, "method": "dualrag", "settings": settings})
        assert r.status_code == 422 and "set it when starting the server" in r.json()["error"]["message"]
    for k, says in ((100000, "Input should be less than or equal to 200"), (True, "a number, not true or false")):
        r = client.post("/v1/ask", json={"question": QUESTION, "settings": {"k": k}})
        assert r.status_code == 422 and "settings.k: " in (m := r.json()["error"]["message"]) and says in m, m
    r = client.post("/v1/ask/stream", json={"question": QUESTION, "settings": {"nope": 1}})
    assert r.status_code == 422  # bad settings on a stream: an error status, not a 200 stream


def test_a_chunked_body_over_the_limit_gets_413(index_dir):
    client, _ = client_for(index_dir, max_body=1000)

    def chunks():
        for _ in range(10):
            yield b'{"question": "' + b"x" * 500

    r = client.post("/v1/ask", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413


def test_cors_preflight_passes_without_the_key_and_calls_still_need_it(index_dir):
    client, _ = client_for(index_dir, api_key="s3cret-key-123", cors=["http://app.example"])
    pre = client.options("/v1/ask", headers={"Origin": "http://app.example", "Access-Control-Request-Method": "POST",
                                             "Access-Control-Request-Headers": "authorization,content-type"})
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "http://app.example"
    assert client.post("/v1/ask", json={"question": QUESTION}, headers={"Origin": "http://app.example"}).status_code == 401
    client_no_cors, _ = client_for(index_dir)
    assert "access-control-allow-origin" not in client_no_cors.get("/v1/methods", headers={"Origin": "http://x"}).headers


def test_a_closed_engine_cancels_a_question_that_starts_after_it(index_dir):
    from tandem.errors import Cancelled

    llm = FakeLLM(default="Warsaw")
    engine = Engine({"demo": index_dir}, llm, method="naive_rag")
    engine.close()  # e.g. a worker that picked the question up as the server stopped
    with pytest.raises(Cancelled):
        engine.ask(QUESTION)
    assert not llm.calls


@pytest.mark.parametrize(("path", "content_type", "ending"), [
    ("/v1/ask", None, None),
    ("/v1/ask/stream", b"text/event-stream", b"event: error\ndata: {\"status\": 503"),
    ("/v1/chat/completions", b"text/event-stream", b"data: {\"error\": {\"status\": 503"),
])
def test_a_request_cut_off_by_the_servers_stop_ends_with_503_in_its_own_format(path, content_type, ending):
    import asyncio

    from tandem.server.middleware import StopReply

    sent: list[dict] = []

    async def app(scope, receive, send):
        if content_type is not None:
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
        await asyncio.sleep(3600)  # a question being answered

    async def send(message):
        sent.append(message)

    async def main():
        task = asyncio.create_task(StopReply(app)({"type": "http", "path": path}, None, send))
        await asyncio.sleep(0.01)
        task.cancel()  # what uvicorn does at the end of the grace period
        await task

    asyncio.run(main())
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert sent[-1]["type"] == "http.response.body" and not sent[-1].get("more_body")
    if content_type is None:
        assert sent[0]["status"] == 503 and b"the server stopped before this request was answered" in body
    else:
        assert body.startswith(ending), body
