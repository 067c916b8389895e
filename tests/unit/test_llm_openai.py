"""OpenAI-compatible backend against the fake server: retries, errors, concurrency bound, request body."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tandem.errors import ConfigError, LLMError
from tandem.llm import LLMRequest, OpenAILLM
from tandem.testing import FakeOpenAIServer, Fault

REQ = LLMRequest.from_prompt("What is the capital of France?", max_tokens=16)


def client(srv: FakeOpenAIServer, **kw: object) -> OpenAILLM:
    opts: dict = {"backoff_base": 0.005, "backoff_max": 0.05, "timeout": 2.0, "max_retries": 3}
    opts.update(kw)
    return OpenAILLM("fake-model", srv.base_url, **opts)


def test_plain_answer_with_usage() -> None:
    with FakeOpenAIServer(answer="Paris") as srv:
        resp = client(srv).complete(REQ)
    assert resp.text == "Paris"
    assert resp.finish_reason == "stop"
    assert resp.prompt_tokens == 6 and resp.completion_tokens == 1
    assert resp.model == "fake-model" and not resp.cached
    assert resp.latency_s > 0
    assert srv.count == 1


def test_a_servers_cached_prompt_tokens_are_the_replys_reused_tokens() -> None:
    """vLLM and OpenAI say how many prompt tokens came from their prefix cache (usage.prompt_tokens_details)."""
    with FakeOpenAIServer(answer="Paris") as srv:
        llm = client(srv)
        first = llm.complete(REQ)
        longer = llm.complete(LLMRequest.from_prompt("What is the capital of France? And of Spain?", max_tokens=16))
    assert first.reused_tokens == 0 and longer.reused_tokens == 6  # the six words the first prompt began with


def test_first_tokens_ask_for_top_logprobs_and_a_server_without_them_is_an_error() -> None:
    verdict = LLMRequest.from_prompt("Is Paris the capital of France?", max_tokens=16, first_tokens=3)
    with FakeOpenAIServer(answer="Yes, it is") as srv:
        llm = client(srv)
        resp = llm.complete(verdict)
        assert srv.requests[-1]["top_logprobs"] == 3 and srv.requests[-1]["logprobs"] is True
        assert srv.requests[-1]["max_tokens"] == 1 and llm.tells_first_tokens
    assert resp.first_tokens == (("Yes,", -0.105), ("alt0", -3.0), ("alt1", -4.0))
    with FakeOpenAIServer(answer="Yes", logprobs=False) as srv, \
            pytest.raises(LLMError, match="no top_logprobs .* cannot tell its first tokens' probabilities"):
        client(srv).complete(verdict)
    assert "first_tokens" not in REQ.to_dict()  # a plain request's body and cache key are as before


@pytest.mark.parametrize("kind", ["500", "429", "garbage", "drop"])
def test_retries_then_success(kind: str) -> None:
    with FakeOpenAIServer(answer="Paris", faults=[Fault(kind, first_n=2)]) as srv:
        resp = client(srv).complete(REQ)
    assert resp.text == "Paris"
    assert srv.count == 3


def test_timeout_is_retried() -> None:
    with FakeOpenAIServer(answer="Paris", faults=[Fault("timeout", first_n=1, sleep_s=1.0)]) as srv:
        start = time.perf_counter()
        resp = client(srv, timeout=0.2).complete(REQ)
        elapsed = time.perf_counter() - start
    assert resp.text == "Paris"
    assert srv.count == 2
    assert elapsed < 1.0  # did not wait for the slow answer


def test_error_after_exhausting_retries() -> None:
    with FakeOpenAIServer(answer="Paris", faults=[Fault("500")]) as srv:
        with pytest.raises(LLMError, match=r"after 3 attempt\(s\).*HTTP 500"):
            client(srv, max_retries=2).complete(REQ)
    assert srv.count == 3


def test_garbage_forever_names_the_body() -> None:
    with FakeOpenAIServer(faults=[Fault("garbage")]) as srv:
        with pytest.raises(LLMError, match="not JSON"):
            client(srv, max_retries=1).complete(REQ)


def test_fault_by_pattern_only_hits_matching_prompts() -> None:
    with FakeOpenAIServer(answer="ok", faults=[Fault("500", pattern="poison")]) as srv:
        llm = client(srv, max_retries=1)
        assert llm.complete(REQ).text == "ok"
        with pytest.raises(LLMError):
            llm.complete(LLMRequest.from_prompt("a poison prompt"))


def test_client_error_is_not_retried() -> None:
    with FakeOpenAIServer() as srv:
        llm = OpenAILLM("m", srv.base_url.removesuffix("/v1") + "/nope", max_retries=3, backoff_base=0.001)
        with pytest.raises(LLMError, match="HTTP 404"):
            llm.complete(REQ)
    assert srv.count == 0


def test_connection_refused_is_retried_then_fails() -> None:
    with FakeOpenAIServer() as srv:
        url = srv.base_url
    llm = OpenAILLM("m", url, max_retries=2, backoff_base=0.001, connect_timeout=0.5)
    with pytest.raises(LLMError, match="cannot connect"):
        llm.complete(REQ)


def test_concurrency_bound_holds() -> None:
    with FakeOpenAIServer(answer="ok", latency_s=0.1) as srv:
        llm = client(srv, max_concurrency=3)
        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(llm.complete, [REQ] * 12))
    assert all(r.text == "ok" for r in results)
    assert srv.count == 12
    assert 2 <= srv.max_in_flight <= 3


def test_thread_safety_many_threads() -> None:
    with FakeOpenAIServer(answer=lambda body: body["messages"][-1]["content"].upper()) as srv:
        llm = client(srv, max_concurrency=4)
        prompts = [f"q{i}" for i in range(40)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            texts = list(pool.map(lambda p: llm.complete(LLMRequest.from_prompt(p)).text, prompts))
    assert texts == [p.upper() for p in prompts]


def test_stop_and_length_reported() -> None:
    with FakeOpenAIServer(answer="one two three four five") as srv:
        llm = client(srv)
        stopped = llm.complete(LLMRequest.from_prompt("x", stop=("three",)))
        assert stopped.text == "one two " and stopped.finish_reason == "stop"
        assert srv.requests[-1]["stop"] == ["three"]
        cut = llm.complete(LLMRequest.from_prompt("x", max_tokens=2))
        assert cut.finish_reason == "length"


def test_api_key_from_configured_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-test")
    with FakeOpenAIServer(answer="ok") as srv:
        llm = client(srv, api_key_env="MY_KEY")
        assert llm.complete(REQ).text == "ok"
    assert srv.headers[-1]["authorization"] == "Bearer sk-test"


def test_json_modes_shape_the_body() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    req = LLMRequest.from_prompt("Capital of France?", json_schema=schema, seed=7)
    with FakeOpenAIServer() as srv:
        prompt_body = client(srv).request_body(req)
        schema_body = client(srv, json_mode="schema").request_body(req)
        object_body = client(srv, json_mode="object").request_body(req)
    assert "response_format" not in prompt_body
    assert "JSON schema" in prompt_body["messages"][-1]["content"]
    assert schema_body["response_format"]["type"] == "json_schema"
    assert schema_body["response_format"]["json_schema"]["schema"] == schema
    assert schema_body["messages"][-1]["content"] == "Capital of France?"
    assert object_body["response_format"] == {"type": "json_object"}
    assert prompt_body["seed"] == 7


@pytest.mark.parametrize(("owner", "mode"), [("vllm", "schema"), ("sglang", "schema"), ("ollama", "object"),
                                             ("someone", "prompt")])
def test_auto_json_mode_follows_the_server(owner, mode) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    with FakeOpenAIServer(answer='{"a":"x"}', owned_by=owner) as srv:
        llm = client(srv)
        resp = llm.complete(LLMRequest.from_prompt("q", json_schema=schema))
        assert llm.json_mode == mode and llm.detected_owner == owner and llm.constrains_json == (mode == "schema")
        assert resp.constrained == (mode == "schema")
        assert ("response_format" in srv.requests[-1]) == (mode != "prompt")
    dead = OpenAILLM("m", "http://127.0.0.1:9/v1", max_retries=0, connect_timeout=0.5)
    assert dead.json_mode == "prompt"  # nothing to ask: the request itself will say the server is down


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="json_mode"):
        OpenAILLM("m", "http://127.0.0.1:1/v1", json_mode="grammar")
    with pytest.raises(ConfigError, match="max_concurrency"):
        OpenAILLM("m", "http://127.0.0.1:1/v1", max_concurrency=0)


def test_server_stops_promptly_with_sleeping_handler() -> None:
    srv = FakeOpenAIServer(faults=[Fault("timeout", sleep_s=30)]).start()
    llm = OpenAILLM("m", srv.base_url, timeout=0.2, max_retries=0)
    with pytest.raises(LLMError, match="timeout"):
        llm.complete(REQ)
    start = time.perf_counter()
    srv.stop()
    assert time.perf_counter() - start < 5
    assert not any(t.name == "fake-openai" and t.is_alive() for t in threading.enumerate())
