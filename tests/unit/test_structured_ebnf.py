"""The OpenVINO engine's schema grammars (:func:`tandem.llm.structured.json_ebnf`): compact JSON only,
within the bounded schema's limits, in the EBNF dialect openvino-genai's parser reads."""

from __future__ import annotations

import json

import pytest

from tandem.errors import ConfigError
from tandem.llm.structured import bound_schema, json_ebnf, worst_case_tokens

xgrammar = pytest.importorskip("xgrammar")
from xgrammar.testing import _is_grammar_accept_string as accepts  # noqa: E402

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "integer"}},
                                           "ok": {"type": "boolean"}},
          "required": ["a", "b", "ok"]}


@pytest.fixture(scope="module")
def bounded() -> dict:
    return bound_schema(SCHEMA, 160)


def test_compact_json_is_accepted_and_whitespace_is_not(bounded: dict) -> None:
    grammar = xgrammar.Grammar.from_ebnf(json_ebnf(bounded))
    assert accepts(grammar, '{"a":"x","b":[1,2],"ok":true}')
    assert not accepts(grammar, '{"a": "x","b":[1,2],"ok":true}')
    assert not accepts(grammar, '{"a":"x",\n"b":[1,2],"ok":true}')
    assert not accepts(grammar, '{"a":"x","b":[1,2],"ok":true,"extra":1}')  # closed object


def test_bounds_of_the_schema_hold(bounded: dict) -> None:
    grammar = xgrammar.Grammar.from_ebnf(json_ebnf(bounded))
    longest = bounded["properties"]["a"]["maxLength"]
    items = bounded["properties"]["b"]["maxItems"]
    assert accepts(grammar, json.dumps({"a": "x" * longest, "b": [999] * items, "ok": False}, separators=(",", ":")))
    assert not accepts(grammar, json.dumps({"a": "x" * (longest + 1), "b": [], "ok": False}, separators=(",", ":")))
    assert not accepts(grammar, json.dumps({"a": "x", "b": [1] * (items + 1), "ok": False}, separators=(",", ":")))
    reply = json.dumps({"a": "x" * longest, "b": [999] * items, "ok": False}, separators=(",", ":"))
    assert len(reply.encode()) + 1 <= worst_case_tokens(bounded)  # one token per byte at worst


def test_no_unbounded_repeat_syntax_left() -> None:
    # openvino-genai 2026.4's EBNF parser rejects xgrammar's newer "{0, -1}" repeats
    assert ", -1}" not in json_ebnf({"type": "object", "properties": {"n": {"type": "number"}}})


def test_unusable_schema_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not usable"):
        json_ebnf({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}})


@pytest.mark.parametrize(("low", "high"), [(0, 125), (1, 380), (1, 246), (3, 110), (1, 401)])
def test_long_repeats_are_split_and_keep_exactly_their_lengths(low: int, high: int) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": low, "maxLength": high}},
              "required": ["s"], "additionalProperties": False}
    ebnf = json_ebnf(schema)
    assert f"{{{low}, {high}}}" not in ebnf  # no long repeat reaches the engine's parser
    grammar = xgrammar.Grammar.from_ebnf(ebnf)
    for n in range(max(0, low - 2), high + 3):
        assert accepts(grammar, json.dumps({"s": "x" * n}, separators=(",", ":"))) == (low <= n <= high), n


def test_long_arrays_are_split_too() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "array", "items": {"type": "boolean"}, "maxItems": 40}},
              "required": ["v"], "additionalProperties": False}
    grammar = xgrammar.Grammar.from_ebnf(json_ebnf(schema))
    for n in range(0, 43):
        assert accepts(grammar, json.dumps({"v": [True] * n}, separators=(",", ":"))) == (n <= 40), n


def test_properties_keep_the_schema_order() -> None:
    # a reasoner writes its thought before its verdict: the grammar must not sort the keys
    schema = bound_schema({"type": "object", "properties": {"thought": {"type": "string"}, "done": {"type": "boolean"}},
                           "required": ["thought", "done"]}, 64)
    grammar = xgrammar.Grammar.from_ebnf(json_ebnf(schema))
    assert accepts(grammar, '{"thought":"x","done":true}')
    assert not accepts(grammar, '{"done":true,"thought":"x"}')
