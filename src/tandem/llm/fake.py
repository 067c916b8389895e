"""Scripted fake LLM: makes multi-step methods deterministic in tests (like dspy's ``DummyLM``).

Two ways to script it, usable together (rules are tried first, then the queue, then ``default``):

- ``FakeLLM(responses=["first answer", "second answer"])`` replays answers in call order;
- ``FakeLLM(rules=[("capital of France", "Paris"), (re.compile(r"hop \\d"), "Bob")])`` answers
  the first rule matching the last user message (or the whole prompt with ``match="prompt"``).
  A ``str`` pattern is a substring test; an ``re.Pattern`` is searched.

An answer may be a string, an :class:`LLMResponse`, a callable ``(LLMRequest) -> str``, or an
exception instance to raise (to test fallbacks). Calls are recorded in ``calls``. Running out of
script raises :class:`FakeLLMScriptError` (not an ``LLMError``, so methods cannot swallow it).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Sequence

from tandem.llm.base import LLMRequest, LLMResponse, truncate_at_stop

Answer = str | LLMResponse | BaseException | Callable[[LLMRequest], str]
Pattern = str | re.Pattern[str]
MATCH_MODES = ("last_user", "prompt")


class FakeLLMScriptError(RuntimeError):
    """The fake LLM got a request its script has no answer for."""


class FakeLLM:
    """Deterministic stand-in for any LLM backend; thread-safe.

    Stop strings are honoured as a real backend would (the answer is cut at the first one).
    Token counts are whitespace word counts. ``constrains_json=True`` makes it report, as a
    grammar-decoding backend does, that replies to schema requests were decoded under the schema
    (it does not check the scripted text: scripts decide what the "model" says). ``batches=True``
    makes it report, as a batching engine does, that concurrent requests are computed together
    (methods then send independent calls at once: script them with rules, not a queue).
    ``tells_first_tokens=True`` makes it report that it answers ``first_tokens`` requests (script those with
    an :class:`LLMResponse` whose ``first_tokens`` are set).
    """

    def __init__(
        self,
        responses: Sequence[Answer] = (),
        rules: Sequence[tuple[Pattern, Answer]] = (),
        *,
        default: Answer | None = None,
        match: str = "last_user",
        name: str = "fake",
        spec: str = "fake",
        constrains_json: bool = False,
        context_window: int | None = None,
        batches: bool = False,
        tells_first_tokens: bool = False,
    ) -> None:
        if match not in MATCH_MODES:
            raise ValueError(f"unknown match mode {match!r}; modes: {sorted(MATCH_MODES)}")
        self._queue: deque[Answer] = deque(responses)
        self.rules = list(rules)
        self.default = default
        self.match = match
        self.name = name
        self.spec = spec
        self.context_window = context_window
        self.constrains_json = constrains_json
        self.batches = batches
        self.tells_first_tokens = tells_first_tokens
        self.calls: list[LLMRequest] = []
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """Queued responses not yet used."""
        return len(self._queue)

    @property
    def prompts(self) -> list[str]:
        """Last user message of each call so far."""
        return [c.last_user for c in self.calls]

    def complete(self, req: LLMRequest) -> LLMResponse:
        """Answer from the script; raise :class:`FakeLLMScriptError` if it has none."""
        with self._lock:
            self.calls.append(req)
            answer = self._pick(req)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, LLMResponse):
            return answer
        text = answer(req) if callable(answer) else answer
        text, _hit = truncate_at_stop(str(text), req.stop)
        return LLMResponse(
            text=text,
            prompt_tokens=sum(len(m.content.split()) for m in req.messages),
            completion_tokens=len(text.split()),
            latency_s=0.0,
            finish_reason="stop",
            model=self.name,
            constrained=self.constrains_json and req.json_schema is not None,
        )

    def _pick(self, req: LLMRequest) -> Answer:
        target = req.last_user if self.match == "last_user" else req.prompt_text
        for pattern, answer in self.rules:
            if isinstance(pattern, re.Pattern):
                if pattern.search(target):
                    return answer
            elif pattern in target:
                return answer
        if self._queue:
            return self._queue.popleft()
        if self.default is not None:
            return self.default
        raise FakeLLMScriptError(
            f"FakeLLM script exhausted at call {len(self.calls)} "
            f"({len(self.rules)} rule(s) did not match, no queued responses left). "
            f"Last user message: {req.last_user[:300]!r}"
        )

    def reset(self, responses: Sequence[Answer] = ()) -> None:
        """Forget recorded calls and replace the queue."""
        with self._lock:
            self.calls.clear()
            self._queue = deque(responses)

    def __repr__(self) -> str:
        return f"FakeLLM(rules={len(self.rules)}, remaining={self.remaining}, calls={len(self.calls)})"

