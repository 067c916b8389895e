"""Schema grammars that decode long strings at the speed of unbounded ones, and give the same replies.

The openvino engine's grammar matcher (the xgrammar inside openvino-genai) masks a token about as
fast as an unconstrained step inside an unbounded string or a repeat of span up to ~100, but takes
two to three times a step inside a longer bounded repeat, however the repeat is split (docs/openvino.md, "Long repeats are split").
So for a greedy request whose schema has strings longer than :data:`LONG_STRING` the engine
(:class:`tandem.llm.ov_engine.OVLLM`, option ``relax_strings``):

1. decodes under the *relaxed* grammar (:meth:`RelaxedPlan.grammar`): the schema's language except
   that those long strings have no upper bound;
2. feeds every step's tokens to a :class:`Cursor` that follows the reply through the schema;
3. the step a long string passes its ``maxLength``, drops the request and continues it from the last
   token within the bound - prompt plus the tokens so far - under the grammar of the rest of the
   reply (:meth:`Cursor.rest`): at most the string's remaining characters, its closing quote, and
   what the schema puts after it (long strings relaxed again).

Every token the bounded grammar admits the relaxed one admits too, and until a token would pass a
bound they admit the same ones, so greedy decoding picks the same tokens: the reply is the bounded
grammar's own (``tests/unit/test_json_grammar.py`` checks the languages on xgrammar's matcher). The
grammars are written here rather than by xgrammar because the rest of a reply from a point inside it
is not something xgrammar's JSON converter makes; the language is :func:`tandem.llm.structured.json_ebnf`'s:
properties in order, no whitespace, strings of ``[^"\\\\\\r\\n]`` without escapes, canonical integers.
Schemas with parts this writer does not cover (optional properties, numbers, type unions) get no plan
and decode under the bounded grammar as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: strings with a larger ``maxLength`` decode relaxed (shorter ones are cheap to compile and mask bounded)
LONG_STRING = 24
#: a character of a bounded string in :func:`tandem.llm.structured.json_ebnf` (xgrammar's, escapes excluded)
CHAR = r'[^\"\\\r\n]'


class Unsupported(ValueError):
    """The schema has a part this writer does not cover (the caller keeps the bounded grammar)."""


def _literal(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _digits_range(lo: str, hi: str) -> str:
    """EBNF for the digit strings of one length between ``lo`` and ``hi`` (same length, lo <= hi)."""
    if not lo:
        return '""'
    if lo[0] == hi[0]:
        return f'"{lo[0]}" ({_digits_range(lo[1:], hi[1:])})'
    rest = len(lo) - 1
    any_rest = " ".join(["[0-9]"] * rest) or '""'
    parts = [f'"{lo[0]}" ({_digits_range(lo[1:], "9" * rest)})']
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}] {any_rest}")
    parts.append(f'"{hi[0]}" ({_digits_range("0" * rest, hi[1:])})')
    return " | ".join(f"({p})" for p in parts)


def _integer(lo: int, hi: int) -> str:
    """EBNF for the canonical decimals of the integers in [lo, hi], 0 <= lo <= hi."""
    if lo < 0 or hi < lo:
        raise Unsupported(f"integer range [{lo}, {hi}]")
    parts = []
    for width in range(len(str(lo)), len(str(hi)) + 1):
        low = max(lo, 10 ** (width - 1) if width > 1 else 0)
        high = min(hi, 10**width - 1)
        if low <= high:
            parts.append(_digits_range(str(low), str(high)))
    return "(" + " | ".join(f"({p})" for p in parts) + ")"


def _repeat(expr: str, low: int, high: int | None) -> str:
    """``expr`` repeated low..high times (``None``: no upper bound), in the EBNF the engine's parser reads."""
    head = " ".join([expr] * low)
    if high is None:
        tail = f"{expr}*"
    elif high == low:
        tail = ""
    else:
        tail = f"{expr}{{0, {high - low}}}"
    body = " ".join(p for p in (head, tail) if p)
    return f"({body})" if body else '""'


