"""parse_json on each kind of damage small models do, and complete_json's repair round."""

from __future__ import annotations

import pytest

from tandem.errors import ParseError
from tandem.llm import LLMRequest, complete_json, parse_json, validate
from tandem.testing import FakeLLM

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "hops": {"type": "integer"}},
    "required": ["answer"],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"answer": "Paris"}', {"answer": "Paris"}),
        ('```json\n{"answer": "Paris"}\n```', {"answer": "Paris"}),
        ('```\n{"answer": "Paris"}\n```\nHope this helps!', {"answer": "Paris"}),
        ('Sure! Here is the JSON: {"answer": "Paris"} Let me know.', {"answer": "Paris"}),
        ("{'answer': 'Paris', 'note': 'say \"hi\"'}", {"answer": "Paris", "note": 'say "hi"'}),
        ('{"ok": True, "bad": False, "none": None}', {"ok": True, "bad": False, "none": None}),
        ('{"items": [1, 2, 3,], "x": {"y": 1,},}', {"items": [1, 2, 3], "x": {"y": 1}}),
        ("{answer: 'Paris', hops: 2}", {"answer": "Paris", "hops": 2}),
        ('{"answer": "Par', {"answer": "Par"}),
        ('{"answer": "Paris", "hops": [1, 2', {"answer": "Paris", "hops": [1, 2]}),
        ('{"answer": "Paris", "evid', {"answer": "Paris"}),
        ('{"answer": "Paris", "hops":', {"answer": "Paris", "hops": None}),
        ('```json\n{"a": {"b": [{"c": 1e3, "d": -2.5}', {"a": {"b": [{"c": 1000.0, "d": -2.5}]}}),
        ('{"a": 1, // a comment\n "b": 2}', {"a": 1, "b": 2}),
        ('{"text": "line one\nline two"}', {"text": "line one\nline two"}),
        ("[1, 2, 3]", [1, 2, 3]),
        ('[{"a": 1}, {"a": 2}]', [{"a": 1}, {"a": 2}]),
        ("42", 42),
        ("{'it\\'s': 'fine'}", {"it's": "fine"}),
    ],
)
def test_parse_json_survives_damage(text: str, expected: object) -> None:
    assert parse_json(text) == expected


def test_schema_prefers_the_object_over_a_citation() -> None:
    text = 'Based on passage [1], the answer is {"answer": "Paris"}'
    assert parse_json(text, SCHEMA) == {"answer": "Paris"}


@pytest.mark.parametrize("text", ["", "I don't know.", "answer: Paris", "{'a': }"])
def test_parse_json_failure_carries_raw(text: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_json(text)
    assert info.value.raw == text


def test_schema_mismatch_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="missing 'answer'"):
        parse_json('{"hops": 2}', SCHEMA)
    with pytest.raises(ParseError, match="expected integer"):
        parse_json('{"answer": "x", "hops": "two"}', SCHEMA)


def test_validate_subset() -> None:
    assert validate([1, 2], {"type": "array", "items": {"type": "integer"}}) == []
    assert validate(True, {"type": "integer"})  # bool is not an integer
    assert validate("c", {"enum": ["a", "b"]})
    assert validate(None, {"type": ["string", "null"]}) == []


def test_complete_json_first_try() -> None:
    llm = FakeLLM(responses=['{"answer": "Paris"}'])
    out = complete_json(llm, LLMRequest.from_prompt("q", json_schema=SCHEMA))
    assert out.value == {"answer": "Paris"}
    assert len(out.responses) == 1 and len(llm.calls) == 1


def test_complete_json_repairs_once() -> None:
    llm = FakeLLM(responses=["I think it is Paris.", '{"answer": "Paris"}'])
    out = complete_json(llm, LLMRequest.from_prompt("q", json_schema=SCHEMA))
    assert out.value == {"answer": "Paris"}
    assert len(out.responses) == 2
    repair = llm.calls[1]
    assert [m.role for m in repair.messages] == ["user", "assistant", "user"]
    assert repair.messages[1].content == "I think it is Paris."
    assert "only the JSON" in repair.messages[2].content


def test_complete_json_reraises_for_fallback() -> None:
    llm = FakeLLM(responses=["no json", "still none"])
    with pytest.raises(ParseError) as info:
        complete_json(llm, LLMRequest.from_prompt("q"), retries=1)
    assert info.value.raw == "still none"
    assert len(info.value.responses) == 2  # type: ignore[attr-defined]
    assert llm.remaining == 0


def test_complete_json_without_retries() -> None:
    llm = FakeLLM(responses=["no json"])
    with pytest.raises(ParseError):
        complete_json(llm, LLMRequest.from_prompt("q"), retries=0)
    assert len(llm.calls) == 1
