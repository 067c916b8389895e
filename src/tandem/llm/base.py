"""Typed LLM request/response and the ``LLM`` protocol every backend implements."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from tandem.errors import ConfigError

ROLES = ("system", "user", "assistant")
FINISH_REASONS = ("stop", "length", "error")


@dataclass(frozen=True)
class Message:
    """One chat turn."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"unknown message role {self.role!r}; roles: {sorted(ROLES)}")
        if not isinstance(self.content, str):
            raise ConfigError(f"message content must be a string, got {type(self.content).__name__}")

    def to_dict(self) -> dict[str, str]:
        """The OpenAI-style ``{"role", "content"}`` dict."""
        return {"role": self.role, "content": self.content}


def _as_message(item: Message | Mapping[str, str]) -> Message:
    if isinstance(item, Message):
        return item
    if isinstance(item, Mapping):
        return Message(role=str(item["role"]), content=str(item["content"]))
    raise ConfigError(f"a message must be a Message or a {{role, content}} dict, got {type(item).__name__}")


@dataclass(frozen=True)
class LLMRequest:
    """What a method asks of an LLM. Lists given for ``messages``/``stop`` are stored as tuples.

    ``json_schema`` asks for a JSON answer following that schema (backends either pass it to the
    server as a structured-output constraint or add an instruction to the prompt). ``seed`` only
    matters when ``temperature > 0``. ``first_tokens=k`` asks for the k likeliest first tokens of the
    reply with their log-probabilities (:attr:`LLMResponse.first_tokens`) rather than a reply; a backend
    that can says so (:func:`tells_first_tokens`).
    """

    messages: tuple[Message, ...]
    max_tokens: int = 256
    temperature: float = 0.0
    stop: tuple[str, ...] = ()
    json_schema: dict[str, Any] | None = None
    seed: int | None = None
    first_tokens: int = 0

    def __post_init__(self) -> None:
        msgs = tuple(_as_message(m) for m in self.messages)
        if not msgs:
            raise ConfigError("an LLMRequest needs at least one message")
        object.__setattr__(self, "messages", msgs)
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        object.__setattr__(self, "stop", tuple(s for s in stop if s))
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.first_tokens < 0:
            raise ConfigError(f"first_tokens must be >= 0, got {self.first_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")

    @classmethod
    def from_prompt(cls, prompt: str, *, system: str | None = None, **kwargs: Any) -> LLMRequest:
        """A one-turn request: optional system message, then ``prompt`` as the user message."""
        msgs: list[Message] = [Message("system", system)] if system else []
        msgs.append(Message("user", prompt))
        return cls(messages=tuple(msgs), **kwargs)

    @property
    def prompt_text(self) -> str:
        """All message contents joined, for matching and logging."""
        return "\n\n".join(m.content for m in self.messages)

    @property
    def last_user(self) -> str:
        """Content of the last user message ('' when there is none)."""
        for m in reversed(self.messages):
            if m.role == "user":
                return m.content
        return ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (used for traces and cache keys)."""
        return {
            "messages": [m.to_dict() for m in self.messages],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stop": list(self.stop),
            "json_schema": self.json_schema,
            "seed": self.seed,
        } | ({"first_tokens": self.first_tokens} if self.first_tokens else {})

    def canonical_json(self) -> str:
        """Deterministic JSON of the request (sorted keys, no spaces)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class LLMResponse:
    """What a backend returns. ``finish_reason`` is ``"stop"`` (end of turn or a stop string) or
    ``"length"`` (hit ``max_tokens``). Token counts are 0 where a server does not report them.
    ``constrained`` says the backend decoded the reply under the request's JSON schema (a grammar),
    rather than only asking for JSON in the prompt. ``reused_tokens``: prompt tokens taken from the
    backend's prefix cache rather than computed (0 where it keeps none or does not say). ``first_tokens``:
    for a request with ``first_tokens=k``, the likeliest first tokens of the reply, most likely first, as
    (token text, natural-log probability) pairs."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str
    model: str
    cached: bool = False
    constrained: bool = False
    reused_tokens: int = 0
    first_tokens: tuple[tuple[str, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (used for traces and the cache)."""
        return {
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_s": self.latency_s,
            "finish_reason": self.finish_reason,
            "model": self.model,
            "cached": self.cached,
            "constrained": self.constrained,
            "reused_tokens": self.reused_tokens,
        } | ({"first_tokens": [list(pair) for pair in self.first_tokens]} if self.first_tokens else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LLMResponse:
        """Inverse of :meth:`to_dict`."""
        return cls(
            text=str(data["text"]),
            prompt_tokens=int(data["prompt_tokens"]),
            completion_tokens=int(data["completion_tokens"]),
            latency_s=float(data["latency_s"]),
            finish_reason=str(data["finish_reason"]),
            model=str(data["model"]),
            cached=bool(data.get("cached", False)),
            constrained=bool(data.get("constrained", False)),
            reused_tokens=int(data.get("reused_tokens", 0)),
            first_tokens=tuple((str(token), float(logprob)) for token, logprob in data.get("first_tokens", ())),
        )


@runtime_checkable
class LLM(Protocol):
    """Anything that completes chat requests. Implementations must be safe to call from many threads.

    ``spec`` is the string it was loaded from (``"openai:gpt-4o-mini@https://..."``), ``name`` the
    model name reported in responses and used in cache keys.
    """

    spec: str
    name: str

    def complete(self, req: LLMRequest) -> LLMResponse:
        """Answer one request."""
        ...


def constrains_json(llm: object) -> bool:
    """Whether ``llm`` decodes requests that carry a JSON schema under that schema (a grammar).

    Backends say so with a ``constrains_json`` attribute; an LLM without one only gets the schema
    as an instruction in the prompt.
    """
    return bool(getattr(llm, "constrains_json", False))


def tells_first_tokens(llm: object) -> bool:
    """Whether ``llm`` answers a request with ``first_tokens=k`` with the k likeliest first tokens of the
    reply and their log-probabilities (a ``tells_first_tokens`` attribute; :attr:`LLMResponse.first_tokens`)."""
    return bool(getattr(llm, "tells_first_tokens", False))


def batches(llm: object) -> bool:
    """Whether ``llm`` computes concurrent requests together (a batching engine or server), so that a
    method gains by sending its independent calls at once rather than one after another.

    Backends say so with a ``batches`` attribute (the embedded OpenVINO engine, OpenAI-compatible
    servers); one that answers a request at a time (the torch path, behind a lock) does not.
    """
    return bool(getattr(llm, "batches", False))


def caches_prefixes(llm: object) -> bool:
    """Whether ``llm`` keeps what it computed for a prompt's beginning and reuses it for a later prompt
    that begins the same way (the embedded engine's prefix cache; a ``caches_prefixes`` attribute), so
    that computing a role's instructions ahead of the first question saves that question the time."""
    return bool(getattr(llm, "caches_prefixes", False))


def truncate_at_stop(text: str, stop: Iterable[str]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest occurrence of any stop string; says whether one was found."""
    cut = -1
    for s in stop:
        if not s:
            continue
        i = text.find(s)
        if i >= 0 and (cut < 0 or i < cut):
            cut = i
    return (text[:cut], True) if cut >= 0 else (text, False)


# A prompt may use (context_window - max_tokens) * CHARS_PER_TOKEN characters: 3 characters a token is
# below what English text takes in any BPE vocabulary here (SmolLM2: ~4.2), so the estimate errs short.
CHARS_PER_TOKEN = 3
CUT_MARK = "\n[... {n} characters cut to fit the model's context window ...]\n"


def context_window(llm: object) -> int | None:
    """The LLM's context window in tokens (a ``context_window`` attribute), or None when unknown."""
    value = getattr(llm, "context_window", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def fit_to_context(req: LLMRequest, window: int | None) -> tuple[LLMRequest, int]:
    """Cut ``req``'s prompt to the context window; returns (request, characters cut).

    The rule: the messages (plus the JSON-schema instruction a backend may add) may hold
    ``(window - max_tokens) * CHARS_PER_TOKEN`` characters. While they hold more, the longest message
    loses the middle of its text - the last message (which ends with the question) only when no other
    can shrink: of what stays, the first third and the last two thirds are kept (RAG prompts put the
    instructions first and the question last), and a marker saying how much was cut takes the place
    of the rest. ``window=None`` leaves the request as it is; a window that leaves
    no room at all is a ConfigError.
    """
    if window is None:
        return req, 0
    budget = (window - req.max_tokens) * CHARS_PER_TOKEN
    if req.json_schema is not None:
        budget -= len(JSON_INSTRUCTION) + len(json.dumps(req.json_schema, sort_keys=True)) + 2
    mark_len = len(CUT_MARK.format(n=10**12))
    if budget < mark_len * len(req.messages):
        raise ConfigError(f"the prompt cannot fit: a context window of {window} tokens less max_tokens "
                          f"{req.max_tokens} leaves no room for it")
    msgs = list(req.messages)
    cut = 0
    while (excess := sum(len(m.content) for m in msgs) - budget) > 0:
        # the longest message that can still shrink, the last one (it ends with the question) last
        order = [j for j in range(len(msgs) - 1) if len(msgs[j].content) > mark_len]
        order = order or [j for j in (len(msgs) - 1,) if len(msgs[j].content) > mark_len]
        if not order:
            break  # every message is down to its marker: within the budget, by the check above
        i = max(order, key=lambda j: len(msgs[j].content))
        text = msgs[i].content
        target = max(len(text) - excess, mark_len)  # the message's new length, marker included
        marker = CUT_MARK.format(n=len(text) - max(0, target - mark_len))
        keep = max(0, target - len(marker))
        head = keep // 3
        msgs[i] = Message(msgs[i].role, text[:head] + marker + text[len(text) - (keep - head):] if keep else marker)
        cut += len(text) - keep
    return (replace(req, messages=tuple(msgs)), cut) if cut else (req, 0)


JSON_INSTRUCTION = (
    "Reply with a single JSON value only (no prose, no code fences) that follows this JSON schema:\n"
)


def with_json_instruction(req: LLMRequest) -> tuple[Message, ...]:
    """Messages of ``req`` with the JSON-schema instruction appended to the last user message.

    Used by backends that cannot constrain decoding to a schema.
    """
    if req.json_schema is None:
        return req.messages
    note = JSON_INSTRUCTION + json.dumps(req.json_schema, sort_keys=True)
    msgs = list(req.messages)
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role == "user":
            msgs[i] = Message("user", f"{msgs[i].content}\n\n{note}")
            return tuple(msgs)
    return (*msgs, Message("user", note))
