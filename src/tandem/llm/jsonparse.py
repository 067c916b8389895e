"""Tolerant JSON extraction from LLM output (a method's structured exchange and its repair round are
:func:`tandem.methods.base.call_structured`).

Small models wrap JSON in code fences and prose, use Python literals and single quotes, leave
trailing commas, and stop mid-object when ``max_tokens`` runs out. :func:`parse_json` copes with
all of these; what it cannot read raises :class:`ParseError` carrying the raw text, so a method
can fall back to its plain-text path.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from tandem.errors import ParseError

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js|python)?[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_WORDS = {"True": "true", "False": "false", "None": "null", "true": "true", "false": "false",
          "null": "null", "NaN": "null", "Infinity": "null", "undefined": "null"}
_CLOSER = {"{": "}", "[": "]"}


def parse_json(text: str, schema: dict[str, Any] | None = None) -> Any:
    """The first JSON object or array in ``text`` (repaired if need be), checked against ``schema``.

    Handles code fences, prose before/after, single quotes, Python ``True``/``False``/``None``,
    trailing commas, unquoted keys, comments, and truncation (open strings/brackets are closed and
    a cut-off last member is dropped). A bare JSON scalar is accepted when the whole text is one.
    Raises :class:`ParseError` (``.raw`` = ``text``) when nothing usable is found or the value does
    not fit ``schema`` (a subset of JSON Schema: type, properties, required, items, enum).
    """
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}", raw=repr(text))
    errors: list[str] = []
    prefer = {"array": "[", "object": "{"}.get(str((schema or {}).get("type")), "")
    for candidate in _candidates(text):
        try:
            value = _parse_candidate(candidate, prefer)
        except ValueError as exc:
            errors.append(str(exc))
            continue
        if schema is not None:
            problems = validate(value, schema)
            if problems:
                raise ParseError(f"JSON does not match the schema: {'; '.join(problems[:5])}", raw=text)
        return value
    reason = errors[-1] if errors else "no JSON object or array found"
    raise ParseError(f"could not parse JSON from model output: {reason}", raw=text)


def _candidates(text: str) -> list[str]:
    """Fenced blocks first, then the whole text."""
    found = [m.group(1) for m in _FENCE.finditer(text) if m.group(1).strip()]
    return [*found, text]


def _parse_candidate(text: str, prefer: str) -> Any:
    stripped = text.strip()
    start = _first_container(stripped, prefer)
    if start < 0:
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError("no JSON object or array found") from exc
    body = stripped[start:]
    try:
        value, _end = json.JSONDecoder().raw_decode(body)
        return value
    except json.JSONDecodeError:
        pass
    return _repair_and_load(body)


def _first_container(text: str, prefer: str) -> int:
    """Start of the JSON value: the first ``prefer`` bracket if given and present, else the first of either."""
    if prefer and prefer in text:
        return text.find(prefer)
    positions = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    return min(positions) if positions else -1


def _repair_and_load(body: str) -> Any:
    """Rewrite ``body`` into strict JSON with one left-to-right scan, then load it.

    Records cut points (after an opener or before a structural comma) with the closers needed at
    each, so a truncated tail can be dropped back to the last complete member.
    """
    out: list[str] = []
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []
    i, n = 0, len(body)
    quote = ""  # current string's opening quote, '' outside strings
    complete = False
    while i < n:
        ch = body[i]
        if quote:
            if ch == "\\" and i + 1 < n:
                nxt = body[i + 1]
                out.append("'" if nxt == "'" else ch + nxt)
                i += 2
                continue
            if ch == quote:
                out.append('"')
                quote = ""
            elif ch == '"':
                out.append('\\"')
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\t":
                out.append("\\t")
            else:
                out.append(ch)
            i += 1
            continue
        if ch in "\"'":
            quote = ch
            out.append('"')
        elif ch in "{[":
            stack.append(_CLOSER[ch])
            out.append(ch)
            cuts.append((len(out), "".join(reversed(stack))))
        elif ch in "}]":
            _drop_trailing_comma(out)
            if stack:
                out.append(stack.pop())
            if not stack:
                complete = True
                break
        elif ch == ",":
            _drop_trailing_comma(out)
            cuts.append((len(out), "".join(reversed(stack))))
            out.append(",")
        elif ch == "#" or body.startswith("//", i):
            while i < n and body[i] != "\n":
                i += 1
            continue
        elif ch in "-0123456789.":
            j = i + 1
            while j < n and body[j] in "0123456789eE+-.":
                j += 1
            out.append(body[i:j])
            i = j
            continue
        elif ch.isalpha() or ch == "_":
            j = i
            while j < n and (body[j].isalnum() or body[j] in "_-"):
                j += 1
            word = body[i:j]
            out.append(_WORDS.get(word, json.dumps(word)))
            i = j
            continue
        else:
            out.append(ch)
        i += 1
    text = "".join(out)
    if complete:
        return _loads(text)
    # truncated: close the open string, then try closing brackets at the end or at a cut point
    if quote:
        text = text[:-1] if text.endswith("\\") else text
        text += '"'
    closers = "".join(reversed(stack))
    attempts = [text + closers, text.rstrip().rstrip(",") + closers]
    if text.rstrip().endswith(":"):
        attempts.append(text.rstrip() + "null" + closers)
    attempts += ["".join(out[:pos]).rstrip().rstrip(",") + close for pos, close in reversed(cuts)]
    for attempt in attempts:
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            continue
    raise ValueError("truncated JSON could not be closed")


def _drop_trailing_comma(out: list[str]) -> None:
    k = len(out) - 1
    while k >= 0 and out[k].isspace():
        k -= 1
    if k >= 0 and out[k] == ",":
        del out[k]


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at char {exc.pos}") from exc




# The reply check: jsonschema's own validators for the keywords that say what a reply holds (type, properties,
# required, items, enum); length and count bounds are left to the grammar (or the repair round) that produced it,
# so a prompt-only reply a little over a bound is still used.
_Checker = jsonschema.validators.create(
    meta_schema=jsonschema.Draft202012Validator.META_SCHEMA,
    validators={k: jsonschema.Draft202012Validator.VALIDATORS[k] for k in ("type", "properties", "required", "items",
                                                                            "enum")},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER)


def validate(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Problems of ``value`` against ``schema``'s type, properties, required, items and enum (jsonschema)."""
    return [f"{where}{''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in e.absolute_path)}: {e.message}"
            for e in _Checker(schema).iter_errors(value)]