def is_long(schema: dict[str, Any]) -> bool:
    """True for a plain string whose ``maxLength`` exceeds :data:`LONG_STRING` (decoded relaxed)."""
    return (schema.get("type") == "string" and "enum" not in schema and "const" not in schema
            and int(schema.get("maxLength", 0)) > LONG_STRING)


def _string(schema: dict[str, Any], relaxed: bool, used: int | None = None) -> str:
    """A string value's EBNF; with ``used`` (characters already written), the rest of a string under way,
    bounded."""
    if used is not None:
        low = max(0, int(schema.get("minLength", 0)) - used)
        return f'{_repeat("c", low, int(schema["maxLength"]) - used)} "\\""'
    high = None if relaxed and is_long(schema) else int(schema["maxLength"])
    return f'"\\"" {_repeat("c", int(schema.get("minLength", 0)), high)} "\\""'


def value(schema: dict[str, Any], relaxed: bool = True) -> str:
    """EBNF expression of any value of ``schema`` (long strings unbounded when ``relaxed``)."""
    if "const" in schema:
        return _literal(schema["const"])
    if "enum" in schema:
        return "(" + " | ".join(_literal(v) for v in schema["enum"]) + ")"
    kind = schema.get("type")
    if kind == "string":
        if "maxLength" not in schema or "pattern" in schema or "format" in schema:
            raise Unsupported("a string without maxLength, or with a pattern or format")
        return _string(schema, relaxed)
    if kind == "boolean":
        return '("true" | "false")'
    if kind == "null":
        return '"null"'
    if kind == "integer":
        return _integer(int(schema["minimum"]), int(schema["maximum"]))
    if kind == "object":
        props = list((schema.get("properties") or {}).items())
        if schema.get("additionalProperties", True) is not False or set(schema.get("required", [])) != {k for k, _ in props}:
            raise Unsupported("an object that is not closed with every property required")
        return '"{" ' + _properties(props, 0, relaxed) + ' "}"'
    if kind == "array":
        items, low, high = schema.get("items"), int(schema.get("minItems", 0)), int(schema["maxItems"])
        if not isinstance(items, dict) or high < max(1, low):
            raise Unsupported("an array without an items schema or with maxItems < 1")
        item = value(items, relaxed)
        more = _repeat(f'("," {item})', max(0, low - 1), high - 1)
        body = f"{item} {more}"
        return f'"[" {body} "]"' if low else f'"[" ({body})? "]"'
    raise Unsupported(f"JSON type {kind!r}")


def _properties(props: list[tuple[str, dict[str, Any]]], start: int, relaxed: bool) -> str:
    parts = [("" if i == 0 else '"," ') + f"{_literal(key)} \":\" {value(sub, relaxed)}"
             for i, (key, sub) in enumerate(props) if i >= start]
    return " ".join(parts) if parts else '""'


def _has_long(schema: dict[str, Any]) -> bool:
    if is_long(schema):
        return True
    subs = list((schema.get("properties") or {}).values())
    if isinstance(schema.get("items"), dict):
        subs.append(schema["items"])
    return any(_has_long(s) for s in subs)


def _grammar(root: str) -> str:
    return f"root ::= {root}\nc ::= {CHAR}\n"


@dataclass(frozen=True)
class RelaxedPlan:
    """The relaxed decoding of one schema: its relaxed grammar, and cursors to follow replies with."""

    schema: dict[str, Any]

    @staticmethod
    def of(schema: dict[str, Any]) -> RelaxedPlan | None:
        """A plan for ``schema``, or None when it has no long string or a part this writer does not cover."""
        if not _has_long(schema):
            return None
        try:
            value(schema)
        except (Unsupported, KeyError, TypeError, ValueError):
            return None
        return RelaxedPlan(schema)

    def grammar(self) -> str:
        """The whole reply's grammar, long strings without an upper bound."""
        return _grammar(value(self.schema))

    def bounded_grammar(self) -> str:
        """The whole reply's grammar with every bound (the language the relaxed decoding reproduces)."""
        return _grammar(value(self.schema, relaxed=False))

    def cursor(self) -> Cursor:
        """A cursor at the start of a reply."""
        return Cursor(self.schema)


