"""The one LLM-call recorder: structured calls keep a rejected reply and the parser's message as
typed fields of the call, shown in the trace and serialised; R²AG-style calls go through it too."""

from __future__ import annotations

import io

from rich.console import Console

from tandem.errors import ParseError
from tandem.llm.base import LLMRequest, LLMResponse, Message
from tandem.methods.base import Role, call_structured, record_call
from tandem.render import render_trace
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Answer, Step, Trace

ROLE = Role("pick", {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}, 32, 32)


def parse_x(text: str) -> int:
    if not text.strip().isdigit():
        raise ParseError("not a number", raw=text.strip())
    return int(text)


def test_a_rejected_reply_is_kept_on_its_call_with_the_parsers_message() -> None:
    step = Step("s")
    llm = FakeLLM(["  oops, no number  ", "7"])
    value, first = call_structured(llm, step, ROLE, [Message("user", "x?")], parse_x)
    assert value == 7 and first == "  oops, no number  "
    bad, good = step.llm_calls
    assert bad.parse_error == "not a number" and bad.raw_reply == "oops, no number"
    assert good.parse_error is None and good.raw_reply is None and good.outcome == "repaired"
    data = bad.to_dict()
    assert data["parse_error"] == "not a number" and data["raw_reply"] == "oops, no number"
    assert "parse_error" not in good.to_dict() and "raw_reply" not in good.to_dict()


def test_the_raw_reply_falls_back_to_the_reply_text_when_the_parser_gives_none() -> None:
    def strict(text: str) -> int:
        raise ParseError("never")

    step = Step("s")
    value, _ = call_structured(FakeLLM(["abc", "def"]), step, ROLE, [Message("user", "x?")], strict)
    assert value is None
    assert [c.raw_reply for c in step.llm_calls] == ["abc", "def"]
    assert step.llm_calls[-1].outcome == "fallback"


def test_render_shows_the_parse_error() -> None:
    trace = Trace()
    step = trace.add(Step("pick"))
    call_structured(FakeLLM(["zzz", "3"]), step, ROLE, [Message("user", "x?")], parse_x)
    out = io.StringIO()
    Console(file=out, width=200).print(render_trace(Answer("q", "3", trace, "m")))
    assert "parse error: not a number" in out.getvalue()


def test_record_call_with_a_sender_records_its_response_uncut() -> None:
    llm = FakeLLM(["unused"], context_window=8)
    step = Step("answer")
    sent: list[LLMRequest] = []

    def send(req: LLMRequest) -> LLMResponse:
        sent.append(req)
        return LLMResponse(text="Paris", prompt_tokens=40, completion_tokens=1, latency_s=0.5, finish_reason="stop", model="m")

    long_prompt = "word " * 200
    resp = record_call(llm, step, "answer", LLMRequest((Message("user", long_prompt),), max_tokens=4), send=send)
    assert resp.text == "Paris" and llm.calls == []  # the sender answered, not llm.complete
    (call,) = step.llm_calls
    assert call.output == "Paris" and call.cut_chars == 0 and call.messages[0]["content"] == long_prompt
    assert (call.prompt_tokens, call.completion_tokens, call.latency_s) == (40, 1, 0.5)
    assert sent[0].max_tokens == 4


def test_record_call_without_a_sender_cuts_to_the_context_window() -> None:
    llm = FakeLLM(["ok"], context_window=64)
    step = Step("answer")
    record_call(llm, step, "answer", LLMRequest((Message("user", "word " * 400),), max_tokens=4))
    assert step.llm_calls[0].cut_chars > 0
