"""Structured output: JSON schemas that always terminate, and grammar-constrained decoding.

A JSON grammar with free whitespace lets a small model write ``{`` and then whitespace until
``max_tokens`` runs out; an unbounded string does the same with text. So every schema a method
sends goes through :func:`bound_schema` first:

- objects are closed (``additionalProperties: false``), arrays get ``maxItems``, strings
  ``maxLength``, integers ``minimum``/``maximum`` - set from the role's token budget where the
  schema does not state them;
- decoding allows no whitespace between tokens (:data:`GRAMMAR_OPTIONS`) and no ``\\u`` escapes.

:func:`worst_case_tokens` then bounds the reply: a byte-level tokenizer never spends more than one
token per UTF-8 byte, a character is at most 4 bytes (an escape is 2: ``\\n``), so the longest
reply the grammar admits fits in ``worst_case_tokens(schema)`` tokens, end-of-turn included.
A role whose ``max_tokens`` is at least that can never be cut off mid-JSON.

The transformers engine decodes with llguidance (:class:`JSONConstraint`, a transformers logits
processor), the OpenVINO engine with the schema's grammar from xgrammar (:func:`json_ebnf`);
servers get the same bounded schema as ``response_format``.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
import threading
from typing import Any

from tandem.errors import ConfigError, LLMError

# llguidance's JSON compiler options: compact separators, no whitespace anywhere, no \u escapes
GRAMMAR_OPTIONS: dict[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ",",
    "key_separator": ":",
    "json_allowed_escapes": 'nrtbf"\\',
}
BYTES_PER_CHAR = 4  # worst case: a 4-byte UTF-8 character (escapes are 2 bytes)
DEFAULT_MAX_ITEMS = 4
INT_RANGE = (0, 999)


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    if kind is None:
        if "enum" in schema or "const" in schema:
            return ["enum"]
        if "properties" in schema:
            return ["object"]
        raise ConfigError(f"cannot bound a schema without 'type': {json.dumps(schema)[:200]}")
    return list(kind) if isinstance(kind, list) else [kind]


def _dump(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _cost(schema: dict[str, Any]) -> tuple[int, int]:
    """(fixed bytes, number of strings without maxLength) of the longest value ``schema`` admits;
    the free strings count their quotes in the fixed bytes and are weighted by array multiplicity."""
    if "enum" in schema:
        return max(_dump(v) for v in schema["enum"]), 0
    if "const" in schema:
        return _dump(schema["const"]), 0
    best = (0, 0)
    for kind in _types(schema):
        if kind == "string":
            cost = (2 + BYTES_PER_CHAR * schema["maxLength"], 0) if "maxLength" in schema else (2, 1)
        elif kind == "boolean":
            cost = (5, 0)
        elif kind == "null":
            cost = (4, 0)
        elif kind == "integer":
            if "minimum" not in schema or "maximum" not in schema:
                raise ConfigError("an integer in a bounded schema needs minimum and maximum")
            cost = (max(len(str(int(schema["minimum"]))), len(str(int(schema["maximum"])))), 0)
        elif kind == "object":
            props = schema.get("properties") or {}
            if schema.get("additionalProperties", True) is not False:
                raise ConfigError("an object in a bounded schema needs additionalProperties: false")
            fixed, free = 2 + max(0, len(props) - 1), 0
            for key, sub in props.items():
                sub_fixed, sub_free = _cost(sub)
                fixed += _dump(key) + 1 + sub_fixed
                free += sub_free
            cost = (fixed, free)
        elif kind == "array":
            if "maxItems" not in schema or not isinstance(schema.get("items"), dict):
                raise ConfigError("an array in a bounded schema needs items and maxItems")
            n = int(schema["maxItems"])
            item_fixed, item_free = _cost(schema["items"])
            cost = (2 + max(0, n - 1) + n * item_fixed, n * item_free)
        else:
            raise ConfigError(f"cannot bound JSON type {kind!r} (number or untyped values have no length limit)")
        best = (max(best[0], cost[0]), max(best[1], cost[1]))
    return best


def worst_case_tokens(schema: dict[str, Any]) -> int:
    """Tokens of the longest reply ``schema`` admits under :data:`GRAMMAR_OPTIONS`, plus one for the
    end-of-turn token. Raises ConfigError if the schema admits replies of any length."""
    fixed, free = _cost(schema)
    if free:
        raise ConfigError(f"{free} string(s) in the schema have no maxLength: call bound_schema first")
    return fixed + 1


def _close(schema: dict[str, Any], max_items: int) -> None:
    """In place: close objects, bound arrays and integers (strings are left to the budget)."""
    kinds = _types(schema) if "enum" not in schema and "const" not in schema else []
    if "object" in kinds:
        schema.setdefault("additionalProperties", False)
        for sub in (schema.get("properties") or {}).values():
            _close(sub, max_items)
    if "array" in kinds:
        schema.setdefault("maxItems", max_items)
        if isinstance(schema.get("items"), dict):
            _close(schema["items"], max_items)
    if "integer" in kinds:
        schema.setdefault("minimum", INT_RANGE[0])
        schema.setdefault("maximum", INT_RANGE[1])


def _set_free_strings(schema: dict[str, Any], length: int) -> None:
    kinds = _types(schema) if "enum" not in schema and "const" not in schema else []
    if "string" in kinds and "maxLength" not in schema:
        schema["maxLength"] = length
    for sub in (schema.get("properties") or {}).values():
        _set_free_strings(sub, length)
    if isinstance(schema.get("items"), dict):
        _set_free_strings(schema["items"], length)


def _string_nodes(schema: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [schema] if "maxLength" in schema else []
    for sub in (schema.get("properties") or {}).values():
        nodes += _string_nodes(sub)
    if isinstance(schema.get("items"), dict):
        nodes += _string_nodes(schema["items"])
    return nodes


def bound_schema(schema: dict[str, Any], max_tokens: int, *, max_items: int = DEFAULT_MAX_ITEMS) -> dict[str, Any]:
    """A copy of ``schema`` whose every reply fits in ``max_tokens`` (see module doc).

    Strings without ``maxLength`` share what the budget leaves after the rest; when the stated string
    limits alone exceed the budget they are all scaled down by one factor until the reply fits.
    Raises ConfigError when even one character per string does not fit.
    """
    bounded = copy.deepcopy(schema)
    _close(bounded, max_items)
    fixed, free = _cost(bounded)
    if free:
        length = (max_tokens - 1 - fixed) // (BYTES_PER_CHAR * free)
        _set_free_strings(bounded, max(1, length))
    nodes = _string_nodes(bounded)
    stated = [int(n["maxLength"]) for n in nodes]
    lo, hi = 0.0, 1.0
    for _ in range(30):  # the largest common scale of the string limits that fits the budget
        if _fits(nodes, stated, hi, bounded, max_tokens):
            break
        mid = (lo + hi) / 2
        if _fits(nodes, stated, mid, bounded, max_tokens):
            lo = mid
        else:
            hi = mid
    else:
        hi = lo
    if not _fits(nodes, stated, hi, bounded, max_tokens):
        raise ConfigError(f"a token budget of {max_tokens} is too small for this schema "
                          f"(it needs {worst_case_tokens(bounded)} tokens with one character per string)")
    return bounded


def _fits(nodes: list[dict[str, Any]], stated: list[int], scale: float, schema: dict[str, Any], budget: int) -> bool:
    for node, length in zip(nodes, stated, strict=True):
        node["maxLength"] = max(1, int(length * scale))
        if "minLength" in node:
            node["minLength"] = min(int(node["minLength"]), node["maxLength"])
    return worst_case_tokens(schema) <= budget


class JSONConstraint:
    """Grammar-constrained JSON decoding for a transformers tokenizer, with llguidance.

    ``processor(schema)`` returns a fresh logits processor for one generation: at every step it
    advances the grammar by the token just chosen and masks every token the grammar forbids, so the
    reply is valid JSON for ``schema`` and ends with an end-of-turn token. The llguidance tokenizer
    is built once (about a second) and compiled grammars are cached per schema.
    """

    def __init__(self, tokenizer: Any, eos_token_ids: list[int]) -> None:
        try:
            import llguidance
            import llguidance.hf
        except ImportError as exc:  # a declared dependency; a clear message if an install lost it
            raise ConfigError("constrained decoding needs llguidance: pip install llguidance") from exc
        self._llg = llguidance
        self.eos_token_ids = list(eos_token_ids)
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, eos_token=self.eos_token_ids[0])
        self._grammars: dict[str, str] = {}
        self._lock = threading.Lock()

    def grammar(self, schema: dict[str, Any]) -> str:
        """The llguidance grammar of ``schema`` under :data:`GRAMMAR_OPTIONS` (cached)."""
        key = json.dumps(schema, sort_keys=True)
        with self._lock:
            if key not in self._grammars:
                grammar = self._llg.LLMatcher.grammar_from_json_schema(schema, overrides=GRAMMAR_OPTIONS)
                error = self._llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
                if error and not error.startswith("WARNING"):
                    raise ConfigError(f"JSON schema not usable for constrained decoding: {error}")
                self._grammars[key] = grammar
            return self._grammars[key]

    def processor(self, schema: dict[str, Any], prompt_tokens: int) -> _GrammarProcessor:
        """A logits processor for one generation whose prompt is ``prompt_tokens`` long."""
        matcher = self._llg.LLMatcher(self.tokenizer, self.grammar(schema))
        if matcher.is_error():
            raise LLMError(f"grammar error: {matcher.get_error()}")
        return _GrammarProcessor(matcher, prompt_tokens, self.tokenizer.vocab_size, self.eos_token_ids)


class _GrammarProcessor:
    """transformers LogitsProcessor (batch of one): feeds the last token to the matcher, masks the rest."""

    def __init__(self, matcher: Any, prompt_tokens: int, vocab_size: int, eos_token_ids: list[int]) -> None:
        import numpy as np

        self.matcher, self.start, self.vocab_size = matcher, prompt_tokens, vocab_size
        self.eos_token_ids = eos_token_ids
        self._words = np.zeros((vocab_size + 31) // 32, dtype=np.int32)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np
        import torch

        if input_ids.shape[0] != 1:
            raise LLMError("constrained decoding runs one sequence at a time")
        if input_ids.shape[1] > self.start and not self.matcher.consume_token(int(input_ids[0, -1])):
            raise LLMError(f"constrained decoding left the grammar: {self.matcher.get_error()}")
        if self.matcher.is_stopped():  # the JSON is complete: only end-of-turn may follow
            allowed = np.zeros(scores.shape[-1], dtype=bool)
            allowed[[i for i in self.eos_token_ids if i < scores.shape[-1]]] = True
        else:
            self.matcher.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
            bits = np.unpackbits(self._words.view(np.uint8), bitorder="little")
            allowed = np.zeros(scores.shape[-1], dtype=bool)
            n = min(scores.shape[-1], bits.size)
            allowed[:n] = bits[:n].astype(bool)
        scores[0, torch.from_numpy(~allowed)] = float("-inf")
        return scores


# xgrammar's EBNF writes unbounded repeats as {m, -1}; the parser inside openvino-genai predates that
_UNBOUNDED = re.compile(r"\{(0|1), -1\}")
# a rule repeated between m and n times, as xgrammar writes a bounded string or array
_BOUNDED = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\{(\d+), (\d+)\}")
#: Longest span (n - m) of a repeat left as ``X{m, n}``; longer ones are split into chunks. In
#: openvino-genai 2026.4 the cost of a token mask grows steeply with the span of the repeat the parser
#: is in: a string of maxLength 380 took ~2.5 s a token (~0.05 s split; docs/engine-figures.md).
REPEAT_SPAN = 100


def _split_repeat(rule: str, low: int, high: int, rules: list[str]) -> str:
    """A rule admitting ``rule`` repeated ``low``..``high`` times, exactly those lengths and each in one
    way, built from short repeats: ``low`` copies, then ``q`` chunks of ``k`` copies and a tail."""
    name = f"{rule}_rep_{low}_{high}"
    span = high - low
    k = max(2, math.isqrt(span))
    q, r = divmod(span, k)
    chunk = f"{name}_chunk"
    rules.append(f"{chunk} ::= ({' '.join([rule] * k)})")
    # span = q*k + r: fewer than q chunks and a tail below k, or q chunks and a tail up to r
    alternatives = [f"({chunk}{{0, {q - 1}}} {rule}{{0, {k - 1}}})" if q > 0 else "",
                    " ".join([chunk] * q + ([f"{rule}{{0, {r}}}"] if r else []))]
    rest = " | ".join(f"({a})" for a in alternatives if a)
    head = " ".join([rule] * low)
    rules.append(f"{name} ::= ({head} ({rest}))" if head else f"{name} ::= ({rest})")
    return name


def _split_repeats(ebnf: str, span: int = REPEAT_SPAN) -> str:
    """``ebnf`` with every ``X{m, n}`` whose span ``n - m`` exceeds ``span`` replaced by an equivalent
    rule of chunks (:func:`_split_repeat`); the language is unchanged."""
    rules: list[str] = []
    made: dict[tuple[str, int, int], str] = {}

    def replace(match: re.Match[str]) -> str:
        rule, low, high = match.group(1), int(match.group(2)), int(match.group(3))
        if high - low <= span:
            return match.group(0)
        key = (rule, low, high)
        if key not in made:
            made[key] = _split_repeat(rule, low, high, rules)
        return made[key]

    body = _BOUNDED.sub(replace, ebnf)
    return body.rstrip("\n") + "\n" + "".join(f"{r}\n" for r in rules) if rules else body


@functools.lru_cache(maxsize=256)
def _ebnf(schema_key: str) -> str:
    try:
        import xgrammar
    except ImportError as exc:  # a declared dependency of the openvino engine
        raise ConfigError("schema decoding on the openvino engine needs xgrammar: bash scripts/setup.sh") from exc
    try:
        grammar = xgrammar.Grammar.from_json_schema(schema_key, any_whitespace=False, separators=(",", ":"),
                                                    strict_mode=True)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"JSON schema not usable for constrained decoding: {exc}") from exc
    return _split_repeats(_UNBOUNDED.sub(lambda m: "*" if m.group(1) == "0" else "+", str(grammar)))


def json_ebnf(schema: dict[str, Any]) -> str:
    """EBNF grammar (xgrammar's dialect, as openvino-genai reads it) of ``schema`` under the same
    rules as :data:`GRAMMAR_OPTIONS`: compact separators, no whitespace between tokens, and the
    properties in the schema's own order (a reasoner's thought before its verdict). Bounded strings
    admit no escapes at all here (a subset of what llguidance admits, so :func:`worst_case_tokens`
    still bounds the reply); long repeats are split into short ones (:data:`REPEAT_SPAN`). Cached
    per schema."""
    return _ebnf(json.dumps(schema))
