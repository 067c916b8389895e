"""Behaviour every in-process engine of the ``local`` backend shares (torch and OpenVINO run the same checks)."""

from __future__ import annotations

from typing import Any

from tandem.llm.base import LLMRequest


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
