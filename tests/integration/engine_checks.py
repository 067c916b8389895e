"""Behaviour every in-process engine of the ``local`` backend shares (torch and OpenVINO run the same checks)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from tandem.llm.base import LLMRequest, tells_first_tokens


def check_stop_strings_and_length(llm: Any) -> None:
    """A stop string ends the reply before it; ``max_tokens`` ends it with ``length`` at exactly that count."""
    counting = LLMRequest.from_prompt("Count from 1 to 20, separated by commas.", max_tokens=80, stop=("7",))
    resp = llm.complete(counting)
    assert resp.finish_reason == "stop" and "7" not in resp.text and "6" in resp.text
    short = llm.complete(LLMRequest.from_prompt("Write a long story about a dragon.", max_tokens=5))
    assert short.finish_reason == "length" and short.completion_tokens == 5


def check_seeded_sampling_is_reproducible(llm: Any) -> None:
    """Sampling with a seed gives the same text twice."""
    req = LLMRequest.from_prompt("Write a poem about the sea.", max_tokens=12, temperature=0.9, seed=3)
    assert llm.complete(req).text == llm.complete(req).text


def check_first_tokens(llm: Any) -> None:
    """A ``first_tokens`` request gets the four likeliest first tokens, likeliest first, with log-probabilities
    of one distribution; the likeliest is where the greedy reply begins."""
    verdict = LLMRequest.from_prompt("Is Paris the capital of France? Answer yes or no.", max_tokens=1)
    resp = llm.complete(replace(verdict, first_tokens=4))
    tokens = [token for token, _ in resp.first_tokens]
    logprobs = [logprob for _, logprob in resp.first_tokens]
    assert len(tokens) == 4 == len(set(tokens)) and tells_first_tokens(llm)
    assert logprobs == sorted(logprobs, reverse=True) and all(lp <= 0 for lp in logprobs)
    assert sum(math.exp(lp) for lp in logprobs) <= 1.0 + 1e-3
    assert resp.text == tokens[0] and llm.complete(verdict).text.startswith(tokens[0].strip())
    assert any(t.strip().lower() in ("yes", "no") for t in tokens)
