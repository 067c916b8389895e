"""Scripted FakeLLM, the SQLite response cache, request/response types and spec parsing."""

from __future__ import annotations

import re
import sys
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tandem.errors import ConfigError, LLMError
from tandem.llm import (
    LLM,
    CachedLLM,
    LLMRequest,
    LLMResponse,
    Message,
    cache_key,
    copy_responses,
    load_llm,
    parse_spec,
    split_model_url,
)
from tandem.testing import FakeLLM, FakeLLMScriptError

# -- FakeLLM -----------------------------------------------------------------------------------


def test_fake_replays_in_order_and_records() -> None:
    llm = FakeLLM(responses=["first", "second"])
    assert isinstance(llm, LLM)
    assert llm.complete(LLMRequest.from_prompt("a")).text == "first"
    assert llm.complete(LLMRequest.from_prompt("b")).text == "second"
    assert llm.prompts == ["a", "b"]
    with pytest.raises(FakeLLMScriptError, match=r"exhausted at call 3.*'c'"):
        llm.complete(LLMRequest.from_prompt("c"))


def test_fake_rules_match_last_user_message() -> None:
    llm = FakeLLM(rules=[("capital of France", "Paris"), (re.compile(r"hop \d"), lambda r: r.last_user[::-1])])
    assert llm.complete(LLMRequest.from_prompt("What is the capital of France?")).text == "Paris"
    assert llm.complete(LLMRequest.from_prompt("hop 2")).text == "2 poh"
    req = LLMRequest.from_prompt("unrelated", system="capital of France")
    with pytest.raises(FakeLLMScriptError):
        llm.complete(req)
    whole = FakeLLM(rules=[("capital of France", "Paris")], match="prompt")
    assert whole.complete(req).text == "Paris"


def test_fake_rules_before_queue_then_default() -> None:
    llm = FakeLLM(responses=["queued"], rules=[("special", "ruled")], default="fallback")
    assert llm.complete(LLMRequest.from_prompt("special")).text == "ruled"
    assert llm.complete(LLMRequest.from_prompt("x")).text == "queued"
    assert llm.complete(LLMRequest.from_prompt("y")).text == "fallback"


def test_fake_honours_stop_and_raises_scripted_errors() -> None:
    llm = FakeLLM(responses=["Answer: Paris\nObservation: x", LLMError("boom")])
    assert llm.complete(LLMRequest.from_prompt("q", stop=["\nObservation:"])).text == "Answer: Paris"
    with pytest.raises(LLMError, match="boom"):
        llm.complete(LLMRequest.from_prompt("q"))


def test_fake_is_thread_safe() -> None:
    llm = FakeLLM(responses=[str(i) for i in range(100)])
    with ThreadPoolExecutor(max_workers=8) as pool:
        texts = list(pool.map(lambda _: llm.complete(LLMRequest.from_prompt("q")).text, range(100)))
    assert sorted(texts, key=int) == [str(i) for i in range(100)]


# -- cache -------------------------------------------------------------------------------------


def test_cache_hit_does_not_call_inner(tmp_path: Path) -> None:
    inner = FakeLLM(responses=["Paris"])
    llm = CachedLLM(inner, tmp_path / "cache.sqlite")
    req = LLMRequest.from_prompt("capital of France?")
    first = llm.complete(req)
    second = llm.complete(req)
    assert (first.text, first.cached) == ("Paris", False)
    assert (second.text, second.cached) == ("Paris", True)
    assert len(inner.calls) == 1 and (llm.hits, llm.misses) == (1, 1)
    llm.close()
    reopened = CachedLLM(FakeLLM(), tmp_path / "cache.sqlite")  # persists; inner would raise if called
    assert reopened.complete(req).cached and len(reopened) == 1


def test_cache_skips_sampling_unless_forced(tmp_path: Path) -> None:
    inner = FakeLLM(default="x")
    req = LLMRequest.from_prompt("q", temperature=0.7, seed=1)
    llm = CachedLLM(inner, tmp_path / "c.sqlite")
    llm.complete(req)
    assert not llm.complete(req).cached and len(inner.calls) == 2
    forced = CachedLLM(inner, tmp_path / "c.sqlite", force=True)
    forced.complete(req)
    assert forced.complete(req).cached and len(inner.calls) == 3


def test_cache_key_separates_backend_model_and_request() -> None:
    req = LLMRequest.from_prompt("q")
    keys = {
        cache_key("openai", "m", req),
        cache_key("local", "m", req),
        cache_key("openai", "n", req),
        cache_key("openai", "m", LLMRequest.from_prompt("q", max_tokens=8)),
    }
    assert len(keys) == 4
    assert cache_key("openai", "m", req) == cache_key("openai", "m", LLMRequest.from_prompt("q"))


