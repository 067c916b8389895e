"""parse_json on each kind of damage small models do, and complete_json's repair round."""

from __future__ import annotations

import pytest

from tandem.errors import ParseError
from tandem.llm import parse_json, validate

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
    with pytest.raises(ParseError, match="'answer' is a required property"):
        parse_json('{"hops": 2}', SCHEMA)
    with pytest.raises(ParseError, match="'two' is not of type 'integer'"):
        parse_json('{"answer": "x", "hops": "two"}', SCHEMA)


def test_validate_subset() -> None:
    assert validate([1, 2], {"type": "array", "items": {"type": "integer"}}) == []
    assert validate(True, {"type": "integer"})  # bool is not an integer
    assert validate("c", {"enum": ["a", "b"]})
    assert validate(None, {"type": ["string", "null"]}) == []
    assert validate({"a": [1, "x"]}, {"type": "object", "properties": {"a": {"items": {"type": "integer"}}}}) == [
        "$.a[1]: 'x' is not of type 'integer'"]
    assert validate("far too long", {"type": "string", "maxLength": 3}) == []  # bounds are the grammar's job


