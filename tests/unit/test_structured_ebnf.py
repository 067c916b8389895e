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