def test_cache_many_threads(tmp_path: Path) -> None:
    inner = FakeLLM(rules=[("", lambda r: r.last_user + "!")])
    llm = CachedLLM(inner, tmp_path / "c.sqlite")
    reqs = [LLMRequest.from_prompt(f"q{i % 10}") for i in range(80)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        texts = list(pool.map(lambda r: llm.complete(r).text, reqs))
    assert texts == [r.last_user + "!" for r in reqs]
    assert len(llm) == 10 and llm.hits + llm.misses == 80
    llm.close()


def test_load_llm_with_cache_forwards_attributes(tmp_path: Path) -> None:
    llm = load_llm("fake:hello", cache=tmp_path / "c.sqlite")
    assert isinstance(llm, CachedLLM) and llm.spec == "fake:hello"
    assert llm.remaining == 0  # forwarded to the FakeLLM


# -- types -------------------------------------------------------------------------------------


def test_request_normalises_and_serialises() -> None:
    req = LLMRequest(messages=[{"role": "user", "content": "hi"}], stop="\n")  # type: ignore[arg-type]
    assert req.messages == (Message("user", "hi"),) and req.stop == ("\n",)
    assert req.to_dict()["messages"] == [{"role": "user", "content": "hi"}]
    resp = LLMResponse("t", 1, 2, 0.5, "stop", "m")
    assert LLMResponse.from_dict(resp.to_dict()) == resp


@pytest.mark.parametrize(
    "kwargs",
    [{"messages": ()}, {"messages": (Message("user", "x"),), "max_tokens": 0},
     {"messages": (Message("user", "x"),), "temperature": -1}],
)
def test_bad_requests(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        LLMRequest(**kwargs)
    with pytest.raises(ConfigError, match="role"):
        Message("robot", "x")


# -- specs -------------------------------------------------------------------------------------


def test_unknown_backend_lists_registry() -> None:
    with pytest.raises(ConfigError, match=r"backends: \['fake', 'hf', 'llamacpp', 'local', 'openai'\]"):
        load_llm("gpt4all:foo")
    with pytest.raises(ConfigError):
        parse_spec("")


def test_openai_spec_parsing() -> None:
    assert split_model_url("qwen2.5:7b@http://127.0.0.1:11434/v1") == ("qwen2.5:7b", "http://127.0.0.1:11434/v1")
    assert split_model_url("org/m@v2@https://h/v1") == ("org/m@v2", "https://h/v1")
    assert split_model_url("gpt-4o-mini") == ("gpt-4o-mini", None)
    for bad in ["@http://h/v1", "m@ftp://h", ""]:
        with pytest.raises(ConfigError):
            split_model_url(bad)
    llm = load_llm("openai:m@http://127.0.0.1:9/v1", max_concurrency=2)
    assert (llm.name, llm.base_url, llm.spec) == ("m", "http://127.0.0.1:9/v1", "openai:m@http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="bad option"):
        load_llm("openai:m@http://127.0.0.1:9/v1", no_such_option=1)
    with pytest.raises(ConfigError, match="do not pass base_url"):
        load_llm("openai:m@http://127.0.0.1:9/v1", base_url="http://x/v1")


def test_hf_spec_needs_a_model() -> None:
    with pytest.raises(ConfigError, match="hf:PATH_OR_NAME"):
        load_llm("hf:")


def test_llamacpp_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import fails
    with pytest.raises(ConfigError, match="llama-cpp-python"):
        load_llm("llamacpp:smollm2")


def test_llamacpp_backend_with_stub_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    seen: dict = {}

    class StubLlama:
        def __init__(self, **kwargs: object) -> None:
            seen["init"] = kwargs

        def create_chat_completion(self, **kwargs: object) -> dict:
            seen["call"] = kwargs
            return {"choices": [{"message": {"content": "Paris.\nQ: next"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 3}}

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=StubLlama))
    llm = load_llm(f"llamacpp:{gguf}", use_extra_bufts=False)
    resp = llm.complete(LLMRequest.from_prompt("q", stop=["\nQ:"]))
    assert resp.text == "Paris." and resp.completion_tokens == 3 and llm.name == "tiny"
    assert seen["init"]["use_extra_bufts"] is False and seen["call"]["stop"] == ["\nQ:"]


def test_fake_spec() -> None:
    llm = load_llm("fake", responses=["a"])
    assert llm.complete(LLMRequest.from_prompt("q")).text == "a"


def test_llm_threads_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from tandem.llm.hf import configure_threads

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("TANDEM_LLM_THREADS", "1")
        assert configure_threads(None) == 1
        monkeypatch.setenv("TANDEM_LLM_THREADS", "many")
        with pytest.raises(ConfigError, match="TANDEM_LLM_THREADS"):
            configure_threads(None)
    finally:
        torch.set_num_threads(before)


def test_copy_responses_seeds_another_cache_with_the_matching_requests_only(tmp_path: Path) -> None:
    src = CachedLLM(FakeLLM(rules=[("judge", "Yes"), ("answer", "Paris")]), tmp_path / "a" / "cache.sqlite")
    src.complete(LLMRequest.from_prompt("judge this: Paris"))
    src.complete(LLMRequest.from_prompt("answer this"))
    src.close()
    dst = tmp_path / "b" / "cache.sqlite"
    dst.parent.mkdir()
    assert copy_responses(tmp_path / "a" / "cache.sqlite", dst, "judge this") == 1
    assert copy_responses(tmp_path / "a" / "cache.sqlite", dst, "judge this") == 0  # already there: kept
    seeded = CachedLLM(FakeLLM(default="computed"), dst)
    assert seeded.complete(LLMRequest.from_prompt("judge this: Paris")).text == "Yes"  # read, not computed
    assert seeded.complete(LLMRequest.from_prompt("answer this")).text == "computed"  # not copied
    assert (seeded.hits, seeded.misses) == (1, 1)
    seeded.close()
    with pytest.raises(FileNotFoundError, match="no response cache"):
        copy_responses(tmp_path / "missing.sqlite", dst, "judge")
