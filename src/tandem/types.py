"""Typed objects shared by every stage: corpus -> index -> retrieve -> method -> eval."""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tandem.errors import Cancelled

#: How library code reports long work: ``on_progress(done, total)`` with ``done`` rising to ``total``
#: (texts encoded, optimizer steps, ...). Library code never draws bars; the CLI does.
OnProgress = Callable[[int, int], None]


def doc_id_for(title: str, text: str) -> str:
    """Stable content id of a passage: the same title+text gets the same id in every dataset."""
    digest = hashlib.sha1(f"{title.strip()}\n{text.strip()}".encode("utf-8")).hexdigest()
    return digest[:16]


@dataclass(frozen=True, slots=True)
class Document:
    """A passage of a corpus."""

    id: str
    title: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def contents(self) -> str:
        """Title and text as one string, the form encoders and BM25 index."""
        return f"{self.title}\n{self.text}" if self.title else self.text

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "title": self.title, "text": self.text}
        if self.metadata:
            out["metadata"] = self.metadata
        return out


@dataclass(frozen=True, slots=True)
class Question:
    """A question with its gold answers and (when the dataset has them) gold passage ids."""

    id: str
    text: str
    answers: tuple[str, ...] = ()
    gold_doc_ids: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.text,
            "golden_answers": list(self.answers),
            "gold_doc_ids": list(self.gold_doc_ids),
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved document: its id, score, 1-based rank and which retriever produced it."""

    doc_id: str
    score: float
    rank: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "score": self.score, "rank": self.rank, "source": self.source}


@dataclass(frozen=True, slots=True)
class LLMCall:
    """One LLM call inside a method: which role made it, the prompt, the output and its cost.

    Structured calls (a JSON schema sent) also say whether the backend decoded under the schema
    (``constrained``); the last call of a structured exchange carries its ``outcome``: ``parsed``
    (first reply usable), ``repaired`` (a repair round or a retry was needed) or ``fallback``
    (no reply usable: the method fell back). A reply the method's parser rejected carries the
    parser's message in ``parse_error`` and the text it rejected in ``raw_reply``.
    """

    role: str
    messages: tuple[dict[str, str], ...]
    output: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False
    structured: bool = False
    constrained: bool = False
    outcome: str | None = None
    cut_chars: int = 0  # prompt characters cut to fit the context window (tandem.llm.base.fit_to_context)
    reused_tokens: int = 0  # prompt tokens the backend took from its prefix cache (tandem.llm.prefix_ledger)
    parse_error: str | None = None  # why the reply could not be parsed (tandem.errors.ParseError)
    raw_reply: str | None = None  # the text the parser rejected

    def to_dict(self) -> dict[str, Any]:
        data = {
            "role": self.role, "messages": list(self.messages), "output": self.output,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "latency_s": round(self.latency_s, 4), "cached": self.cached,
        }
        if self.cut_chars:
            data["cut_chars"] = self.cut_chars
        if self.reused_tokens:
            data["reused_tokens"] = self.reused_tokens
        if self.structured:
            data.update(structured=True, constrained=self.constrained, outcome=self.outcome)
        elif self.outcome is not None:  # a text reply read for a marker or a non-empty answer
            data["outcome"] = self.outcome
        if self.parse_error is not None:
            data.update(parse_error=self.parse_error, raw_reply=self.raw_reply)
        return data


@dataclass(slots=True)
class Step:
    """One step of a method: the queries it issued, the hits it got, its LLM calls, and notes
    (a thought, an outline snapshot, ...), in the order they happened."""

    name: str
    queries: list[str] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    llm_calls: list[LLMCall] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "queries": self.queries, "hits": [h.to_dict() for h in self.hits],
            "llm_calls": [c.to_dict() for c in self.llm_calls], "notes": self.notes,
        }


@dataclass
class TraceObserver:
    """Watches the traces made while it is current (:func:`observe_traces`): ``on_step(i, step)`` gets
    each step once it is complete (when the next one starts; the caller sends the last one), and a
    set ``cancelled`` event stops the method at its next step or LLM call with :class:`Cancelled`."""

    on_step: Callable[[int, Step], None]
    cancelled: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled("cancelled: the client went away")


_OBSERVER: ContextVar[TraceObserver | None] = ContextVar("tandem_trace_observer", default=None)


def current_observer() -> TraceObserver | None:
    """The observer of traces made in this context, if any."""
    return _OBSERVER.get()


@contextlib.contextmanager
def observe_traces(observer: TraceObserver) -> Iterator[TraceObserver]:
    """Make ``observer`` watch every Trace created in this context (the HTTP server's live stream)."""
    token = _OBSERVER.set(observer)
    try:
        yield observer
    finally:
        _OBSERVER.reset(token)


@dataclass(slots=True)
class Trace:
    """Everything a method did for one question."""

    steps: list[Step] = field(default_factory=list)
    docs_read: list[str] = field(default_factory=list)
    observer: TraceObserver | None = field(default_factory=current_observer, repr=False, compare=False)

    def add(self, step: Step) -> Step:
        if self.observer is not None:
            self.observer.check()
            if self.steps:
                self.observer.on_step(len(self.steps) - 1, self.steps[-1])
        self.steps.append(step)
        return step

    def read(self, doc_ids: list[str]) -> None:
        """Record documents shown to the LLM (first occurrence order)."""
        for d in doc_ids:
            if d not in self.docs_read:
                self.docs_read.append(d)

    @property
    def llm_calls(self) -> list[LLMCall]:
        return [c for s in self.steps for c in s.llm_calls]

    @property
    def tokens(self) -> int:
        return sum(c.prompt_tokens + c.completion_tokens for c in self.llm_calls)

    def protocol(self) -> dict[str, dict[str, int]]:
        """Per role, how its structured exchanges went (see :func:`protocol_counts`)."""
        return protocol_counts(self.llm_calls)

    def reuse(self) -> dict[str, dict[str, int]]:
        """Per role, its prompt tokens and those the backend took from its prefix cache."""
        return reuse_counts(self.llm_calls)

    def to_dict(self) -> dict[str, Any]:
        return {"steps": [s.to_dict() for s in self.steps], "docs_read": self.docs_read}


@dataclass(slots=True)
class Answer:
    """A method's answer to one question, with the trace that produced it."""

    question_id: str
    text: str
    trace: Trace = field(default_factory=Trace)
    method: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"question_id": self.question_id, "answer": self.text, "method": self.method, "trace": self.trace.to_dict()}


