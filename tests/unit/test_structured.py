"""Structured output: bounded schemas, their worst-case token bound, and grammar-constrained decoding.

The adversarial decoder below always picks, among the tokens the grammar allows, the one that makes
the reply longest (4-byte characters first, ',' before ']', never the closing quote while it may
write more). If a bounded schema could be cut off at its role's max_tokens, this decoder would find it.
"""

from __future__ import annotations

import json

import llguidance
import llguidance.hf
import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tandem.errors import ConfigError
from tandem.eval.judge import JUDGE
from tandem.llm.base import LLMRequest
from tandem.llm.jsonparse import parse_json, validate
from tandem.llm.structured import (
    GRAMMAR_OPTIONS,
    JSONConstraint,
    bound_schema,
    worst_case_tokens,
)
from tandem.methods.cooprag import prompts as C
from tandem.methods.dualrag import prompts as D

ROLES = [*D.STRUCTURED_ROLES.values(), C.UNROLL, C.COMPLETE, C.ONE_CALL, JUDGE]


@pytest.fixture(scope="module")
def byte_tokenizer():
    """A byte-level tokenizer with one token per byte (the most tokens any text can cost) + end-of-turn."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab["<|im_end|>"] = len(vocab)
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>")
    hf.add_special_tokens({"eos_token": "<|im_end|>"})
    return llguidance.hf.from_tokenizer(hf, eos_token=vocab["<|im_end|>"]), vocab["<|im_end|>"]


def _rank(token: bytes) -> int:
    """Higher = makes the reply longer: lead bytes of long characters, continuation bytes, letters, ','."""
    if not token:
        return -10
    b = token[0]
    if b >= 0xF0:
        return 9
    if b >= 0xE0:
        return 8
    if b >= 0xC0:
        return 7
    if b >= 0x80:
        return 6
    if token in (b",", b"\\"):
        return 5
    if token in (b'"', b"]", b"}"):
        return -5
    return 1


def adversarial_decode(lltok, eos: int, grammar: str, limit: int) -> tuple[int, bool, bytes]:
    """Decode ``grammar`` picking the longest-making allowed token; (tokens used, finished, bytes)."""
    matcher = llguidance.LLMatcher(lltok, grammar)
    assert not matcher.is_error(), matcher.get_error()
    words = np.zeros((lltok.vocab_size + 31) // 32, dtype=np.int32)
    ranks = [_rank(lltok.decode_bytes([i])) if i != eos else -100 for i in range(lltok.vocab_size)]
    out = b""
    for used in range(1, limit + 1):
        matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        allowed = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")[: lltok.vocab_size])
        token = int(max(allowed, key=lambda i: ranks[i]))
        if token == eos:
            return used, True, out
        assert matcher.consume_token(token), matcher.get_error()
        out += lltok.decode_bytes([token])
    return limit, False, out


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_a_bounded_role_schema_cannot_be_cut_off_at_its_max_tokens(byte_tokenizer, role):
    lltok, eos = byte_tokenizer
    bounded = role.bounded
    assert worst_case_tokens(bounded) <= role.budget
    grammar = llguidance.LLMatcher.grammar_from_json_schema(bounded, overrides=GRAMMAR_OPTIONS)
    used, finished, raw = adversarial_decode(lltok, eos, grammar, role.budget)
    assert finished, f"{role.name}: still writing after {role.budget} tokens"
    value = json.loads(raw.decode("utf-8"))
    assert validate(value, bounded) == []
    if role.name == "judge":  # a closed enum: two replies only, both within the bound, nothing to push
        assert raw in (b'{"verdict":"Yes"}', b'{"verdict":"No"}') and used == len(raw) + 1
        assert worst_case_tokens(bounded) >= len(b'{"verdict":"Yes"}')
    else:
        assert used >= 0.8 * worst_case_tokens(bounded)  # the adversary really pushed


def test_the_same_schema_unbounded_with_free_whitespace_runs_past_the_budget(byte_tokenizer):
    lltok, eos = byte_tokenizer
    grammar = llguidance.LLMatcher.grammar_from_json_schema(D.REASONER_SCHEMA)  # library defaults
    used, finished, _ = adversarial_decode(lltok, eos, grammar, D.REASONER.budget)
    assert not finished and used == D.REASONER.budget


def test_bound_schema_fills_keeps_and_scales_limits():
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "string"}},
                                               "n": {"type": "integer"}}}
    bounded = bound_schema(schema, 400)
    assert bounded["additionalProperties"] is False and bounded["properties"]["b"]["maxItems"] == 4
    assert bounded["properties"]["n"]["maximum"] == 999 and "maxLength" not in schema["properties"]["a"]  # a copy
    assert worst_case_tokens(bounded) <= 400 and bounded["properties"]["a"]["maxLength"] > 10
    stated = bound_schema(C.UNROLL_SCHEMA, 600)  # stated limits scaled down together to fit
    assert worst_case_tokens(stated) <= 600
    assert stated["properties"]["structure"]["maxLength"] < C.UNROLL_SCHEMA["properties"]["structure"]["maxLength"]
    with pytest.raises(ConfigError, match="too small"):
        bound_schema(C.UNROLL_SCHEMA, 40)
    with pytest.raises(ConfigError, match="maxLength"):
        worst_case_tokens({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False})
    with pytest.raises(ConfigError, match="additionalProperties"):
        worst_case_tokens({"type": "object", "properties": {}})
    with pytest.raises(ConfigError, match="number"):
        bound_schema({"type": "number"}, 100)


def test_in_process_backend_decodes_under_the_schema(tiny_llm):
    """A random 1-layer model, left to itself, writes noise; under the grammar its reply is valid JSON."""
    role = D.ENTITY_IDENTIFIER
    req = LLMRequest.from_prompt("Plan the search.", json_schema=role.bounded, max_tokens=role.budget)
    resp = tiny_llm.complete(req)
    assert resp.constrained and resp.finish_reason == "stop"
    assert validate(parse_json(resp.text), role.bounded) == []
    assert " " not in resp.text.replace('" "', "").split('"')[0]  # no free whitespace before the first string
    free = tiny_llm.complete(LLMRequest.from_prompt("Plan the search.", max_tokens=40))
    assert not free.constrained
    constraint = JSONConstraint(tiny_llm.tokenizer, tiny_llm.eos_token_ids)
    with pytest.raises(ConfigError, match="constrained decoding"):
        constraint.grammar({"type": "string", "pattern": "(?<=x)y"})