@dataclass
class _Frame:
    kind: str  # "object", "array" or "string"
    schema: dict[str, Any]
    index: int = -1  # object: the property under way; array: items begun; string: characters
    key: bool = False  # a string that is an object's key


@dataclass
class Cursor:
    """Follows a reply of a :class:`RelaxedPlan`'s schema byte by byte (the reply is valid by its grammar).

    :meth:`feed` returns False at the byte where a long string passes its ``maxLength``; take a
    :meth:`copy` before each token to continue from the token before, with :meth:`rest`.
    """

    schema: dict[str, Any]
    stack: list[_Frame] = field(default_factory=list)
    expect: dict[str, Any] | None = None  # the schema of an object's next value (set by its key)
    awaiting: bool = True  # a value begins with the next byte
    started: bool = False
    key: bytes = b""

    def copy(self) -> Cursor:
        """An independent copy (frames are small)."""
        return Cursor(self.schema, [_Frame(f.kind, f.schema, f.index, f.key) for f in self.stack], self.expect,
                      self.awaiting, self.started, self.key)

    def _begin(self) -> dict[str, Any]:
        self.awaiting = False
        if not self.started:
            self.started = True
            return self.schema
        top = self.stack[-1]
        if top.kind == "array":
            top.index += 1
            return top.schema["items"]
        if self.expect is None:
            raise ValueError("a value where the schema has none")
        return self.expect

    def _in_string(self, top: _Frame, byte: int) -> bool:
        if byte == 0x22:  # the closing quote (bounded strings and keys admit no escapes)
            self.stack.pop()
            if top.key:
                parent = self.stack[-1]
                props = list(parent.schema.get("properties") or {})
                parent.index = props.index(self.key.decode("utf-8"))
                self.expect = parent.schema["properties"][props[parent.index]]
        elif top.key:
            self.key += bytes([byte])
        elif byte & 0xC0 != 0x80:  # a character begins (UTF-8 continuation bytes do not count)
            top.index += 1
            return not (is_long(top.schema) and top.index > int(top.schema["maxLength"]))
        return True

    def feed(self, data: bytes) -> bool:
        """Advance over ``data``; False as soon as a long string passes its bound (the rest is not read)."""
        for byte in data:
            top = self.stack[-1] if self.stack else None
            if top is not None and top.kind == "string":
                if not self._in_string(top, byte):
                    return False
                continue
            char = chr(byte)
            if char == ":":
                self.awaiting = True
            elif char == ",":
                self.awaiting = top is not None and top.kind == "array"
            elif char in "}]":
                self.stack.pop()
                self.awaiting = False
            elif self.awaiting:  # a value begins: a string, an object, an array or a scalar's first byte
                schema = self._begin()
                if char == '"':
                    self.stack.append(_Frame("string", schema, index=0))
                elif char == "{":
                    self.stack.append(_Frame("object", schema))
                elif char == "[":
                    self.stack.append(_Frame("array", schema, index=0))
                    self.awaiting = True
            elif char == '"' and top is not None and top.kind == "object":
                self.key = b""
                self.stack.append(_Frame("string", top.schema, key=True))
        return True

    def rest(self, relaxed: bool = True) -> str | None:
        """The grammar of the rest of the reply from this point inside a long string (the string's rest
        bounded, later long strings relaxed unless ``relaxed`` is False), or None when the point is
        not inside one."""
        if not self.stack or self.stack[-1].kind != "string" or self.stack[-1].key or not is_long(self.stack[-1].schema):
            return None
        top = self.stack[-1]
        parts = [_string(top.schema, relaxed=True, used=top.index)]
        for frame in reversed(self.stack[:-1]):
            if frame.kind == "object":
                props = list((frame.schema.get("properties") or {}).items())
                after = _properties(props, frame.index + 1, relaxed)
                parts.append((f"{after} " if frame.index + 1 < len(props) else "") + '"}"')
            else:
                item = value(frame.schema["items"], relaxed)
                low, high = int(frame.schema.get("minItems", 0)), int(frame.schema["maxItems"])
                more = _repeat(f'("," {item})', max(0, low - frame.index), high - frame.index)
                parts.append(f'{more} "]"')
        return _grammar(" ".join(parts))