OUTCOMES = ("parsed", "repaired", "fallback")
PROTOCOL_KEYS = ("calls", "schema_decoded", "parsed_first", "repaired", "fell_back")


def protocol_counts(calls: list[LLMCall]) -> dict[str, dict[str, int]]:
    """Per role: structured exchanges (``calls``), those decoded under their schema, parsed from the
    first reply, parsed after a repair or retry, and fallen back. Repair calls count with their role."""
    counts: dict[str, dict[str, int]] = {}
    for call in calls:
        if call.outcome is None:
            continue
        row = counts.setdefault(call.role.split(":", 1)[0], dict.fromkeys(PROTOCOL_KEYS, 0))
        row["calls"] += 1
        row["schema_decoded"] += int(call.constrained)
        row[{"parsed": "parsed_first", "repaired": "repaired", "fallback": "fell_back"}[call.outcome]] += 1
    return counts


REUSE_KEYS = ("prompt_tokens", "reused_tokens")


def reuse_counts(calls: list[LLMCall]) -> dict[str, dict[str, int]]:
    """Per role (repair calls with their role): prompt tokens sent and those taken from the prefix cache.
    Replies replayed from the response cache are left out: no engine computed them."""
    counts: dict[str, dict[str, int]] = {}
    for call in calls:
        if call.cached:
            continue
        row = counts.setdefault(call.role.split(":", 1)[0], dict.fromkeys(REUSE_KEYS, 0))
        row["prompt_tokens"] += call.prompt_tokens
        row["reused_tokens"] += call.reused_tokens
    return counts


def merge_protocol(rows: list[dict[str, dict[str, int]]],
                   keys: tuple[str, ...] = PROTOCOL_KEYS) -> dict[str, dict[str, int]]:
    """Sum per-role counts (protocol counts, or ``keys=REUSE_KEYS`` reuse counts), e.g. over a run's questions."""
    total: dict[str, dict[str, int]] = {}
    for row in rows:
        for role, counts in row.items():
            acc = total.setdefault(role, dict.fromkeys(keys, 0))
            for key in keys:
                acc[key] += int(counts.get(key, 0))
    return total
